"""The documentation stays true: the generated configuration reference and headline table match the
code and the records, every relative link resolves, the own-data example loads, and the project
speaks of itself, not of how it was developed."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


# ------------------------------------------------------------------------------- configuration.md
def test_configuration_reference_is_generated_from_the_schema():
    from seq2seq_zoo.report import configdoc
    text = configdoc.generate()
    committed = (ROOT / configdoc.OUT).read_text(encoding="utf-8")
    assert committed == text, ("docs/configuration.md differs from the schema: run "
                               "`python -m seq2seq_zoo.report.configdoc` and commit the file")


def test_configuration_reference_lists_every_key():
    from seq2seq_zoo.report import configdoc
    import dataclasses
    mod = configdoc.schema
    text = configdoc.generate()
    for sec, cls in mod.SECTIONS.items():
        for f in dataclasses.fields(cls):
            assert f"| `{sec}.{f.name}` |" in text
    for k in mod.EXPERIMENT_KEYS | mod.RUN_KEYS:
        assert f"| `{k}` |" in text
    assert "(undocumented)" not in text, "a key of [experiment], a run key or a section has no description"
    # a range and a choice list from the schema appear with their key
    assert re.search(r"\| `train\.label_smoothing` \|.*must be in \[0, 1\)", text)
    assert re.search(r"\| `decode\.method` \|.*`beam`, `greedy`", text)


def test_field_comments_join_continuation_lines():
    from seq2seq_zoo.report.configdoc import field_comments
    from dataclasses import dataclass

    @dataclass
    class C:
        a: int = 1          # first part
                            # second part
        b: str = "x#y"      # b's note
        c: float = 0.5
    got = field_comments(C)
    assert got == {"a": "first part second part", "b": "b's note", "c": ""}


# ------------------------------------------------------------------------------------------- links
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
PENDING: set[str] = set()  # files linked before they exist (none now)


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    s = re.sub(r"[`*_]", "", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def _anchors(md: Path) -> set[str]:
    text = md.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", text, re.M)}


def _links(md: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.S)
    return [a or b for a, b in LINK.findall(text)]


def test_slug_rule():
    assert _slug("Your own corpus") == "your-own-corpus"
    assert _slug("Reader options (`data.options`)") == "reader-options-dataoptions"
    assert _slug("Recurrent models: `impl`") == "recurrent-models-impl"


@pytest.mark.parametrize("md", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(md):
    bad = []
    for link in _links(md):
        if re.match(r"[a-z]+:", link) or link.startswith("mailto:"):
            continue
        path, _, anchor = link.partition("#")
        target = (md.parent / path).resolve() if path else md
        rel = target.relative_to(ROOT).as_posix() if target.is_relative_to(ROOT) else str(target)
        if not target.exists():
            if rel not in PENDING:
                bad.append(f"{link} (no {rel})")
            continue
        if anchor and target.suffix == ".md" and anchor not in _anchors(target):
            bad.append(f"{link} (no heading #{anchor} in {rel})")
    assert not bad, f"{md.relative_to(ROOT)}: broken links: " + "; ".join(bad)


def test_readme_is_a_guide_not_a_notebook():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 350
    # CI installs and tests exactly as the README says
    assert 'pip install torch==2.13.0 && pip install -e ".[test]" && python -m pytest -q -n auto --dist loadfile' in text
    assert "pip install torch==2.13.0 && pip install -e . && zoo run experiments/smoke.toml" in text


# ----------------------------------------------------------------------------------- headline table
def _headline_rows() -> list[list[str]]:
    from seq2seq_zoo.report.leaderboard import between_markers
    body = between_markers((ROOT / "README.md").read_text(encoding="utf-8"))
    assert body, "README.md has no headline table between its markers"
    return [[c.strip() for c in line.strip("|").split("|")] for line in body.splitlines()[2:]]


def test_headline_table_matches_the_records():
    """Every model row is the best run of its family on its dataset over the committed records, with
    that run's mean ± sd and seed count; every LEAD row has its record's score. (The bootstrap CIs
    are recomputed by `zoo report`, not here.)"""
    from seq2seq_zoo.report import leaderboard as lb
    entries = lb.collect(ROOT / "results")
    best = {(lb.DATASET_NAMES.get(e.dataset, e.dataset), lb.FAMILIES.get(e.model, e.model)): e
            for e in lb.best_per_family(entries)}
    rows = _headline_rows()
    seen = set()
    for row in rows:
        dataset, what, score, seeds = row[0], row[1], row[2], row[3]
        m = re.match(r"([\w-]+): `([^`]+)` \((\w+)\)", what)
        if m:
            family, label, model = m.groups()
            e = best.get((dataset, family))
            assert e is not None, f"headline row {dataset}/{family}: no such run in the records"
            assert (e.group.label, e.model) == (label, model), f"{dataset}/{family}: best is {e.group.label}"
            assert score == lb._score(e), f"{dataset}/{label}: {score} in README, {lb._score(e)} in the records"
            assert seeds == str(len(e.group.rows))
            assert f"({'results/' + e.folder}/README.md)" in row[-1]
            seen.add((dataset, family))
        elif what.startswith("LEAD"):
            leads = {lb._f(e.mean()) for e in entries if e.model == "lead"
                     and lb.DATASET_NAMES.get(e.dataset, e.dataset) == dataset}
            assert score in leads, f"{dataset}: LEAD {score} is not a LEAD row of the records ({leads})"
    assert seen == set(best), f"families missing from the headline: {set(best) - seen}"


def test_headline_prefers_a_mean_over_seeds_to_a_single_lucky_seed():
    """The headline's best of a family is the best run with >= 3 seeds; a run with fewer heads the family
    only when no run of it has 3, whatever its mean."""
    from seq2seq_zoo.report import leaderboard as lb
    from seq2seq_zoo.report.significance import Group

    def entry(name, scores, model="pointer_generator"):
        rows = [{"run": f"{name}-seed{s}", "seed": s, "model": model, "data": {"dataset": "dialogsum"},
                 "train": {}, "eval": {"scores": {"rouge1": v}}} for s, v in enumerate(scores, 1)]
        return lb.Entry("exp", Group(name, None, rows), None)

    lucky, three, two = entry("rl", [0.40]), entry("pg", [0.37, 0.38, 0.38]), entry("cov", [0.39, 0.39])
    (best,) = lb.best_per_family([lucky, three, two])
    assert best is three
    (best,) = lb.best_per_family([lucky, two])   # no run with 3 seeds: the best mean
    assert best is lucky
    assert [e.group.name for e in lb.best_per_family([lucky, three, entry("t", [0.1], "transformer")])] == ["pg", "t"]


def test_leaderboard_from_records(tmp_path):
    """A results tree with one experiment (a trained run below LEAD, not converged, and its LEAD row)
    and an archive folder: the archive stays out, the marks and the link are there."""
    from seq2seq_zoo.report.leaderboard import HEADLINE_END, HEADLINE_START, write_leaderboard
    src = ROOT / "results" / "inshorts_transformer"
    results = tmp_path / "results"
    for dest in (results / "inshorts_transformer", results / "archive" / "old_exp_before_fixes"):
        for run in ("transformer", "lead60"):
            (dest / run).mkdir(parents=True)
            for name in ("record.json", "scores.jsonl"):
                shutil.copy(src / run / name, dest / run / name)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{HEADLINE_START}\nold\n{HEADLINE_END}\nrest\n", encoding="utf-8")
    written = write_leaderboard(tmp_path / "results", readme)
    assert tmp_path / "results" / "LEADERBOARD.md" in written
    board = (tmp_path / "results" / "LEADERBOARD.md").read_text(encoding="utf-8")
    assert "## Inshorts" in board
    assert "old_exp" not in board
    assert board.count("[inshorts_transformer](inshorts_transformer/README.md)") == 2
    row = next(line for line in board.splitlines() if line.startswith("| transformer |"))
    assert "25.44" in row and "**below LEAD**" in row and "not converged" in row
    assert "-22.53" in row                          # the paired difference to LEAD-60 (47.97)
    lead = next(line for line in board.splitlines() if line.startswith("| lead60 (LEAD row)"))
    assert "47.97" in lead
    head = readme.read_text(encoding="utf-8")
    assert "old" not in head and head.endswith("rest\n")
    assert "[inshorts_transformer](results/inshorts_transformer/README.md)" in head


def test_headline_decoding_replaces_the_runs_own_on_the_leaderboard(tmp_path):
    """``[[decode]] headline = true`` (noted by zoo run in experiment.json): the leaderboard and the README
    headline take every trained run with that decoding; without it, with the run's own."""
    import json
    from seq2seq_zoo.report import leaderboard as lb
    src = ROOT / "results" / "dialogsum_transformer"
    dest = tmp_path / "results" / "dialogsum_transformer"
    runs = [f"seed_reports-seed{s}" for s in (1, 2, 3)]
    for run in [*runs, "lead"]:
        (dest / run).mkdir(parents=True)
        for name in ("record.json", "scores.jsonl"):
            shutil.copy(src / run / name, dest / run / name)
        if run != "lead":
            shutil.copytree(src / run / "decodes" / "beam8_hf1", dest / run / "decodes" / "beam8_hf1")

    def best():
        (e,) = [e for e in lb.best_per_family(lb.collect(tmp_path / "results")) if e.kind == "trained"]
        return e

    def mean(path):
        return sum(json.loads((dest / r / path).read_text(encoding="utf-8"))["eval"]["scores"]["rouge1"]
                   for r in runs) / 3

    own = best()
    assert own.group.decode in (None, "default") and own.mean() == pytest.approx(mean("record.json"))
    (dest / "experiment.json").write_text(json.dumps({"experiment": "dialogsum_transformer", "file": None,
                                                      "profile": "cpu", "headline_decode": "beam8_hf1",
                                                      "findings": []}), encoding="utf-8")
    chosen = best()
    assert chosen.group.decode == "beam8_hf1" and chosen.group.label == "seed_reports/beam8_hf1"
    assert chosen.mean() == pytest.approx(mean("decodes/beam8_hf1/record.json")) != pytest.approx(own.mean())
    assert chosen.lead is not None and chosen.lead.rows[0]["model"] == "lead"
    assert [e.group.label for e in lb.collect(tmp_path / "results")].count("seed_reports") == 0


