#!/usr/bin/env python3
"""Is a model's gap to an extractive baseline a matter of length? Compare each summary with the baseline's
output cut to the same number of words, example by example, from the stored predictions only.

    python tools/length_matched.py results/inshorts_transformer/pg-seed*/decodes/nrep2/predictions.jsonl \
        --baseline results/inshorts_transformer/lead/predictions.jsonl

For each predictions file: the model's ROUGE-1 precision, recall and F1 (x 100, `rouge-score` with
stemming, the mean over each example's references), its mean length in words, the baseline's F1 over the
same examples, the baseline cut to the model's length on each example, and the share of the model's words
that occur in that cut (how much of what it writes comes from the span the baseline takes). A gap that
stays at equal length is about content, not length.
"""
import argparse
import json

from rouge_score import rouge_scorer


def read(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return {str(r["id"]): r for r in (json.loads(line) for line in f if line.strip())}


def prf(scorer, refs: list[str], text: str) -> tuple[float, float, float]:
    s = [scorer.score(ref, text)["rouge1"] for ref in refs]
    return tuple(100 * sum(getattr(x, k) for x in s) / len(s) for k in ("precision", "recall", "fmeasure"))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("predictions", nargs="+", help="a run's (or decoding variant's) predictions.jsonl")
    p.add_argument("--baseline", required=True, help="the baseline's predictions.jsonl (e.g. LEAD)")
    args = p.parse_args(argv)
    scorer = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
    base = read(args.baseline)
    print("| predictions | P | R | F1 | words | baseline F1 | baseline cut to the same words, F1 | model words in that cut |")
    print("|---|---|---|---|---|---|---|---|")
    for path in args.predictions:
        rows = [r for i, r in read(path).items() if i in base]
        n = len(rows)
        tot = [0.0] * 7
        for r in rows:
            words, lead = r["prediction"].split(), base[str(r["id"])]["prediction"].split()
            cut = lead[: len(words)]
            own = prf(scorer, r["references"], r["prediction"])
            span = {w.lower() for w in cut}
            vals = [*own, len(words), prf(scorer, r["references"], " ".join(lead))[2],
                    prf(scorer, r["references"], " ".join(cut))[2],
                    100 * sum(w.lower() in span for w in words) / max(len(words), 1)]
            tot = [a + b for a, b in zip(tot, vals)]
        m = [t / max(n, 1) for t in tot]
        print(f"| {path} | {m[0]:.2f} | {m[1]:.2f} | {m[2]:.2f} | {m[3]:.1f} | {m[4]:.2f} | {m[5]:.2f} | {m[6]:.1f}% |")


if __name__ == "__main__":
    main()
