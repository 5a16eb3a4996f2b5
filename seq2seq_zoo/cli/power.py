"""zoo power: the seeds each judged finding would need for a target power."""
from __future__ import annotations

from seq2seq_zoo.errors import UserError
from seq2seq_zoo.cli.common import checked_path


def cmd_power(args) -> int:
    """Seeds each current finding would need: from the judged findings (``zoo report`` writes them), the
    observed difference, the seed sd and the seeds per arm for the target power of the seed-level
    t-test (noncentral t), printed and written to <results>/seed_plan.json."""
    import json
    from seq2seq_zoo import stats
    from seq2seq_zoo.report.significance import ARCHIVE, FINDINGS_FILE
    from seq2seq_zoo.report.scope import tracked_filter
    from seq2seq_zoo.utils import atomic_write_text, dumps_json
    root = checked_path(args.results, "dir", "--results")
    if not 0 < args.power < 1:
        raise UserError(f"--power {args.power}: expected a number between 0 and 1, e.g. 0.8")
    # the findings git tracks: a user's own runs (the smoke run, their own experiments) never enter the
    # committed seed plan (report/scope.py)
    tracked = tracked_filter(root)
    files = sorted(f for f in set(root.glob(f"*/{FINDINGS_FILE}")) | set(root.glob(f"*/*/{FINDINGS_FILE}"))
                   if tracked(f))
    if not files:
        raise UserError(f"no judged findings under {root}/ (*/{FINDINGS_FILE}); run `zoo report` first")
    plan = []
    for f in files:
        exp = f.parent.relative_to(root).as_posix()
        if exp.startswith(ARCHIVE):
            continue
        judged = read_judged(f, f"run `zoo report {exp}` to rewrite it")
        for j in judged:
            pw = j.get("power") or {}
            sd, eff = pw.get("seed_sd"), pw.get("effect")
            d = abs(eff) / sd if eff is not None and sd and sd == sd and sd > 0 else None
            one = bool(pw.get("one_sample"))   # against a deterministic run, or matched seeds
            ns = [n for n in (j.get("n_a"), j.get("n_b")) if n]
            n_now = (max(ns) if one else min(ns)) if ns else 0
            need = stats.seeds_for_power(d, args.power, one_sample=one) if d else None
            plan.append({"experiment": exp, "claim": j["claim"], "metric": j.get("metric"), "verdict": j["verdict"],
                         "seeds": [j.get("n_a"), j.get("n_b")], "effect": eff, "seed_sd": sd,
                         "standardised_effect": d, "power_now": stats.power(n_now, d, one_sample=one) if d else None,
                         "seeds_for_power": need, "target_power": args.power})
    def num(x, f="{:.3f}"):
        return _num(x, f, "-")
    print(f"{'experiment':32} {'claim':48} {'seeds':>7} {'effect':>8} {'seed sd':>8} {'power':>6} {'seeds for':>9}")
    for r in plan:
        seeds = "v".join("-" if n is None else str(n) for n in r["seeds"])
        need = "-" if r["seeds_for_power"] is None else str(r["seeds_for_power"])
        print(f"{r['experiment'][:32]:32} {r['claim'][:48]:48} {seeds:>7} {num(r['effect'], '{:.4g}'):>8} "
              f"{num(r['seed_sd'], '{:.4g}'):>8} {num(r['power_now'], '{:.2f}'):>6} {need:>9}")
    out = root / "seed_plan.json"
    atomic_write_text(out, dumps_json({"target_power": args.power, "alpha": stats.ALPHA, "test": "two-sided t over "
                                       "seed means (Welch; one-sample against a deterministic baseline; paired for "
                                       "matched seeds), power from the noncentral t with the observed seed sd",
                                       "findings": plan}, indent=1, ensure_ascii=True) + "\n")
    print(f"wrote {out} (seeds per arm for {args.power:.0%} power; '-': no seed sd to plan with, e.g. one seed)")
    if args.notes:
        for exp in dict.fromkeys(r["experiment"] for r in plan):
            print(write_seed_plan_notes(root / exp / "NOTES.md", [r for r in plan if r["experiment"] == exp],
                                        args.power, stats.ALPHA, out.as_posix()))
    return 0


