"""Figures generated into hand-written Markdown (``results/<exp>/NOTES.md``, ``docs/experiments.md``), so a
note quotes a result without copying it: one number, one source.

A figure is a marker whose content ``zoo report`` writes from the experiment folder's own generated files,
the grouped table (``table.md``: mean ± sd over seeds, the seeds, the 95% CI) and the judged findings
(``findings.json``)::

    <!-- fig: samsum-rl/trigram-lp2 R-1 -->42.10 ± 0.26 (5 seeds)<!-- /fig -->
    <!-- fig: samsum-rl/trigram-lp2 R-1 ci -->[41.10, 43.10]<!-- /fig -->
    <!-- fig: claim "samsum-rl > samsum-rl@init" -->holds (diff 1.97 [1.13, 2.79], p = 0.008)<!-- /fig -->
    <!-- fig: ../pointer_coverage:samsum-pg-sep R-1 mean -->...<!-- /fig -->   (another folder)

The spec is ``[FOLDER:]RUN[/DECODING] COLUMN [FORM]`` (COLUMN: a column of ``table.md``, quoted when it
holds a space; FORM: ``full`` (default), ``mean``, ``sd``, ``ms`` (mean ± sd), ``ci``, ``seeds`` (their
number) or ``cell``) or ``[FOLDER:]claim "CLAIM" [FIELD]`` (FIELD: ``full`` (default), ``verdict``, ``p``,
``diff``, ``ci``, ``means``, ``seeds``, ``perm_p`` (the permutation p over seeds), ``pooled_p`` (the pooled
example x seed test's p)). FOLDER is relative to the note's folder (in docs/experiments.md:
to the results folder). A figure that is not from these records (a published number, a tuning run that
left no record) is written ``<!-- q: SOURCE -->TEXT<!-- /q -->`` so a reader (and the check that no
figure goes unmarked, tests/test_figures.py) sees where it comes from.

docs/experiments.md also holds generated tables between ``<!-- board:start -->`` and ``<!-- board:end -->``
(the chosen rows) and ``<!-- targets:start -->`` and ``<!-- targets:end -->`` (each dataset's target,
``report/targets.py``), from ``results/leaderboard.json`` (left as they are when that file is absent).

The file is rewritten (atomically) only when a figure changed, so rebuilding unchanged records leaves the
checkout untouched. The values are read back from the generated files rather than recomputed: the note
then shows exactly what the table next to it shows, and checking every committed note takes no bootstrap.
Written here rather than with a template engine: a template renders a file from a separate source, while a
note is edited by hand and must keep every byte outside its markers as it is.
"""
from __future__ import annotations

import json
import math
import re
import shlex
from functools import lru_cache
from pathlib import Path

from seq2seq_zoo.errors import FigureError  # noqa: F401 (raised here; re-exported)
from seq2seq_zoo.report.targets import targets_markdown
from seq2seq_zoo.utils import atomic_write_text

MARKER = re.compile(r"<!-- fig: (?P<spec>.*?) -->(?P<body>.*?)<!-- /fig -->")
QUOTED = re.compile(r"<!-- q: (?P<source>.*?) -->(?P<body>.*?)<!-- /q -->", re.S)
BOARD = re.compile(r"(<!-- board:start -->\n)(?P<body>.*?)(<!-- board:end -->)", re.S)
TARGETS = re.compile(r"(<!-- targets:start -->\n)(?P<body>.*?)(<!-- targets:end -->)", re.S)
GROUP_FORMS = ("full", "mean", "sd", "ms", "ci", "seeds", "cell")
CLAIM_FIELDS = ("full", "verdict", "p", "diff", "ci", "means", "seeds", "perm_p", "pooled_p")
CELL = re.compile(r"^(?P<mean>-?[\d.]+)(?: ± (?P<sd>[\d.]+))?(?: (?P<ci>\[-?[\d.]+, -?[\d.]+\]))?$")
# what the check for unmarked figures looks for: a mean ± sd, and a p-value
MEAN_SD = re.compile(r"[-+]?\d+\.\d+\s?±\s?\d+(?:\.\d+)?")
P_VALUE = re.compile(r"\bp\s?(?:=|<|≈|~)?\s?0?\.\d+")


