#!/usr/bin/env python3
"""Re-score a run's predictions.jsonl WITHOUT seq2seq-zoo: only `rouge-score` is needed.

    python tools/rescore.py results/pe_ablation/tmax-seed1/predictions.jsonl

Prints ROUGE-1/2/L F1 x 100 with Porter stemming, mean and max over the references of each example,
so anyone can check the committed tables independently.
"""
import json
import sys

from rouge_score import rouge_scorer


def main(path: str) -> None:
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    mean = {k: 0.0 for k in ("rouge1", "rouge2", "rougeL")}
    best = dict(mean)
    n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            scores = [scorer.score(ref, row["prediction"]) for ref in row["references"]]
            for k in mean:
                vals = [s[k].fmeasure for s in scores]
                mean[k] += sum(vals) / len(vals)
                best[k] += max(vals)
            n += 1
    print(f"{n} examples")
    for k in mean:
        print(f"{k:<7} mean-over-refs {100 * mean[k] / n:6.2f}   max-over-refs {100 * best[k] / n:6.2f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