def read_judged(path, fix: str) -> list[dict]:
    """A findings.json as ``zoo power`` reads it: the findings' shape (results.SCHEMAS), finite numbers
    (utils.io), and the keys the plan uses: ``power`` an object (or null) whose ``effect`` and ``seed_sd`` are
    numbers or null, ``n_a``/``n_b`` whole numbers or null. Anything else is ``DamagedFile`` naming the file
    and the finding."""
    from seq2seq_zoo.errors import DamagedFile
    from seq2seq_zoo.results import read_checked
    judged = read_checked(path, fix, kind="findings.json")

    def number(x, whole=False):
        return x is None or (isinstance(x, int if whole else (int, float)) and not isinstance(x, bool))
    for i, j in enumerate(judged):
        pw = j.get("power")
        bad = ("'power' is not an object" if pw is not None and not isinstance(pw, dict) else
               "'power.effect' or 'power.seed_sd' is not a number" if isinstance(pw, dict) and not (
                   number(pw.get("effect")) and number(pw.get("seed_sd"))) else
               "'n_a' or 'n_b' is not a whole number" if not (number(j.get("n_a"), True)
                                                              and number(j.get("n_b"), True)) else None)
        if bad:
            raise DamagedFile(f"{path}: damaged findings file (finding {i}, {j['claim'][:60]!r}: {bad}); {fix}")
    return judged


SECTION = "## Seed plan"


def _num(x, fmt: str, missing: str = "") -> str:
    """``x`` formatted with ``fmt``; ``missing`` for None or NaN (no seed sd to plan with)."""
    return missing if x is None or x != x else fmt.format(x)


def seed_plan_table(rows: list[dict], target: float) -> str:
    """The Markdown table of one experiment's plan: verdict with seeds, effect, seed sd, power, seeds needed."""
    out = [f"| finding | verdict (seeds) | effect | seed sd | power now | seeds for {target:.0%} |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        n = r["seeds"]
        seeds = "" if n[0] is None else f" ({n[0]} v {n[1]})"
        need = "" if r["seeds_for_power"] is None else str(r["seeds_for_power"])
        out.append(f"| {r['claim']} | {r['verdict']}{seeds} | {_num(r['effect'], '{:+.4g}')} | "
                   f"{_num(r['seed_sd'], '{:.3g}')} | {_num(r['power_now'], '{:.2f}')} | {need} |")
    return "\n".join(out)


def write_seed_plan_notes(notes, rows: list[dict], target: float, alpha: float, source: str) -> str:
    """Write the plan table into the experiment's NOTES.md under "## Seed plan": the heading, a paragraph
    saying where the table comes from, and the table are rewritten; whatever follows the table in that
    section (the written plan: which seeds to run and why) is kept, so the decisions stay beside fresh
    figures. A NOTES.md without the section gets it appended. Returns a line saying what was done."""
    import datetime
    from seq2seq_zoo.utils import atomic_write_text
    if not notes.is_file():
        return f"{notes}: no NOTES.md, table not written"
    day = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    head = (f"{SECTION}\n\nFrom `zoo power` ({day}; `{source}`): per finding, the "
            "seed-level verdict, the observed effect and seed standard deviation, the power of the seed-level "
            f"test at the present seeds and the seeds per arm that would give {target:.0%} power for that effect "
            f"(two-sided, alpha {alpha:g}).\n\n" + seed_plan_table(rows, target) + "\n")
    text = notes.read_text(encoding="utf-8")
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == SECTION), None)
    if start is None:
        atomic_write_text(notes, text.rstrip("\n") + "\n\n" + head)
        return f"{notes}: seed plan table appended; write the plan (which seeds, why) under it"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    table_rows = [i for i in range(start + 1, end) if lines[i].lstrip().startswith("|")]
    # no table yet: the section's text is the plan, kept below the new table
    kept = lines[table_rows[-1] + 1:end] if table_rows else lines[start + 1:end]
    rest = "\n".join(kept).strip("\n")
    new = "\n".join(lines[:start]).rstrip("\n")
    new = (new + "\n\n" if new else "") + head + ("\n" + rest + "\n" if rest else "")
    if end < len(lines):
        new += "\n" + "\n".join(lines[end:]) + "\n"
    atomic_write_text(notes, new)
    return f"{notes}: seed plan table rewritten" + ("" if rest else "; write the plan (which seeds, why) under it")
