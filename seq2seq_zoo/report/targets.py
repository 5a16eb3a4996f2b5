"""Each dataset's ROUGE-1 target and how far the row chosen on validation is from it, generated from
``results/leaderboard.json``'s rows so that no note copies a figure by hand.

A target belongs to one model family (the pointer-generator line: pointer + coverage + SCST where a folder
trains that chain) and is either a number (the seed mean must reach it) or ``"lead"`` (the row must be
shown above the dataset's tuned LEAD row: the lower end of the two-level 95% CI of its difference to LEAD
above 0). The row judged is the one ``choose_rows`` chose for that family on validation, never the best
test mean, so a target is met or missed by the system a reader would pick without the test split.
"""
from __future__ import annotations

from seq2seq_zoo.report.comparators import DATASET_NAMES, TARGETS, row_key


def judge(target: float | str, row: dict) -> tuple[str, float | None]:
    """(verdict, gap) of a chosen row against ``target``: ``met`` / ``missed`` with the seed mean minus the
    target, or for ``"lead"`` ``above LEAD`` / ``level with LEAD`` / ``below LEAD`` with the mean difference
    to LEAD (shown only when its CI excludes 0); ``not run`` without a chosen row."""
    mean = row.get("test_mean")
    if row.get("run") is None or mean is None:
        return "not run", None
    if target == "lead":
        vs = row.get("over_lead")
        if not vs:
            return "no LEAD row", None
        diff, lo, hi = vs
        return ("above LEAD" if lo > 0 else "below LEAD" if hi < 0 else "level with LEAD"), diff
    gap = mean - float(target)
    return ("met" if gap >= 0 else "missed"), gap


def target_rows(rows: list[dict]) -> list[dict]:
    """One entry per dataset with a target: the target, the family's chosen row and the verdict."""
    out = []
    for d, (target, family, note) in TARGETS.items():
        row = next((r for r in rows if row_key(r) == d and r.get("family") == family), None)
        if row is None:
            continue
        verdict, gap = judge(target, row)
        out.append({"dataset": d, "target": target, "family": family, "note": note,
                    "folder": row.get("folder"), "run": row.get("run"), "decoding": row.get("decoding"),
                    "seeds": row.get("seeds"), "validation_basis": row.get("validation_basis"),
                    "test_mean": row.get("test_mean"), "test_sd": row.get("test_sd"),
                    "test_ci": row.get("test_ci"), "over_lead": row.get("over_lead"),
                    "verdict": verdict, "gap": gap})
    return out


def targets_markdown(targets: list[dict], prefix: str = "") -> str:
    """The targets as a Markdown table; ``prefix`` leads each results folder's link."""
    lines = ["| dataset | target | chosen on validation | chosen on | test ROUGE-1 | seeds | 95% CI | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for t in targets:
        name = DATASET_NAMES.get(t["dataset"], t["dataset"])
        goal = "above the tuned LEAD" if t["target"] == "lead" else f"≥ {float(t['target']):.1f}"
        goal += f" ({t['note']})" if t["note"] else ""
        if t["run"] is None:
            lines.append(f"| {name} | {goal} | {t['family']}: none chosen | | | | | not run |")
            continue
        run = t["run"] + (f"/{t['decoding']}" if t["decoding"] else "")
        mean = f"{t['test_mean']:.2f}" + (f" ± {t['test_sd']:.2f}" if t["test_sd"] is not None else "")
        ci = f"[{t['test_ci'][0]:.2f}, {t['test_ci'][1]:.2f}]" if t["test_ci"] else ""
        if t["target"] == "lead" and t["over_lead"]:
            d, lo, hi = t["over_lead"]
            verdict = f"{t['verdict']}: {d:+.2f} [{lo:+.2f}, {hi:+.2f}]"
        elif t["gap"] is not None:
            verdict = f"{t['verdict']} by {abs(t['gap']):.2f}" if t["gap"] else t["verdict"]
        else:
            verdict = t["verdict"]
        lines.append(f"| {name} | {goal} | {t['family']}: [{t['folder']}]({prefix}{t['folder']}/README.md) "
                     f"`{run}` | {t['validation_basis'] or ''} | {mean} | {t['seeds']} | {ci} | {verdict} |")
    return "\n".join(lines)