# ------------------------------------------------------------------------------------ the sources
def parse_table(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """{(run, decoding): {column: cell}} of a ``table.md``'s grouped table ("default" when the table
    has no decode column because every row shares its decoding)."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    head = None
    for line in text.splitlines():
        if not line.startswith("| "):
            head = None if not line.startswith("|---") else head
            continue
        cells = [c.strip() for c in line.strip()[1:-1].split("|")]
        if head is None:
            if cells[0] == "run":
                head = cells
            continue
        row = dict(zip(head, cells))
        run = re.sub(r" \(upper bound\)$", "", row["run"])
        rows[(run, row.get("decode") or "default")] = row
    return rows


@lru_cache(maxsize=256)
def _read(path: Path, mtime: float) -> str:
    return path.read_text(encoding="utf-8")


def _text(path: Path) -> str | None:
    try:
        return _read(path, path.stat().st_mtime_ns)
    except FileNotFoundError:
        return None


def folder_table(folder: Path) -> dict[tuple[str, str], dict[str, str]]:
    text = _text(Path(folder) / "table.md")
    if text is None:
        raise FigureError(f"{folder}/table.md: not there (run `zoo report` on {folder} first)")
    return parse_table(text)


def folder_findings(folder: Path) -> list[dict]:
    text = _text(Path(folder) / "findings.json")
    return json.loads(text) if text else []


# ------------------------------------------------------------------------------------ one figure
def _num(x, d: int = 2) -> str:
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{d}f}"


def _p(p) -> str:
    from seq2seq_zoo.report.significance import p_text
    t = p_text(p)
    return "p " + t if t.startswith("<") else f"p = {t}" if t else "p not computed"


def group_figure(rows: dict, run: str, column: str, form: str, where: str) -> str:
    name, _, decode = run.partition("/")
    key = (name, decode or "default")
    if key not in rows:
        raise FigureError(f"no row `{run}` in {where}/table.md (rows: "
                          + ", ".join(r if d == "default" else f"{r}/{d}" for r, d in rows) + ")")
    row = rows[key]
    if column not in row:
        raise FigureError(f"no column `{column}` in {where}/table.md (columns: {', '.join(row)})")
    cell = row[column]
    if form == "cell":
        return cell
    m = CELL.match(cell)
    if not m:
        raise FigureError(f"`{run}` {column} in {where}/table.md is `{cell}`, not a mean; use the form `cell`")
    n = len([s for s in row.get("seeds", row.get("seed", "")).split(",") if s.strip()]) or 1
    if form == "sd" and m["sd"] is None or form == "ci" and m["ci"] is None:
        raise FigureError(f"`{run}` {column} in {where}/table.md has no {form} (`{cell}`)")
    ms = m["mean"] + (f" ± {m['sd']}" if m["sd"] else "")
    return {"full": f"{ms} ({n} seed{'s' if n != 1 else ''})", "mean": m["mean"], "sd": m["sd"], "ms": ms,
            "ci": m["ci"], "seeds": str(n)}[form]


def claim_figure(judged: list[dict], claim: str, field: str, where: str) -> str:
    j = next((j for j in judged if j.get("claim") == claim), None)
    if j is None:
        raise FigureError(f"no finding `{claim}` in {where}/findings.json (findings: "
                          + ", ".join(f"`{j.get('claim')}`" for j in judged) + ")")
    d = 4 if j.get("metric") in ("best_val_loss", "bertscore_f1", "repetition", "unk_ratio") else 2
    have = "diff" in j and j["diff"] is not None
    ci = f"[{_num(j['ci'][0], d)}, {_num(j['ci'][1], d)}]" if j.get("ci") and j["ci"][0] is not None else ""
    if field == "verdict":
        return j["verdict"]
    if not have:
        if field == "full":
            return j["verdict"]
        raise FigureError(f"finding `{claim}` in {where}/findings.json is `{j['verdict']}`: it has no {field}")
    seeds = f"{j.get('n_a', '?')} v {j.get('n_b', '?')} seeds"
    return {"full": f"{j['verdict']} (diff {_num(j['diff'], d)}" + (f" {ci}" if ci else "") + f", {_p(j.get('p'))})",
            "p": _p(j.get("p")), "diff": _num(j["diff"], d), "ci": ci,
            "means": f"{_num(j.get('mean_a'), d)} vs {_num(j.get('mean_b'), d)}", "seeds": seeds,
            "perm_p": _p(j.get("perm_p")), "pooled_p": _p((j.get("pooled") or {}).get("p"))}[field]


def figure(spec: str, base: Path) -> str:
    """The content of one marker; ``base``: the folder FOLDER is relative to (and the default folder)."""
    try:
        parts = shlex.split(spec)
    except ValueError as e:
        raise FigureError(f"`{spec}`: {e}") from None
    if not parts:
        raise FigureError("empty figure marker")
    folder, sep, first = parts[0].rpartition(":")
    where = Path(base) / folder if sep else Path(base)
    if first == "claim":
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in CLAIM_FIELDS):
            raise FigureError(f"`{spec}`: expected [FOLDER:]claim \"CLAIM\" [{'|'.join(CLAIM_FIELDS)}]")
        return claim_figure(folder_findings(where), parts[1], parts[2] if len(parts) == 3 else "full", str(where))
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in GROUP_FORMS):
        raise FigureError(f"`{spec}`: expected [FOLDER:]RUN[/DECODING] COLUMN [{'|'.join(GROUP_FORMS)}]")
    return group_figure(folder_table(where), first, parts[1], parts[2] if len(parts) == 3 else "full", str(where))


# ------------------------------------------------------------------------------------ a whole file
def fill_text(text: str, base: Path, where: str = "", problems: list[str] | None = None) -> str:
    """``text`` with every marker's content written from the records; a marker that cannot be filled is
    kept as it is and named in ``problems`` (file:line: what is wrong)."""
    def one(m):
        try:
            return f"<!-- fig: {m['spec']} -->{figure(m['spec'], base)}<!-- /fig -->"
        except FigureError as e:
            if problems is not None:
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{where}:{line}: figure marker: {e}; fix the marker")
            return m.group(0)
    return MARKER.sub(one, text)


def fill_file(path: Path, base: Path, problems: list[str] | None = None, extra=None) -> bool:
    """Refill ``path``'s markers (and ``extra(text) -> text``); write it only when a figure changed."""
    path = Path(path)
    if not path.is_file():
        return False
    old = path.read_text(encoding="utf-8")
    new = fill_text(old, base, str(path), problems)
    if extra is not None:
        new = extra(new)
    if new == old:
        return False
    atomic_write_text(path, new)
    return True


def fill_notes(exp_dir: Path, warn=None) -> bool:
    """``zoo report``'s step for an experiment folder: the figures of its NOTES.md from its table.md and
    findings.json (written just before); ``warn(message)`` for each marker that names nothing."""
    problems: list[str] = []
    changed = fill_file(Path(exp_dir) / "NOTES.md", Path(exp_dir), problems)
    for p in problems:
        (warn or (lambda m: None))(p)
    return changed


# ------------------------------------------------------------------------------------ docs/experiments.md
def board_markdown(board: dict, root: Path) -> str:
    """The leaderboard's chosen rows as a table: the validation mean that chose each (and what it was
    measured on) and the test figures of its folder's table (mean ± sd over seeds, CI)."""
    lines = ["| dataset | task | family | folder | run | seeds | validation mean | test ROUGE-1 | 95% CI |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in board.get("rows", []):
        head = f"| {r.get('dataset', '')} | {r.get('task') or ''} | {r.get('family', '')} | "
        if not r.get("folder") or not r.get("run"):
            lines.append(head + f"- | - | - | - | - | {r.get('reason') or 'no candidate'} |")
            continue
        run = r["run"] + (f"/{r['decoding']}" if r.get("decoding") else "")
        try:
            rows = folder_table(Path(root) / r["folder"])
            test = group_figure(rows, run, "R-1", "ms", r["folder"])
            m = CELL.match(group_figure(rows, run, "R-1", "cell", r["folder"]))
            ci = (m["ci"] if m else "") or ""
        except FigureError:
            test, ci = _num(r.get("test_mean")), ""
        val = _num(r.get("validation_mean")) + (f" ({r['validation_basis']})" if r.get("validation_basis") else "")
        lines.append(head + f"[{r['folder']}](../results/{r['folder']}/README.md) | `{run}` | {r.get('seeds', '')} | "
                     f"{val} | {test} | {ci} |")
    return "\n".join(lines) + "\n"


def fill_docs(root: Path, docs: Path, warn=None) -> bool:
    """docs/experiments.md: its markers (FOLDER relative to ``root``) and the table of the leaderboard's
    chosen rows from ``root/leaderboard.json`` (kept as it is when that file is absent)."""
    board_path = Path(root) / "leaderboard.json"
    board = json.loads(board_path.read_text(encoding="utf-8")) if board_path.is_file() else None

    def extra(text):
        if board is None:
            return text
        text = BOARD.sub(lambda m: m.group(1) + board_markdown(board, root) + m.group(3), text)
        if "targets" not in board:
            return text
        table = targets_markdown(board["targets"], "../results/") + "\n"
        return TARGETS.sub(lambda m: m.group(1) + table + m.group(3), text)
    problems: list[str] = []
    changed = fill_file(docs, Path(root), problems, extra)
    for p in problems:
        (warn or (lambda m: None))(p)
    return changed


# ------------------------------------------------------------------------------------ unmarked figures
def without_markers(text: str) -> str:
    """``text`` with every generated figure and every quoted (``q``) figure blanked out, lines kept."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    return QUOTED.sub(blank, MARKER.sub(blank, TARGETS.sub(blank, BOARD.sub(blank, text))))


def unmarked(text: str, runs: set[str] | None = None) -> list[tuple[int, str]]:
    """(line, figure) of each mean ± sd outside a marker, and of each p-value outside a marker in a
    paragraph that names one of ``runs`` (every p-value when ``runs`` is None)."""
    clean = without_markers(text)
    out = [(clean.count("\n", 0, m.start()) + 1, m.group(0)) for m in MEAN_SD.finditer(clean)]
    pos = 0
    for para in re.split(r"(\n\s*\n)", clean):
        if runs is None or any(re.search(rf"(?<![\w-]){re.escape(r)}(?![\w-])", para) for r in runs):
            out += [(clean.count("\n", 0, pos + m.start()) + 1, m.group(0)) for m in P_VALUE.finditer(para)]
        pos += len(para)
    return sorted(out)
