"""One number, one source: figures generated into notes (report.figures), checked against the records.

(a) known answers of the markers on a tiny synthetic results folder; (b) every committed marker already
holds what the records give (refilling changes nothing); (c) no note quotes a mean ± sd, or a p-value next
to one of its folder's runs, outside a marker; (d) the README headline, results/LEADERBOARD.md and each
folder's table.md give the same figures for the same row."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from seq2seq_zoo.report import figures as F

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
DOCS = REPO / "docs" / "experiments.md"
NOTES = sorted(RESULTS.rglob("NOTES.md"))

TABLE = """LEAD row (samsum): lead ... test ROUGE-1 31.76.

**Settings that do not vary** (left out of the table): hidden 128.

| run | vs LEAD | decode | seeds | R-1 | R-2 | len |
|---|---|---|---|---|---|---|
| rl | above | default | 1, 2, 3, 4, 5 | 39.54 ± 0.33 [38.40, 40.62] | 16.90 ± 0.29 [15.86, 17.91] | 12.5 ± 1.1 |
| rl | above | trigram-lp2 | 1, 2, 3, 4, 5 | 42.10 ± 0.26 [41.10, 43.10] | 18.38 ± 0.32 [17.41, 19.37] | 22.1 ± 1.4 |
| oracle (upper bound) | | default | 1 | 50.00 [49.00, 51.00] | 20.00 [19.00, 21.00] | 30.0 |
| lead | LEAD row | default | 1 | 31.76 [30.94, 32.57] | 8.93 [8.29, 9.59] | 31.3 |

