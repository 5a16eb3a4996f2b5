"""Judged findings as text: the findings table of an experiment's report, the verdict rules it states,
and ``results/FINDINGS.md``, every experiment folder's judged findings with the archived folders apart."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from seq2seq_zoo.registry import metric_columns
from seq2seq_zoo.utils import atomic_write_text

FINDINGS_FILE = "findings.json"


def _fmt(x, d=2) -> str:
    return "" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{d}f}"


def p_text(p) -> str:
    if p is None or not np.isfinite(p):
        return ""
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


VERDICTS = ("holds", "not shown", "reversed", "too few seeds")      # judged
NOT_JUDGED = ("not judged: degenerate", "not run")


def _seeds(j: dict) -> str:
    if "n_a" not in j:
        return "; ".join(f"{k}: {len(v)}" for k, v in j.get("seeds", {}).items())
    det = set(j.get("deterministic", []))
    return " v ".join("fixed" if side in det else str(n) for side, n in ((j["a"], j["n_a"]), (j["b"], j["n_b"])))


def findings_rows(judged: list[dict]) -> pd.DataFrame:
    rows = []
    digits = {c.key: c.digits for c in metric_columns()}
    for j in judged:
        d = 4 if j["metric"] == "best_val_loss" else digits.get(j["metric"]) or 2   # as the metric declares
        meas = "" if "diff" not in j else (
            f"{_fmt(j['mean_a'], d)} vs {_fmt(j['mean_b'], d)}" + (f" (= {j['scale']:g} x B)" if j["scale"] != 1 else "")
            + f"; diff {_fmt(j['diff'], d)}")
        claim = j["claim"] if j["metric"] in j["claim"] else f"{j['claim']} ({j['metric']})"
        pooled = j.get("pooled") or {}
        perm = "" if j.get("perm_min_p") is None else (   # None: not computed, or NaN stored as null
            f"{p_text(j['perm_p'])} (min {j['perm_min_p']:.3g})" if p_text(j.get("perm_p")) else f"(min {j['perm_min_p']:.3g})")
        verdict = j["verdict"] + (f" ({j['detail']})" if j.get("detail") and j["verdict"].startswith("not judged")
                                  else "") + "".join(f"; {x}" for x in j.get("flags", []))
        rows.append({"claim": claim, "source": j.get("source", ""), "measured (A vs B)": meas,
                     "seeds (A v B)": _seeds(j),
                     "p (seed-level t)": p_text(j.get("p")),
                     "95% CI of diff (two-level bootstrap)": f"[{_fmt(j['ci'][0], d)}, {_fmt(j['ci'][1], d)}]"
                     if "ci" in j and _fmt(j["ci"][0], d) else "",
                     "permutation p over seeds (smallest possible)": perm,
                     "pooled p (these trained runs on this test set)": p_text(pooled.get("p")),
                     "verdict": verdict, "with precision as a factor": _adjusted_cell(j, d),
                     "test-informed": "yes" if j.get("test_informed") else "",
                     "experiment": j.get("experiment", ""), "profile": j.get("profile", "")})
    df = pd.DataFrame(rows)
    if not df.empty and not (df["test-informed"] == "yes").any():
        df = df.drop(columns="test-informed")
    if not df.empty and not (df["with precision as a factor"] != "").any():
        df = df.drop(columns="with precision as a factor")
    return df


def _adjusted_cell(j: dict, d: int) -> str:
    """'diff 0.95 [0.41, 1.49], p 0.003 (without it 0.97, p 0.002); fp32 minus bfloat16 0.31 (p 0.410)' for a
    mixed-precision claim; why not, when the model cannot be fitted."""
    a = j.get("precision_adjusted") or {}
    if "why" in a:
        return f"not estimable: {a['why']}"
    if "diff" not in a:
        return ""
    cell = (f"diff {_fmt(a['diff'], d)} [{_fmt(a['ci'][0], d)}, {_fmt(a['ci'][1], d)}], p {p_text(a['p'])} "
            f"(without it {_fmt(a['diff_plain'], d)}, p {p_text(a['p_plain'])})")
    if a.get("shift") is not None:
        lo, hi = a["levels"]
        cell += f"; {hi} minus {lo} {_fmt(a['shift'], d)} (p {p_text(a['factor_p'])})"
    else:
        cell += f"; precision p {p_text(a['factor_p'])}"
    return cell


_RULES = ("Verdicts at p < 0.05, with the training seed as the unit: **holds** (significant in the claimed direction), "
          "**not shown** (not significant), **reversed** (significant the other way), **too few seeds** (a trained "
          "side has fewer than 2 seeds, so no seed-level test exists), **not judged: degenerate** (a run writes one "
          "summary for a third or more of its inputs, or half or more of its summaries are mostly `<unk>`; the "
          "reason is given), **not run** (a run it needs has no results yet). The test: Welch's t over the "
          "per-seed means; against a deterministic baseline (LEAD) a one-sample t with the trained side's seed "
          "spread; `RUN@init` claims a paired t over matched seeds. Also shown: the exact permutation p over seed "
          "labels with the smallest p it can reach with these seeds (0.1 at 3 v 3), a 95% two-level bootstrap CI "
          "of the difference (seeds, then examples paired across the two arms), and the pooled example x seed "
          "permutation test, which answers a narrower question: do these particular trained runs differ on this "
          "test set. *undertrained*: a run in the claim does not beat its dataset's (validation-tuned) LEAD row. "
          "*mixed precision*: the seeds compared were not all trained in one precision (`precision = \"auto\"` "
          "picks bf16 on CPUs with bf16 instructions and fp32 elsewhere); part of the difference or spread may "
          "be the precision's, so such a claim is also tested **with precision as a factor**: least squares over "
          "the seed values with the arm and the precision (the difference with a precision shift allowed for, "
          "its CI and p; the same model without the factor; the shift between precisions within arms and its p); "
          "*precision-sensitive*: the verdict of that model changes when the factor is added. "
          "*test-informed*: a choice behind the claim was made with test scores (see the experiment file). "
          "Method: docs/statistics.md.")


def findings_markdown(judged: list[dict]) -> list[str]:
    from seq2seq_zoo.report.tables import to_markdown
    if not judged:
        return []
    return ["## Declared findings", "", "Claims declared in the experiment file (`[[findings]]`). " + _RULES, "",
            to_markdown(findings_rows(judged).drop(columns=["experiment", "profile"], errors="ignore")), ""]


# superseded results: runs made before the correctness fixes (archive/*_before_fixes) and runs of an
# experiment file's earlier setup (archive/cnn_pointer_raw, archive/scst_token_ml)
ARCHIVE_DIRS = ("archive",)
ARCHIVE = tuple(f"{d}/" for d in ARCHIVE_DIRS)


def _tally(judged: list[dict]) -> str:
    c = Counter(j["verdict"] for j in judged)
    judged_n = sum(c[v] for v in VERDICTS)
    return (f"{judged_n} judged: {c['holds']} hold, {c['not shown']} not shown, {c['reversed']} reversed, "
            f"{c['too few seeds']} too few seeds; not judged: {c['not judged: degenerate']} degenerate, "
            f"{c['not run']} not run")


def write_findings_index(root: Path, warn=None) -> Path | None:
    """``results/FINDINGS.md``: every judged finding of every experiment folder under ``root``; the
    archived folders (``archive/``) in an archive section that the summary line does not count. A damaged
    findings.json is left out and ``warn(message)`` names it (default: a line on stderr)."""
    from seq2seq_zoo.results import read_checked
    from seq2seq_zoo.utils import DamagedFile
    root = Path(root)
    files = sorted(set(root.glob(f"*/{FINDINGS_FILE}")) | set(root.glob(f"*/*/{FINDINGS_FILE}")))
    from seq2seq_zoo.report.scope import tracked_filter
    tracked = tracked_filter(root)   # the committed findings only: results/smoke/ and a user's own runs stay out
    files = [p for p in files if tracked(p)]
    judged = []
    for p in files:
        try:
            found = read_checked(p, "run `zoo report` on its experiment folder to write it again")
        except DamagedFile as e:  # left out of the index, and said so
            import sys
            (warn or (lambda m: print(f"warning: {m} (left out of FINDINGS.md)", file=sys.stderr)))(str(e))
            continue
        except OSError:
            continue
        # the folder, not only the experiment's name: results/archive/X_before_fixes and results/X are
        # different runs of X
        judged += [{**j, "experiment": p.parent.relative_to(root).as_posix()} for j in found]
    if not files:
        return None
    from seq2seq_zoo.report.tables import to_markdown
    current = [j for j in judged if not j["experiment"].startswith(ARCHIVE)]
    archive = [j for j in judged if j["experiment"].startswith(ARCHIVE)]
    under = sum(1 for j in current if j["verdict"] in VERDICTS
                and any(x.startswith("undertrained") for x in j.get("flags", [])))
    informed = sum(1 for j in current if j["verdict"] in VERDICTS and j.get("test_informed"))
    mixed = [j for j in current if j["verdict"] in VERDICTS
             and any(x.startswith("mixed precision") for x in j.get("flags", []))]
    sensitive = sum(1 for j in mixed if any(x.startswith("precision-sensitive") for x in j["flags"]))
    text = "\n".join([
        "# Findings", "",
        "Generated by `zoo report` from the committed results: every published claim declared in an experiment file "
        "(`[[findings]]`), measured on this suite's runs. " + _RULES, "",
        f"**Current results: {len(current)} finding(s), {_tally(current)}.** Of the judged ones, {under} flagged "
        f"undertrained, {informed} test-informed, {len(mixed)} mixed precision ({sensitive} of them "
        f"precision-sensitive). The archive below is not counted.", "",
        to_markdown(findings_rows(current)) if current else "(none declared)", "",
        *(["## Archive: superseded results (not counted)", "",
           "Runs made before the suite's correctness fixes (`archive/*_before_fixes/`) or with an experiment "
           "file's earlier setup (the other `archive/` folders), kept for reference only: "
           f"{len(archive)} finding(s), {_tally(archive)}.", "",
           to_markdown(findings_rows(archive)), ""] if archive else [])])
    out = root / "FINDINGS.md"
    atomic_write_text(out, text)
    return out
