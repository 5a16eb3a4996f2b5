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
    # an objective's options: its own table's keys, each with its rule and the train.* key records store it as
    assert re.search(r"\| `train\.scst\.gamma` \| float \| `0\.9984` \| must be in \[0, 1\] \| `train\.rl_gamma` \|", text)
    assert re.search(r"\| `train\.scst\.logp` \|.*one of `sum`, `mean`", text)


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


def test_headline_table_is_built_from_leaderboard_json():
    """Every row of README's headline is a row of results/leaderboard.json (its run, decoding, mean ± sd,
    seeds and folder), and leaderboard.json is what `zoo report` would write from the committed records."""
    import json
    from seq2seq_zoo.report import leaderboard as lb
    board = json.loads((ROOT / "results" / lb.LEADERBOARD_JSON).read_text(encoding="utf-8"))
    rows = lb.choose_rows(lb.collect(ROOT / "results"), ROOT / "results", intervals=False)
    strip = lambda rs: [{k: v for k, v in r.items() if k not in ("test_ci", "over_lead")} for r in rs]
    assert strip(json.loads(lb.dumps_json(rows))) == strip(board["rows"]), "leaderboard.json is stale: run `zoo report`"
    readme = {(r[0], r[1]): r for r in _headline_rows()}
    for r in board["rows"]:
        name = lb.DATASET_NAMES.get(lb.row_key(r), lb.row_key(r))
        got = [v for (d, what), v in readme.items() if d == name and what.startswith(f"{r['family']}:")]
        assert got, f"{name}/{r['family']}: row missing from README's headline"
        if r["run"] is None or r["family"] == "LEAD":
            continue
        label = r["run"] + (f"/{r['decoding']}" if r["decoding"] else "")
        assert f"`{label}` ({r['model']})" in got[0][1]
        assert got[0][3] == lb._fmt_mean(r) and got[0][4] == str(r["seeds"])
        assert f"(results/{r['folder']}/README.md)" in got[0][-1]


def _entry(name, scores, model="pointer_generator", val=None, decode=None, folder="exp"):
    from seq2seq_zoo.report import leaderboard as lb
    from seq2seq_zoo.report.significance import Group
    rows = [{"run": f"{name}-seed{s}", "seed": s, "model": model, "data": {"dataset": "dialogsum"},
             "_decode": decode or "default", "train": {}, "eval": {"scores": {"rouge1": v}}, "_scores": {},
             **({"validation": {"n_examples": 10, "scores": {"rouge1": val[s - 1]}}} if val else {})}
            for s, v in enumerate(scores, 1)]
    return lb.Entry(folder, Group(name, decode, rows), None)


def test_rows_are_chosen_on_validation_among_runs_with_enough_seeds():
    """The family row is the best validation mean among runs with >= 3 seeds (a run with fewer competes only
    when no run has 3), whatever the test means; a run without a stored validation score cannot win."""
    from seq2seq_zoo.report import leaderboard as lb
    lucky = _entry("rl", [0.40], val=[50.0])
    three = _entry("pg", [0.30, 0.30, 0.30], val=[40.0, 41.0, 42.0])
    better_test = _entry("cov", [0.45, 0.45, 0.45], val=[30.0, 30.0, 30.0])
    unscored = _entry("big", [0.99, 0.99, 0.99])
    (row,) = [r for r in lb.choose_rows([lucky, three, better_test, unscored]) if r["family"] != "LEAD"]
    assert (row["run"], row["validation_basis"], row["validation_mean"]) == ("pg", "decoded", 41.0)
    assert {c["run"]: c["validation_mean"] for c in row["candidates"]} == {"rl": 50.0, "pg": 41.0, "cov": 30.0,
                                                                          "big": None}
    (row,) = [r for r in lb.choose_rows([lucky, _entry("two", [0.1, 0.1], val=[60.0, 60.0])])]
    assert row["run"] == "two"                      # no run with 3 seeds: the best validation mean of all
    (row,) = lb.choose_rows([unscored])
    assert row["run"] is None and "validation" in row["reason"]


def test_decoding_is_chosen_on_validation_and_a_mark_is_checked(tmp_path):
    """A run's decoding variants compete on their stored validation scores; the experiment file's
    headline mark is reported as agreeing, disagreeing or unverified."""
    from seq2seq_zoo.report import leaderboard as lb
    own = _entry("pg", [0.30] * 3, val=[40.0] * 3)
    good = _entry("pg", [0.20] * 3, val=[45.0] * 3, decode="trigram")
    bad = _entry("pg", [0.50] * 3, val=[39.0] * 3, decode="greedy")
    (row,) = lb.choose_rows([own, good, bad])
    assert (row["run"], row["decoding"]) == ("pg", "trigram")
    assert [e.group.label for e in lb.per_run([own, good, bad])] == ["pg/trigram"]
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "experiment.json").write_text('{"experiment": "exp", "headline_decode": "greedy", '
                                                      '"findings": []}', encoding="utf-8")
    (row,) = lb.choose_rows([own, good, bad], tmp_path)
    assert (row["marked_decoding"], row["mark"]) == ("greedy", "disagrees")


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
    assert (tmp_path / "results" / "leaderboard.json").is_file()
    head = readme.read_text(encoding="utf-8")
    assert "old" not in head and head.endswith("rest\n")
    assert "[inshorts_transformer](results/inshorts_transformer/README.md)" in head


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
