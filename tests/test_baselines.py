"""Extractive baselines (lead, longest, oracle): known answers, the trainable flag, config handling and an
end-to-end run through the same runner, records and report as a trained model."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from rouge_score import rouge_scorer

from seq2seq_zoo.cli import main
from seq2seq_zoo.config import ConfigError, load_experiment
from seq2seq_zoo.models.baselines import Lead, Longest, Oracle, ngrams, rouge_f, split_units
from seq2seq_zoo.registry import create_model

DIALOGUE = ("#Person1#: Hi. Do you have the red lamp?\n"
            "#Person2#: Yes, the red lamp is on the second shelf next to the blue books and the old radio.\n"
            "#Person1#: Great.\n"
            "#Person2#: It costs ten dollars.")
ARTICLE = "The council met on Monday. It voted to close the bridge! Repairs start in May? Nobody objected."


def ex(source: str, ref: str, i: str = "x"):
    return SimpleNamespace(id=i, source_text=source, references=[ref])


def test_split_units_known_answers():
    assert split_units(DIALOGUE, "turn")[2] == "#Person1#: Great."
    assert len(split_units(DIALOGUE, "turn")) == 4
    assert split_units(ARTICLE, "sentence") == ["The council met on Monday.", "It voted to close the bridge!",
                                                "Repairs start in May?", "Nobody objected."]
    assert split_units("a  b\nc", "word") == ["a", "b", "c"]
    assert split_units(DIALOGUE, "auto") == split_units(DIALOGUE, "turn")      # several lines: turns
    assert split_units(ARTICLE, "auto") == split_units(ARTICLE, "sentence")    # one line: sentences
    assert split_units("a\r\nb\r\n\r\n", "turn") == ["a", "b"]                 # SAMSum's line ends


def test_lead_and_longest_known_answers():
    assert Lead(unit="turn", k=2).summary(DIALOGUE) == ("#Person1#: Hi. Do you have the red lamp? #Person2#: Yes, the "
                                                        "red lamp is on the second shelf next to the blue books and "
                                                        "the old radio.")
    assert Lead(unit="word", k=3).summary(ARTICLE) == "The council met"
    assert Lead(unit="sentence", k=10).summary(ARTICLE) == ARTICLE  # k beyond the source: all of it
    # the two longest turns, in source order (turn 2 is the longest, then turn 1 and 4 tie at 7 words: the earlier)
    assert Longest(unit="turn", k=2).summary(DIALOGUE) == " ".join(split_units(DIALOGUE, "turn")[:2])
    assert Longest(unit="sentence", k=1).summary(ARTICLE) == "It voted to close the bridge!"


def test_lead_choose_k_on_validation():
    # references that are exactly the first two sentences: lead-2 is best
    val = [ex(ARTICLE, "The council met on Monday. It voted to close the bridge!")] * 3
    m = Lead(unit="sentence", k=1, choose_k=[1, 2, 3])
    info = m.tune(val)
    assert m.k == 2 and info["k"] == 2
    assert info["validation_rouge1"]["2"] == pytest.approx(100.0)
    assert info["validation_rouge1"]["1"] < 100.0
    assert Lead(k=3).tune(val) == {"k": 3}  # nothing to choose


def test_rouge_f_equals_rouge_score():
    sc = rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=True)
    o = Oracle()
    for cand, ref in [("the cats were running home", "a cat runs home"), ("x y z", "p q"), ("", "a b"),
                      ("red lamp red lamp", "the red lamp")]:
        c, r = o._tokens(cand), o._tokens(ref)
        s = sc.score(ref, cand)
        assert rouge_f(c, ngrams(r, 1), 1) == pytest.approx(s["rouge1"].fmeasure, abs=1e-12)
        assert rouge_f(c, ngrams(r, 2), 2) == pytest.approx(s["rouge2"].fmeasure, abs=1e-12)


def _objective(text: str, ref: str) -> float:
    o = Oracle()
    c, r = o._tokens(text), o._tokens(ref)
    return rouge_f(c, ngrams(r, 1), 1) + rouge_f(c, ngrams(r, 2), 2)


def test_oracle_is_an_upper_bound_on_fixtures():
    from conftest import tiny_pairs
    pairs = tiny_pairs(12) + [(DIALOGUE, "The red lamp costs ten dollars."), (ARTICLE, "The bridge will close.")]
    for src, ref in pairs:
        oracle = Oracle(k=3).summary(src, ref)
        units = split_units(src, "auto")
        best_single = max(_objective(u, ref) for u in units)
        assert _objective(oracle, ref) >= best_single - 1e-12        # greedy's first pick is the best unit
        assert _objective(oracle, ref) >= _objective(Lead(k=1).summary(src), ref) - 1e-12
        assert _objective(oracle, ref) >= _objective(Longest(k=1).summary(src), ref) - 1e-12
    assert Oracle(unit="turn").summary(DIALOGUE, "The red lamp costs ten dollars.") == (
        "#Person1#: Hi. Do you have the red lamp? #Person2#: It costs ten dollars.")
    assert Oracle().summary(ARTICLE, "zzz qqq") == ""  # nothing overlaps: nothing chosen


def test_baselines_declare_nothing_to_train():
    for name in ("lead", "longest", "oracle"):
        m = create_model(name)
        assert m.trainable is False and sum(p.numel() for p in m.parameters()) == 0
        with pytest.raises(TypeError, match="extractive"):
            m(None)
    assert Oracle.upper_bound and not Lead.upper_bound
    assert create_model("transformer", vocab_size=50, d_model=16, d_ff=16, heads=2, layers=1).trainable
    with pytest.raises(ValueError, match="option k"):
        Lead(k=0)
    with pytest.raises(ValueError, match="choose_k"):
        Lead(choose_k=[])
    with pytest.raises(ValueError, match="unit"):
        Lead(unit="paragraph")


BASE_EXP = """
[experiment]
name = "base"
dataset = "dialogsum"
metrics = ["rouge"]
seeds = [1, 2]
data_dir = "{data}"