- **Seeds**: 1, 2, 3, 4, 5
"""
FINDINGS = [{"claim": "rl > rl@init", "a": "rl", "b": "rl@init", "metric": "rouge1", "verdict": "holds",
             "mean_a": 39.543, "mean_b": 37.576, "diff": 1.9671, "ci": [1.1251, 2.7865], "p": 0.00812,
             "perm_p": 0.0625, "n_a": 5, "n_b": 5, "pooled": {"p": 0.0004}},
            {"claim": "rl > lead", "a": "rl", "b": "lead", "metric": "rouge1", "verdict": "not run"}]


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "results" / "scst"
    d.mkdir(parents=True)
    (d / "table.md").write_text(TABLE)
    (d / "findings.json").write_text(json.dumps(FINDINGS))
    return d


def fig(spec, body="?"):
    return f"<!-- fig: {spec} -->{body}<!-- /fig -->"


# ------------------------------------------------------------------------------------ (a) known answers
@pytest.mark.parametrize("spec, want", [
    ("rl/trigram-lp2 R-1", "42.10 ± 0.26 (5 seeds)"), ("rl R-1", "39.54 ± 0.33 (5 seeds)"),
    ("rl/trigram-lp2 R-1 mean", "42.10"), ("rl/trigram-lp2 R-1 sd", "0.26"),
    ("rl/trigram-lp2 R-1 ms", "42.10 ± 0.26"), ("rl/trigram-lp2 R-1 ci", "[41.10, 43.10]"),
    ("rl/trigram-lp2 R-1 seeds", "5"), ("rl R-2 cell", "16.90 ± 0.29 [15.86, 17.91]"),
    ("rl/trigram-lp2 len", "22.1 ± 1.4 (5 seeds)"), ("lead R-1", "31.76 (1 seed)"), ("oracle R-1 mean", "50.00"),
    ('claim "rl > rl@init"', "holds (diff 1.97 [1.13, 2.79], p = 0.008)"),
    ('claim "rl > rl@init" p', "p = 0.008"), ('claim "rl > rl@init" verdict', "holds"),
    ('claim "rl > rl@init" diff', "1.97"), ('claim "rl > rl@init" ci', "[1.13, 2.79]"),
    ('claim "rl > rl@init" means', "39.54 vs 37.58"), ('claim "rl > rl@init" seeds', "5 v 5 seeds"),
    ('claim "rl > rl@init" perm_p', "p = 0.062"), ('claim "rl > rl@init" pooled_p', "p < 0.001"),
    ('claim "rl > lead"', "not run"),
])
def test_marker_known_answers(folder, spec, want):
    assert F.figure(spec, folder) == want


def test_other_folder_and_errors(folder):
    other = folder.parent / "profile" / "exp"
    other.mkdir(parents=True)
    assert F.figure("../../scst:rl/trigram-lp2 R-1 mean", other) == "42.10"
    for spec, why in [("rl/beam9 R-1", "no row `rl/beam9`"), ("rl R-9", "no column `R-9`"),
                      ("lead R-1 sd", "has no sd"), ('claim "rl > x"', "no finding"), ("rl R-1 bogus", "expected"),
                      ('claim "rl > lead" p', "has no p"), ("nowhere:rl R-1", "table.md: not there")]:
        with pytest.raises(F.FigureError, match=re.escape(why)):
            F.figure(spec, folder)


def test_fill_rewrites_only_changed_figures(folder):
    notes = folder / "NOTES.md"
    claim = 'claim "rl > rl@init" p'
    notes.write_text("Best: " + fig("rl/trigram-lp2 R-1", "42.10 ± 0.35 (3 seeds)") + "; the claim " + fig(claim) + ".\n")
    assert F.fill_notes(folder) is True
    want = "Best: " + fig("rl/trigram-lp2 R-1", "42.10 ± 0.26 (5 seeds)") + "; the claim " + fig(claim, "p = 0.008") + ".\n"
    assert notes.read_text() == want
    before = notes.stat().st_mtime_ns
    assert F.fill_notes(folder) is False          # nothing changed: not written at all
    assert notes.stat().st_mtime_ns == before and notes.read_text() == want


def test_bad_marker_is_named_with_its_line_and_kept(folder):
    notes = folder / "NOTES.md"
    notes.write_text("intro\n\n" + fig("rl/none R-1", "1.00") + "\n")
    got = []
    assert F.fill_notes(folder, warn=got.append) is False
    assert len(got) == 1 and f"{notes}:3:" in got[0] and "no row `rl/none`" in got[0]
    assert "1.00" in notes.read_text()


def test_unmarked_figures_are_found(folder):
    text = ("rl scores 42.10 ± 0.26 here.\n\n"
            f"Marked: {fig('rl R-1 ms', '39.54 ± 0.33')}; quoted: <!-- q: Gliwa et al. 2019 -->40.08 ± 0.1<!-- /q -->.\n\n"
            "`rl > rl@init` holds, p = 0.008.\n\nA general remark: p = 0.05 is the threshold.\n")
    got = F.unmarked(text, {"rl", "lead"})
    assert got == [(1, "42.10 ± 0.26"), (5, "p = 0.008")]
    assert [f for _, f in F.unmarked(text, None)] == ["42.10 ± 0.26", "p = 0.008", "p = 0.05"]


def test_build_report_fills_notes_and_readme_shows_them(tmp_path):
    """Through ``zoo report``'s own builder, on a copy of a small committed folder (no plots redrawn): the
    note's stale figure is refilled from the table just written, and the README embeds the filled note."""
    import shutil
    from seq2seq_zoo.report import build_report
    exp_dir = tmp_path / "dialogsum_transformer"
    shutil.copytree(RESULTS / "cpu_xl" / "dialogsum_transformer", exp_dir)
    (exp_dir / "NOTES.md").write_text("Seen: " + fig("strong R-1", "99.99 (7 seeds)") + ".\n")
    build_report(exp_dir, plots=())
    want = F.figure("strong R-1", exp_dir)
    cell = F.parse_table((exp_dir / "table.md").read_text())[("strong", "default")]["R-1"]
    assert re.fullmatch(r"\d+\.\d\d \[[\d.]+, [\d.]+\]", cell) and want == cell.split(" [")[0] + " (1 seed)"
    assert fig("strong R-1", want) in (exp_dir / "NOTES.md").read_text()
    assert fig("strong R-1", want) in (exp_dir / "README.md").read_text()
    assert "99.99" not in (exp_dir / "README.md").read_text()


def test_docs_board_from_leaderboard_json(folder, tmp_path):
    root = folder.parent
    docs = tmp_path / "experiments.md"
    body = "Intro.\n<!-- board:start -->\nold\n<!-- board:end -->\n" + fig("scst:rl R-1 mean") + "\n"
    docs.write_text(body)
    assert F.fill_docs(root, docs) is True          # no leaderboard.json: the board is left as it is
    assert "old" in docs.read_text() and fig("scst:rl R-1 mean", "39.54") in docs.read_text()
    (root / "leaderboard.json").write_text(json.dumps({"rows": [
        {"dataset": "samsum", "task": None, "family": "pointer-generator", "folder": "scst", "run": "rl",
         "decoding": "trigram-lp2", "seeds": 5, "validation_mean": 41.234, "test_mean": 42.1, "candidates": []},
        {"dataset": "samsum", "task": "headline", "family": "LEAD", "folder": None, "run": None, "decoding": None,
         "seeds": 0, "validation_mean": None, "test_mean": None, "candidates": [], "reason": "no candidate"}]}))
    assert F.fill_docs(root, docs) is True
    text = docs.read_text()
    assert "\nold\n" not in text
    assert "| samsum |  | pointer-generator | [scst](../results/scst/README.md) | `rl/trigram-lp2` | 5 | 41.23 | " \
           "42.10 ± 0.26 | [41.10, 43.10] |" in text
    assert "| samsum | headline | LEAD | - | - | - | - | - | no candidate |" in text
    assert F.fill_docs(root, docs) is False