# ---------------------------------------------------------------------------------- own-data example
def test_own_data_example_loads_and_reads(monkeypatch, capsys):
    from seq2seq_zoo.cli import main
    from seq2seq_zoo.config import load_experiment
    monkeypatch.chdir(ROOT)
    exp = load_experiment("examples/own_data/experiment.toml")
    assert {s.model for s in exp.runs} == {"lead", "pointer_generator"}
    assert exp.runs[0].data.options["target"] == ["abstract", "abstract2"]
    assert main(["data", "info", "examples/own_data/experiment.toml"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"train\s+24 examples", out) and re.search(r"test\s+6 examples", out)


def test_own_data_example_runs_its_lead_row(monkeypatch, tmp_path):
    """`zoo run` on the example (its LEAD row: no training) reads the corpus, scores both references
    and writes the report."""
    import json
    from seq2seq_zoo.cli import main
    monkeypatch.chdir(ROOT)
    assert main(["run", "examples/own_data/experiment.toml", "--only", "lead", "--results", str(tmp_path),
                 "--no-progress"]) == 0
    rec = json.loads((tmp_path / "own_data" / "lead" / "record.json").read_text(encoding="utf-8"))
    assert rec["eval"]["n_examples"] == 6 and rec["eval"]["scores"]["rouge1"] > 0
    assert "rouge1_max" in rec["eval"]["scores"]          # two references: mean and max
    assert (tmp_path / "own_data" / "README.md").is_file()


# ------------------------------------------------------------------------------ development vocabulary
BANNED = [
    (r"\bsessions?\s*#\s*\d+", "a numbered development session"),
    (r"\bsessions?\s+\d+(\s*-\s*\d+)?\b", "a numbered development session"),
    (r"\b(this|next|previous|last|same|one|working|development|each|that|a new|new|later|earlier)"
     r" (working )?sessions?\b", "a development session"),
    (r"\bloans?\b", "a machine loan"),
    (r"\blent\b", "a lent machine"),
    (r"\b(first|second|third|this|next|previous|last|earlier)[ -]rounds?\b", "a development round"),
    (r"\bround\s+#?\d\b", "a development round"),
    (r"\bdevelopment (VM|machine)s?\b", "a development machine"),
    (r"\b(this|that|the same|a new|the new|the previous|each) VMs?\b", "which VM ran what"),
    (r"\bissues?\s*#?\d+", "an issue number"),
    (r"(?<![\w&/#])#\d{2,3}\b(?!#)", "an issue number"),
]
# superseded results keep their own text
ALLOWED_PREFIXES = ("results/archive/",)
TEXT_SUFFIXES = (".md", ".toml", ".py", ".txt", ".cfg", ".yml", ".yaml", ".sh", ".ini")


def _tracked_text_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [f for f in out.split() if not f.startswith(ALLOWED_PREFIXES) and f != "tests/test_docs.py"
            and (f.endswith(TEXT_SUFFIXES) or f.startswith(".ci/")) and (ROOT / f).is_file()]


def diary_hits(text: str) -> list[str]:
    return [f"{m.group(0)!r} ({why})" for pat, why in BANNED for m in re.finditer(pat, text, re.I)]


def test_vocabulary_patterns():
    assert diary_hits("as measured in session #21 on the lent GPU")
    assert diary_hits("the next session finds the same machine")
    assert diary_hits("fixed in issue 19.1; see #48")
    assert diary_hits("the first round's runs") and diary_hits("second-round correctness fixes")
    assert diary_hits("which development VM ran what") and diary_hits("on this VM")
    assert not diary_hits("#Person1# asks; results/archive/pe_ablation_before_fixes; colour #1f77b4; &#39;")
    assert not diary_hits("requests.Session(); a 2-core AMD EPYC VM; sessions of a chat corpus")


def test_no_development_diary_in_tracked_text():
    hits = {}
    for f in _tracked_text_files():
        found = diary_hits((ROOT / f).read_text(encoding="utf-8", errors="replace"))
        if found:
            hits[f] = found
    assert not hits, ("development-diary vocabulary in tracked files (describe the suite, its users, "
                      "commands, hardware, dates and commits instead):\n" + "\n".join(
                          f"  {f}: {len(h)}: {', '.join(sorted(set(h))[:6])}" for f, h in sorted(hits.items())))