[defaults]
model = "transformer"
d_model = 16
d_ff = 16
heads = 2
layers = 1
data.max_train = 8
data.max_src_len = 40
data.max_tgt_len = 16
train.epochs = 1
train.batch_size = 4
decode.max_len = 16
decode.beam_size = 2

[[runs]]
name = "lead"
model = "lead"
unit = "turn"
choose_k = [1, 2, 3]

[[runs]]
name = "longest"
model = "longest"
k = 1

[[runs]]
name = "oracle"
model = "oracle"
"""


def test_config_baselines_take_data_settings_only(tmp_path, dialogsum_dir):
    f = tmp_path / "e.toml"
    f.write_text(BASE_EXP.format(data=dialogsum_dir), encoding="utf-8")
    exp = load_experiment(f)
    names = [s.name for s in exp.runs]
    assert names == ["lead", "longest", "oracle"]               # one run each, not one per seed
    lead = exp.runs[0]
    assert lead.model_options == {"unit": "turn", "choose_k": [1, 2, 3]}  # no d_model from [defaults]
    assert lead.data.max_train == 8 and lead.data.max_src_len == 40       # data settings shared
    f.write_text(BASE_EXP.format(data=dialogsum_dir).replace("k = 1", "kk = 1"), encoding="utf-8")
    with pytest.raises(ConfigError, match="has no option 'kk'.*Did you mean 'k'"):
        load_experiment(f)


FINDINGS = """
[[runs]]
name = "tiny"