# ------------------------------------------------------------------------------------ (b) committed markers
def _marked_files():
    return [(p, p.parent) for p in NOTES] + ([(DOCS, RESULTS)] if DOCS.is_file() else [])


def test_committed_figures_match_the_records():
    problems, stale = [], []
    n = 0
    for path, base in _marked_files():
        text = path.read_text(encoding="utf-8")
        n += len(F.MARKER.findall(text))
        if F.fill_text(text, base, str(path.relative_to(REPO)), problems) != text:
            stale.append(str(path.relative_to(REPO)))
    assert not problems, "\n".join(problems)
    assert not stale, f"figures that differ from the records (run `zoo report`): {stale}"
    assert n > 100    # the notes do quote figures, through markers


# ------------------------------------------------------------------------------------ (c) unmarked figures
def test_no_unmarked_figures_in_notes_and_docs():
    bad = []
    for path, base in _marked_files():
        runs = None
        if path.name == "NOTES.md" and (base / "table.md").is_file():
            runs = {r for r, _ in F.folder_table(base)} | {f"{r}/{d}" for r, d in F.folder_table(base)}
        elif path.name == "NOTES.md":
            runs = set()
        bad += [f"{path.relative_to(REPO)}:{line}: {f}" for line, f in F.unmarked(path.read_text(encoding="utf-8"), runs)]
    assert not bad, ("figures copied by hand (write them as <!-- fig: ... --> markers, or <!-- q: SOURCE --> "
                     "for a figure that is not from these records):\n" + "\n".join(bad))


# ------------------------------------------------------------------------------------ (d) one row, one figure
def _md_tables(text: str):
    """Each markdown table of ``text`` as a list of {header: cell}."""
    out, head = [], None
    for line in text.splitlines() + [""]:
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip()[1:-1].split("|")]
            if head is None:
                head, rows = cells, []
                out.append(rows)
            else:
                rows.append(dict(zip(head, cells)))
        elif not line.startswith("|---"):
            head = None
    return out


def _folder_of(cell: str) -> str | None:
    m = re.search(r"\]\((?:results/)?([^)]+)/README\.md\)", cell)
    return m.group(1) if m else None


def _shown_rows():
    """(source, folder, run label, ROUGE-1 mean ± sd, CI, seed count) of each trained row of the README
    headline and of LEADERBOARD.md."""
    out = []
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- headline:start -->(.*?)<!-- headline:end -->", readme, re.S)
    sources = [("README headline", m.group(1) if m else "")]
    if (RESULTS / "LEADERBOARD.md").is_file():
        sources.append(("LEADERBOARD.md", (RESULTS / "LEADERBOARD.md").read_text(encoding="utf-8")))
    for name, text in sources:
        for rows in _md_tables(text):
            for r in rows:
                score = next((v for k, v in r.items() if k.startswith("ROUGE-1") and "validation" not in k), None)
                link = next((_folder_of(v) for v in r.values() if _folder_of(v)), None)
                run = r.get("run") or next((re.search(r"`([^`]+)`", v).group(1) for k, v in r.items()
                                            if "run" in k and re.search(r"`([^`]+)`", v)), None)
                if not (score and link and run and re.match(r"-?\d", score)):
                    continue
                seeds = r.get("seeds", "")
                n = int(seeds) if seeds.isdigit() and "," not in seeds and name.startswith("README") else \
                    len([s for s in seeds.split(",") if s.strip()])
                if n:   # LEAD rows in the headline show no seeds
                    out.append((name, link, run.strip("`").split(" (")[0], score.split(" [")[0], r.get("95% CI", ""), n))
    return out


def test_generated_files_agree_on_each_row():
    shown = _shown_rows()
    assert len([s for s in shown if s[0] == "README headline"]) >= 5, "the README headline rows were not found"
    bad = []
    for name, folder, run, ms, ci, n in shown:
        where = RESULTS / folder
        if not (where / "table.md").is_file():
            bad.append(f"{name}: `{run}` links {folder}, which has no table.md")
            continue
        try:
            got_ms = F.figure(f"{run} R-1 ms", where)
            got_ci = F.figure(f"{run} R-1 ci", where)
            got_n = int(F.figure(f"{run} R-1 seeds", where))
        except F.FigureError as e:
            bad.append(f"{name}: `{run}` ({folder}): {e}")
            continue
        if (ms, n) != (got_ms, got_n) or (ci and ci != got_ci):
            bad.append(f"{name}: `{run}` ({folder}) shows {ms} {ci} over {n} seeds; its table.md {got_ms} {got_ci} "
                       f"over {got_n}")
    assert not bad, "\n".join(bad)
