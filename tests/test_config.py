"""Bad experiment files fail before training, naming the key and the nearest valid choice; the CLI
turns that into exit code 2 and one line on stderr."""
from __future__ import annotations

import textwrap

import pytest

from seq2seq_zoo.cli import main
from seq2seq_zoo.config import ConfigError, load_experiment

HEAD = """
[experiment]
name = "cfgtest"
dataset = "dialogsum"
metrics = ["rouge"]

[defaults]
model = "transformer"
d_model = 16
"""


def write(tmp_path, body: str, head: str = HEAD, name: str = "exp.toml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(head) + textwrap.dedent(body), encoding="utf-8")
    return p


def test_good_file_loads(tmp_path):
    p = write(tmp_path, """
        train.epochs = 3
        decode.beam_size = 2

        [profiles.cpu]
        d_model = 8

        [[runs]]
        name = "a"
        pe = "learned"

        [[runs]]
        name = "b"
        pe = "sinusoidal"
        train.lr = 0.01
    """)
    exp = load_experiment(p)
    assert [r.name for r in exp.runs] == ["a", "b"]
    a, b = exp.runs
    assert a.model_options == {"d_model": 16, "pe": "learned"}
    assert a.train.epochs == 3 and b.train.lr == 0.01 and a.train.lr == 1e-3
    assert a.decode.beam_size == 2 and a.eval.metrics == ["rouge"] and a.data.dataset == "dialogsum"
    assert load_experiment(p, profile="cpu").runs[0].model_options["d_model"] == 8
    assert [r.name for r in load_experiment(p, only=["b"]).runs] == ["b"]


def test_grid_and_seeds_expand(tmp_path):
    p = write(tmp_path, """
        [grid]
        "train.lr" = [0.1, 0.01]

        [[runs]]
        name = "r"
    """, head=HEAD.replace('metrics = ["rouge"]', 'metrics = ["rouge"]\nseeds = [1, 2]'))
    exp = load_experiment(p)
    assert sorted((r.name, r.seed, r.train.lr) for r in exp.runs) == [
        ("r-lr0.01-seed1", 1, 0.01), ("r-lr0.01-seed2", 2, 0.01), ("r-lr0.1-seed1", 1, 0.1), ("r-lr0.1-seed2", 2, 0.1)]


def test_a_run_can_have_its_own_seeds(tmp_path):
    """A power analysis may ask for more seeds for the two arms of one finding than for the rest of the
    file: ``seeds = [...]`` on a run; ``like`` takes it over unless the run gives its own seed choice."""
    p = write(tmp_path, """
        [[runs]]
        name = "a"
        seeds = [1, 2, 3, 4]

        [[runs]]
        name = "b"

        [[runs]]
        name = "c"
        like = "a"

        [[runs]]
        name = "d"
        like = "a"
        seed = 7
    """, head=HEAD.replace('metrics = ["rouge"]', 'metrics = ["rouge"]\nseeds = [1, 2, 3]'))
    names = [(r.name, r.seed) for r in load_experiment(p).runs]
    assert names == [(f"a-seed{s}", s) for s in (1, 2, 3, 4)] + [(f"b-seed{s}", s) for s in (1, 2, 3)] + \
        [(f"c-seed{s}", s) for s in (1, 2, 3, 4)] + [("d", 7)]
    assert [r.name for r in load_experiment(p, only=["a"]).runs] == [f"a-seed{s}" for s in (1, 2, 3, 4)]
    for body, words in (('seed = 1\nseeds = [2]', ["runs[0].seeds", "not both"]),
                        ("seeds = []", ["runs[0].seeds", "non-empty list"]),
                        ("seeds = [1, 1]", ["runs[0].seeds", "seed 1 is given twice"])):
        with pytest.raises(ConfigError) as e:
            load_experiment(write(tmp_path, f'[[runs]]\nname = "a"\n{body}\n', name="bad.toml"))
        assert all(w in str(e.value) for w in words), str(e.value)



def test_one_decode_entry_can_be_the_headline(tmp_path):
    """``headline = true`` marks the [[decode]] entry chosen on validation (the leaderboard shows it)."""
    two = '[[decode]]\nname = "x"\nbeam_size = 2\nheadline = true\n[[decode]]\nname = "y"\nbeam_size = 3\nheadline = true'
    for extra, words in ((two, ["decode[1].headline", "only one", "'x' already is"]),
                         ('[[decode]]\nname = "x"\nbeam_size = 2\nheadline = "yes"', ["decode[0].headline", "true, false"])):
        with pytest.raises(ConfigError) as e:
            load_experiment(write(tmp_path, f'[[runs]]\nname = "a"\n{extra}\n', name="dec.toml"))
        assert all(w in str(e.value) for w in words), str(e.value)
    exp = load_experiment(write(tmp_path, '[[runs]]\nname = "a"\n[[decode]]\nname = "x"\nbeam_size = 2\nheadline = true\n',
                                name="dec.toml"))
    assert [(d.name, d.overrides, d.headline) for d in exp.decodes] == [("x", {"beam_size": 2}, True)]


def test_the_headline_decoding_can_differ_between_profiles(tmp_path):
    """``headline = ["cpu"]``: the entry is the validation choice of the ``cpu`` profile only, another
    entry can be that of the full size ("none") or of another profile; each profile sees one headline."""
    body = ('[profiles.cpu]\ntrain.epochs = 1\n[profiles.big]\ntrain.epochs = 2\n[[runs]]\nname = "a"\n'
            '[[decode]]\nname = "x"\nbeam_size = 2\nheadline = ["cpu"]\n'
            '[[decode]]\nname = "y"\nbeam_size = 3\nheadline = ["big", "none"]\n'
            '[[decode]]\nname = "z"\nbeam_size = 5\n')
    p = write(tmp_path, body, name="dec.toml")
    for profile, want in (("cpu", "x"), ("big", "y"), (None, "y")):
        exp = load_experiment(p, profile=profile)
        assert [d.name for d in exp.decodes if d.headline] == [want], profile
        assert [d.name for d in exp.decodes] == ["x", "y", "z"]   # every entry still decodes every size
    for extra, words in (
            ('headline = ["cpu"]\n[[decode]]\nname = "y"\nbeam_size = 3\nheadline = ["cpu"]',
             ["decode[1].headline", "profile 'cpu'", "'x' already is"]),
            ('headline = true\n[[decode]]\nname = "y"\nbeam_size = 3\nheadline = ["cpu"]',
             ["decode[1].headline", "'x' already is"]),
            ('headline = ["cpu"]\n[[decode]]\nname = "y"\nbeam_size = 3\nheadline = true',
             ["decode[1].headline", "'x' already is"]),
            ('headline = ["cpx"]', ["decode[0].headline", "no profile 'cpx'", "cpu"]),
            ('headline = []', ["decode[0].headline", "list of profile names"])):
        with pytest.raises(ConfigError) as e:
            load_experiment(write(tmp_path, '[profiles.cpu]\ntrain.epochs = 1\n[[runs]]\nname = "a"\n'
                                  f'[[decode]]\nname = "x"\nbeam_size = 2\n{extra}\n', name="bad.toml"))
        assert all(w in str(e.value) for w in words), str(e.value)


def test_a_decode_entry_can_be_limited_to_some_runs(tmp_path, monkeypatch):
    """``runs = [...]``: the entry decodes those runs' seeds alone (its max_len is checked against them
    only), a finding may not name it with another run, and `zoo run`'s sweep passes it to no other run."""
    from types import SimpleNamespace

    from seq2seq_zoo import evaluation
    from seq2seq_zoo.cli.run import _decode_sweep
    body = ('[[runs]]\nname = "a"\nseeds = [1, 2]\ndata.max_tgt_len = 40\ndecode.max_len = 20\n'
            '[[runs]]\nname = "b"\ndata.max_tgt_len = 20\ndecode.max_len = 20\n'
            '[[runs]]\nname = "l"\nmodel = "lead"\n'
            '[[decode]]\nname = "long"\nmax_len = 30\nruns = ["a"]\n[[decode]]\nname = "g"\nmethod = "greedy"\n')
    exp = load_experiment(write(tmp_path, body, name="dec.toml"))
    long, g = exp.decodes
    assert long.runs == ("a",) and g.runs is None
    assert [(s.name, long.applies_to(s), g.applies_to(s)) for s in exp.runs] == [
        ("a-seed1", True, True), ("a-seed2", True, True), ("b", False, True), ("l", False, True)]
    for extra, words in (('runs = ["c"]', ["decode[0].runs", "'c'", "Trained runs: a, b"]),
                         ('runs = ["l"]', ["'l'", "baseline"]),
                         ("runs = []", ["non-empty list"]),
                         ('runs = ["b"]', ["max_len 30", "'b'"])):
        with pytest.raises(ConfigError) as e:
            load_experiment(write(tmp_path, body.replace('runs = ["a"]', extra), name="dec.toml"))
        assert all(w in str(e.value) for w in words), str(e.value)
    with pytest.raises(ConfigError) as e:
        load_experiment(write(tmp_path, body + '[[findings]]\nclaim = "b/long > b"\n', name="dec.toml"))
    assert "does not decode run 'b'" in str(e.value)
    assert load_experiment(write(tmp_path, body + '[[findings]]\nclaim = "a/long > b/g"\n', name="dec.toml")).findings

    calls = []
    monkeypatch.setattr(evaluation, "run_decodes",
                        lambda run_dir, variants, **k: calls.append((run_dir.name, variants)))
    for s in exp.runs:
        (tmp_path / "R" / s.name).mkdir(parents=True)
        (tmp_path / "R" / s.name / "record.json").write_text("{}")
    args = SimpleNamespace(data_dir=None, device=None, no_progress=True)
    _decode_sweep(exp, tmp_path / "R", args, "zoo run dec.toml")
    names = {run: [v[0] for v in variants] for run, variants in calls}
    assert names == {"a-seed1": ["long", "g"], "a-seed2": ["long", "g"], "b": ["g"], "l": ["g"]}

BAD = [
    # (body, words the message must contain)
    ('d_modle = 32\n[[runs]]\nname = "a"\n', ["d_modle", "d_model"]),
    ('train.lrr = 0.1\n[[runs]]\nname = "a"\n', ["lrr", "'lr'"]),
    ('[[runs]]\nname = "a"\nmodel = "transfomer"\n', ["transfomer", "'transformer'"]),
    ('train.epochs = "ten"\n[[runs]]\nname = "a"\n', ["epochs", "int", "ten"]),
    ('train.lr = -0.5\n[[runs]]\nname = "a"\n', ["lr", "> 0"]),
    ('dropout = 1.5\n[[runs]]\nname = "a"\n', ["dropout", "[0, 1)"]),
    ('train.label_smoothing = 1.0\n[[runs]]\nname = "a"\n', ["label_smoothing"]),
    ('decode.beam_size = 0\n[[runs]]\nname = "a"\n', ["beam_size", ">= 1"]),
    ('decode.length_penalty_style = "gmnt"\n[[runs]]\nname = "a"\n', ["length_penalty_style", "'gnmt'"]),
    ('train.precision = "fp23"\n[[runs]]\nname = "a"\n', ["precision", "'fp32'"]),
    ('train.schedule = "noan"\n[[runs]]\nname = "a"\n', ["schedule", "'noam'"]),
    ('[[runs]]\nname = "a"\ndata.dataset = "dialgsum"\n', ["dialgsum", "'dialogsum'"]),
    ('epochs = 3\n[[runs]]\nname = "a"\n', ["epochs", "[train]"]),
    ('[[runs]]\nname = "a"\nd_model = 3.5\n', ["d_model", "int"]),
    ('[[runs]]\nname = "a"\n[[runs]]\nname = "a"\n', ["duplicate", "'a'"]),
    ('[[runs]]\nname = "a"\nd_model = \n', ["TOML"]),
    ('[[runs]]\nname = "a"\n[runz]\nx = 1\n', ["runz", "'runs'"]),
    ('[[runs]]\nname = "a"\npe = "sinusoidl"\n', ["pe", "'sinusoidal'"]),
    ('[[runs]]\nname = "a"\nactivation = "gleu"\n', ["activation", "'gelu'"]),
    # the rules that became options
    ('[[runs]]\nname = "a"\npe_tmax_rule = "shard"\n', ["pe_tmax_rule", "'shared'"]),
    ('[[runs]]\nname = "a"\npe_init_std = 0.0\n', ["pe_init_std", "> 0"]),
    ('decode.repetition_penalty_style = "keskr"\n[[runs]]\nname = "a"\n', ["repetition_penalty_style", "'keskar'"]),
    ('train.rl_logp = "summ"\n[[runs]]\nname = "a"\n', ["rl_logp", "'sum'"]),
    # token batches: batch_size 0 needs max_tokens; decoding counts examples
    ('train.batch_size = 0\n[[runs]]\nname = "a"\n', ["train.batch_size", "max_tokens"]),
    ('train.batch_size = -1\n[[runs]]\nname = "a"\n', ["batch_size", ">= 0"]),
    ('train.max_tokens = 0\n[[runs]]\nname = "a"\n', ["max_tokens", ">= 1"]),
    ('decode.batch_size = 0\n[[runs]]\nname = "a"\n', ["decode.batch_size", ">= 1"]),
    # like = "OTHER": a run that starts from another run of the file
    ('[[runs]]\nname = "alpha"\n[[runs]]\nname = "b"\nlike = "alpah"\n', ["runs[1].like", "'alpah'", "'alpha'"]),
    ('[[runs]]\nname = "a"\nlike = "b"\n[[runs]]\nname = "b"\nlike = "a"\n', ["like", "a -> b -> a"]),
    ('[[runs]]\nname = "a"\nlike = "a"\n', ["like", "a -> a"]),
    ('[[runs]]\nname = "a"\n[[runs]]\nname = "b"\nlike = 1\n', ["like", "string"]),
]


@pytest.mark.parametrize("body,words", BAD, ids=[b[1][0] for b in BAD])
def test_bad_file_raises_config_error_naming_key_and_choice(tmp_path, body, words):
    p = write(tmp_path, body)
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    msg = str(e.value)
    assert str(p) in msg
    for w in words:
        assert w in msg, (w, msg)


def test_like_starts_from_another_run(tmp_path):
    """like = "OTHER": the other run's keys and [runs.profiles.X] tables, this run's own keys on top (tables
    merged key by key), not its name, description or same_as; chains resolve; the order in the file does
    not matter."""
    p = write(tmp_path, """
        [profiles.cpu]
        d_model = 8

        [[runs]]
        name = "c"
        like = "b"
        train.lr = 0.5

        [[runs]]
        name = "a"
        description = "a's own words"
        same_as = "other/a"
        pe = "learned"
        heads = 2
        train.epochs = 7
        train.lr = 0.01
        decode.beam_size = 3
        [runs.profiles.cpu]
        heads = 1
        train.epochs = 2

        [[runs]]
        name = "b"
        like = "a"
        model = "transformer_pointer"
        decode.min_len = 4
        [runs.profiles.cpu]
        train.precision = "fp32"
    """)
    for profile in (None, "cpu"):
        runs = {r.name: r for r in load_experiment(p, profile=profile).runs}
        a, b, c = runs["a"], runs["b"], runs["c"]
        small = profile == "cpu"
        assert (a.model, b.model, c.model) == ("transformer", "transformer_pointer", "transformer_pointer")
        want = {"d_model": 8 if small else 16, "pe": "learned", "heads": 1 if small else 2}
        assert a.model_options == b.model_options == c.model_options == want
        assert a.train.epochs == b.train.epochs == c.train.epochs == (2 if small else 7)
        assert (a.train.lr, b.train.lr, c.train.lr) == (0.01, 0.01, 0.5)
        assert (a.decode.beam_size, b.decode.beam_size, c.decode.beam_size) == (3, 3, 3)
        assert (a.decode.min_len, b.decode.min_len) != (4, 4) and b.decode.min_len == c.decode.min_len == 4
        assert a.train.precision == "auto" and b.train.precision == c.train.precision == ("fp32" if small else "auto")
        assert a.description == "a's own words" and b.description == c.description == ""
        assert a.same_as == "other/a" and b.same_as is None and c.same_as is None


def test_like_error_points_at_the_setting_taken_over(tmp_path):
    """What a run takes over is checked against its own model; the error names the run's key, the line
    where the setting is written (in the other run) and where it came from."""
    p = write(tmp_path, """
        [[runs]]
        name = "a"
        model = "gru"
        hidden = 8
        [[runs]]
        name = "b"
        like = "a"
        [[runs]]
        name = "c"
        like = "b"
        model = "bahdanau"
        [[runs]]
        name = "d"
        like = "c"
        model = "transformer"
    """, head=HEAD.replace("d_model = 16", ""))
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    msg = str(e.value)
    line = p.read_text().splitlines().index("hidden = 8") + 1
    assert f"{p}:{line}: runs[3].hidden:" in msg, msg
    assert "'transformer' has no option 'hidden'" in msg and "taken over from run 'a' through like = \"c\"" in msg
    assert "Traceback" not in msg and "\n" not in msg


def test_strong_pointer_is_strong_with_the_copy_switch():
    """The committed file's strong_pointer (like = "strong") resolves, under every profile, to strong's
    settings but the model and the cpu profile's precision."""
    import tomllib
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "experiments" / "dialogsum_transformer.toml"
    for profile in (None, *tomllib.loads(path.read_text())["profiles"]):
        runs = {r.name: r.to_dict() for r in load_experiment(path, profile=profile).runs if r.seed == 1}
        strong, sp = runs["strong-seed1"], runs["strong_pointer-seed1"]
        assert (strong["model"], sp["model"]) == ("transformer", "transformer_pointer")
        assert sp["train"].pop("precision") == ("fp32" if profile == "cpu" else "auto")
        strong["train"].pop("precision")
        diff = {k for k in strong if strong[k] != sp[k]}
        assert diff == {"name", "model"}, (profile, diff)


def test_token_batches_load(tmp_path):
    p = write(tmp_path, 'train.batch_size = 0\ntrain.max_tokens = 4096\n[[runs]]\nname = "a"\n')
    spec = load_experiment(p).runs[0]
    assert (spec.train.batch_size, spec.train.max_tokens) == (0, 4096)


def test_error_names_the_line(tmp_path):
    p = write(tmp_path, 'train.lrr = 0.1\n[[runs]]\nname = "a"\n')
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    line = p.read_text().splitlines().index("train.lrr = 0.1") + 1
    assert f"{p}:{line}:" in str(e.value)


def test_unknown_profile_and_run(tmp_path):
    p = write(tmp_path, '[profiles.cpu]\nd_model = 8\n[[runs]]\nname = "alpha"\n')
    with pytest.raises(ConfigError, match="'cpu'"):
        load_experiment(p, profile="cpx")
    with pytest.raises(ConfigError, match="'alpha'"):
        load_experiment(p, only=["alpah"])
    with pytest.raises(ConfigError, match="not found"):
        load_experiment(tmp_path / "missing.toml")


@pytest.mark.parametrize("body,word", [(BAD[0][0], "d_model"), (BAD[2][0], "transformer"),
                                       (BAD[3][0], "epochs"), (BAD[15][0], "TOML"), (BAD[14][0], "duplicate")])
def test_cli_bad_file_exit_2_one_line_no_traceback(tmp_path, capsys, body, word):
    p = write(tmp_path, body)
    rc = main(["run", str(p), "--results", str(tmp_path / "res"), "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert word in lines[0] and "Traceback" not in err
    assert not (tmp_path / "res" / "cfgtest").exists() or not any((tmp_path / "res" / "cfgtest").rglob("*.pt"))


def test_decode_longer_than_target_positions_is_caught_or_works(tmp_path):
    """decode.max_len beyond data.max_tgt_len: either the file is rejected up front, or decoding runs
    (it must not crash after training, when the positional table runs out)."""
    import torch

    from seq2seq_zoo.data.vocab import EOS_ID
    from seq2seq_zoo.decode import generate
    from seq2seq_zoo.models.base import build_model
    from conftest import random_batch
    p = write(tmp_path, 'data.max_tgt_len = 6\ndecode.max_len = 20\ndecode.beam_size = 2\n'
                        'd_ff = 32\nheads = 2\nlayers = 1\n[[runs]]\nname = "a"\n')
    try:
        exp = load_experiment(p)
    except ConfigError as e:
        assert "max_len" in str(e)
        return
    spec = exp.runs[0]
    torch.manual_seed(0)
    model = build_model(spec.model, {"vocab_size": 20, "max_src_len": 10, "max_tgt_len": spec.data.max_tgt_len},
                        spec.model_options).eval()
    with torch.no_grad():
        model.generator.bias[EOS_ID] -= 100  # never stops by itself
    for method in ("greedy", "beam"):
        spec.decode.method = method
        out = generate(model, random_batch(20, [5, 3], [1, 1]), spec.decode)
        assert all(len(x) <= 20 for x in out)