[[findings]]
claim = "{claim}"
source = "a paper, Table 1"
"""


@pytest.mark.parametrize("claim,msg", [
    ("tiny > laed", "no run named 'laed'.*Did you mean 'lead'"),
    ("tiny rouge9 > lead", "unknown metric 'rouge9'"),
    ("tiny >> lead", "cannot read claim"),
    ("tiny rouge1 > lead rouge2", "compares two metrics"),
])
def test_findings_declaration_errors(tmp_path, dialogsum_dir, claim, msg):
    f = tmp_path / "e.toml"
    f.write_text(BASE_EXP.format(data=dialogsum_dir) + FINDINGS.format(claim=claim), encoding="utf-8")
    with pytest.raises(ConfigError, match=msg) as e:
        load_experiment(f)
    assert str(e.value).startswith(f"{f}:")  # names the file (and line)


def test_findings_typo_is_an_input_error_exit_2(tmp_path, dialogsum_dir, capsys):
    f = tmp_path / "e.toml"
    f.write_text(BASE_EXP.format(data=dialogsum_dir) + FINDINGS.format(claim="tiny > laed"), encoding="utf-8")
    assert main(["run", str(f), "--results", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'lead'" in err and "Traceback" not in err
    assert not (tmp_path / "res" / "base" / "lead").exists()


def test_baselines_end_to_end(tmp_path, dialogsum_dir, capsys):
    f = tmp_path / "e.toml"
    f.write_text(BASE_EXP.format(data=dialogsum_dir)
                 + '\n[[findings]]\nclaim = "oracle > lead"\nsource = "by construction"\n', encoding="utf-8")
    res = tmp_path / "res"
    assert main(["run", str(f), "--results", str(res), "--no-progress"]) == 0
    exp = res / "base"
    for name in ("lead", "longest", "oracle"):
        rec = json.loads((exp / name / "record.json").read_text())
        assert rec["baseline"] and rec["train"]["trainable"] is False and rec["train"]["epochs_run"] == 0
        assert not (exp / name / "checkpoints" / "best.pt").exists()
        preds = [json.loads(x) for x in (exp / name / "predictions.jsonl").read_text().splitlines()]
        assert len(preds) == 3 and all(p["prediction"] for p in preds)
        # per-example scores average to the record's score
        rows = [json.loads(x) for x in (exp / name / "scores.jsonl").read_text().splitlines()[1:]]
        assert [r["id"] for r in rows] == [p["id"] for p in preds]
        assert sum(r["rouge1"] for r in rows) / len(rows) == pytest.approx(rec["eval"]["scores"]["rouge1"])
    lead = json.loads((exp / "lead" / "record.json").read_text())
    assert lead["baseline"]["tuned"]["k"] in (1, 2, 3) and lead["baseline"]["tuned"]["chosen_by"].startswith("ROUGE-1")
    oracle = json.loads((exp / "oracle" / "record.json").read_text())
    assert oracle["baseline"]["upper_bound"] is True
    table = (exp / "table.md").read_text()
    assert table.startswith("LEAD row: lead: the first")
    assert "oracle (upper bound)" in table and "| upper bound |" in table
    readme = (exp / "README.md").read_text()
    assert "## Declared findings" in readme and "oracle > lead" in readme
    findings = (res / "FINDINGS.md").read_text()
    assert "oracle > lead (rouge1)" in findings and "by construction" in findings
    assert (exp / "plots" / "scores.png").is_file()


def test_init_from_finds_the_same_seed_of_a_seeded_parent(tmp_path):
    from seq2seq_zoo.errors import InitError
    from seq2seq_zoo.runner import resolve_init
    exp = tmp_path / "exp"
    for name in ("pg-seed1", "pg-seed2", "solo"):
        (exp / name / "checkpoints").mkdir(parents=True)
        (exp / name / "checkpoints" / "best.pt").write_bytes(b"x")
    out = exp / "final-seed2"
    assert resolve_init("pg", out, seed=2) == exp / "pg-seed2" / "checkpoints" / "best.pt"
    assert resolve_init("solo", out, seed=2) == exp / "solo" / "checkpoints" / "best.pt"   # an unseeded parent
    assert resolve_init(str(exp / "pg"), out, seed=1) == exp / "pg-seed1" / "checkpoints" / "best.pt"
    with pytest.raises(InitError, match="pg-seed3"):
        resolve_init("pg", out, seed=3)
