"""Transformer training recipes and the DialogSum reports: pre-LN vs post-LN layers, the
length-penalty formulas and the repetition penalty inside beam search, the seeded training sample, the
fixed qualitative examples, [[decode]] sweeps and `zoo eval --decode` (config parsing, error messages,
re-decoding without retraining, resume), and the report's Table 1 layout."""
from __future__ import annotations

import csv
import json
import textwrap

import numpy as np
import pytest
import torch
from conftest import random_batch, tiny_experiment, write_dialogsum

from seq2seq_zoo.cli import main
from seq2seq_zoo.config import (
    ConfigError,
    DecodeConfig,
    load_experiment,
    parse_decode_overrides,
)
from seq2seq_zoo.data.vocab import EOS_ID
from seq2seq_zoo.decode import beam_search
from seq2seq_zoo.evaluation import pick_examples, train_sample_indices
from seq2seq_zoo.models.layers import padding_mask
from seq2seq_zoo.models.transformer import DecoderLayer, EncoderLayer, Transformer
from seq2seq_zoo.report.extras import describe, fraction_text


# =============================================================================== pre-LN vs post-LN
def _pair(cls, **kw):
    torch.manual_seed(0)
    post = cls(16, 2, 32, 0.0, pre_ln=False, **kw).eval()
    pre = cls(16, 2, 32, 0.0, pre_ln=True, **kw).eval()
    pre.load_state_dict(post.state_dict())  # identical weights: only the wiring differs
    return post, pre


def test_pre_and_post_ln_layers_have_the_same_parameters():
    for cls in (EncoderLayer, DecoderLayer):
        post, pre = _pair(cls)
        assert {k: v.shape for k, v in post.state_dict().items()} == {k: v.shape for k, v in pre.state_dict().items()}


def test_encoder_layer_post_ln_and_pre_ln_follow_their_formulas():
    """post-LN: h = LN1(x + SA(x)); y = LN2(h + FFN(h)).   pre-LN: h = x + SA(LN1(x)); y = h + FFN(LN2(h))."""
    post, pre = _pair(EncoderLayer)
    torch.manual_seed(1)
    x = torch.randn(2, 5, 16) * 3 + 1
    src = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    mask = padding_mask(src)
    sa = lambda m, h: m.self_att(h, mask=mask)[0]
    with torch.no_grad():
        h = post.sub1.norm(x + sa(post, x))
        want_post = post.sub2.norm(h + post.ffn(h))
        h = x + sa(pre, pre.sub1.norm(x))
        want_pre = h + pre.ffn(pre.sub2.norm(h))
        got_post, got_pre = post(x, mask)[0], pre(x, mask)[0]
    torch.testing.assert_close(got_post, want_post)
    torch.testing.assert_close(got_pre, want_pre)
    # post-LN outputs are layer-normalised (unit LN weights, zero bias); pre-LN leaves the residual stream as is
    assert torch.allclose(got_post.mean(-1), torch.zeros(2, 5), atol=1e-5)
    assert torch.allclose(got_post.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3)
    assert not torch.allclose(got_pre.var(-1, unbiased=False), torch.ones(2, 5), atol=0.1)
    assert not torch.allclose(got_pre, got_post, atol=1e-3)


def test_decoder_layer_post_ln_and_pre_ln_follow_their_formulas():
    """Three sub-layers (self-attention, cross-attention, FFN), each wired like the encoder's."""
    post, pre = _pair(DecoderLayer)
    torch.manual_seed(2)
    x, mem = torch.randn(2, 4, 16) * 2, torch.randn(2, 6, 16)
    mask = padding_mask(torch.tensor([[5] * 6, [5] * 4 + [0] * 2]))

    def parts(m):
        return (lambda h: m.self_att(h, is_causal=True)[0], lambda h: m.cross_att(h, mem, mask=mask)[0], m.ffn)

    with torch.no_grad():
        want_post = x
        for f, sub in zip(parts(post), (post.sub1, post.sub2, post.sub3)):
            want_post = sub.norm(want_post + f(want_post))
        want_pre = x
        for f, sub in zip(parts(pre), (pre.sub1, pre.sub2, pre.sub3)):
            want_pre = want_pre + f(sub.norm(want_pre))
        got_post, got_pre = post(x, mem, mask)[0], pre(x, mem, mask)[0]
    torch.testing.assert_close(got_post, want_post)
    torch.testing.assert_close(got_pre, want_pre)


def test_pre_ln_transformer_adds_exactly_the_final_layer_norms():
    """The whole model: pre-LN has one more LayerNorm after each stack (encoder.norm, decoder.norm);
    post-LN has none there. Every other parameter is shared by name and shape."""
    kw = {"d_model": 16, "d_ff": 32, "heads": 2, "layers": 2, "dropout": 0.0, "max_src_len": 16, "max_tgt_len": 8}
    post, pre = Transformer(30, pre_ln=False, **kw), Transformer(30, pre_ln=True, **kw)
    sp, sq = post.state_dict(), pre.state_dict()
    assert set(sq) - set(sp) == {"encoder.norm.weight", "encoder.norm.bias", "decoder.norm.weight",
                                 "decoder.norm.bias"}
    assert set(sp) <= set(sq) and all(sp[k].shape == sq[k].shape for k in sp)
    assert isinstance(post.encoder.norm, torch.nn.Identity) and isinstance(pre.encoder.norm, torch.nn.LayerNorm)
    # with the same weights the encoder outputs differ, and pre-LN's output is the final norm of its stream
    pre.load_state_dict(sp, strict=False)
    pre.eval(), post.eval()
    src = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        a, b = post.encoder(src)[0], pre.encoder(src)[0]
        stream = pre.encoder.drop(pre.encoder.pe(pre.encoder.embed(src)))
        for layer in pre.encoder.layers:
            stream = layer(stream, padding_mask(src))[0]
    assert not torch.allclose(a, b, atol=1e-3)
    torch.testing.assert_close(b, pre.encoder.norm(stream))


# ============================================================ length penalty / repetition penalty in beam
class _Scripted(torch.nn.Module):
    """A model whose next-token log-probs depend only on the step: 'a' (id 4) or EOS, everything else
    -50, so the hypotheses and their scores are known exactly."""
    V = 6

    def __init__(self, table):
        super().__init__()
        self.table = table  # step -> {token: log-prob}

    def encode(self, batch):
        return {"t": 0}

    def reorder(self, state, index):
        return state

    def decode_step(self, state, prev):
        row = torch.full((self.V,), -50.0)
        for tok, lp in self.table[min(state["t"], max(self.table))].items():
            row[tok] = lp
        state = {"t": state["t"] + 1}
        return row.expand(prev.size(0), self.V).clone(), state


A = 4
# short: EOS at once (score -2, length 1); long: a a a EOS (score -0.5*3 - 1.5 = -3, length 4)
SHORT_OR_LONG = {0: {EOS_ID: -2.0, A: -0.5}, 1: {A: -0.5, EOS_ID: -10.0}, 2: {A: -0.5, EOS_ID: -10.0},
                 3: {EOS_ID: -1.5, A: -10.0}}


@pytest.mark.parametrize("style,alpha,long", [
    ("none", 1.0, False),            # -2 > -3
    ("gnmt", 0.9, False), ("gnmt", 1.1, True),   # -2 / 1 vs -3 / (9/6)^alpha: long wins iff alpha > 1
    ("hf", 0.28, False), ("hf", 0.31, True),     # -2 / 1 vs -3 / 4^alpha: long wins iff alpha > log 1.5 / log 4
])
def test_beam_ranks_by_the_length_penalty_formulas(style, alpha, long):
    assert np.log(1.5) / np.log(4) == pytest.approx(0.2925, abs=1e-4)
    cfg = DecodeConfig(beam_size=2, min_len=0, max_len=4, length_penalty=alpha, length_penalty_style=style)
    out = beam_search(_Scripted(SHORT_OR_LONG), random_batch(30, [3], [1]), cfg)
    assert out == ([[A, A, A]] if long else [[]])


@pytest.mark.parametrize("penalty", [1.0, 1.5, 2.0])
def test_repetition_penalty_in_beam_lowers_repeated_tokens_only(penalty):
    """a a a EOS: the first 'a' and EOS are new, the 2nd and 3rd 'a' are repeats: score
    -0.5 + 2 * penalty * (-0.5) - 1.5 (log-probs multiplied by the penalty, the ``logprob`` rule)."""
    table = {0: {A: -0.5}, 1: {A: -0.5}, 2: {A: -0.5}, 3: {EOS_ID: -1.5}}
    cfg = DecodeConfig(beam_size=2, min_len=0, max_len=4, length_penalty=0.0, length_penalty_style="none",
                       repetition_penalty=penalty, repetition_penalty_style="logprob")
    out, scores = beam_search(_Scripted(table), random_batch(30, [3], [1]), cfg, return_scores=True)
    assert out == [[A, A, A]]
    assert scores[0] == pytest.approx(-0.5 + 2 * penalty * -0.5 - 1.5)


@pytest.mark.parametrize("penalty", [1.5, 2.0])
def test_keskar_repetition_penalty_in_beam_renormalises(penalty):
    """The default rule (power; keskar on a model without logits is the same): a repeated 'a' gets
    log_softmax of its log-prob times the penalty against the others' -50 (about 0 here: the penalty
    on a near-certain repeat is renormalised away), and the step-3 EOS is unchanged up to renormalising."""
    table = {0: {A: -0.5}, 1: {A: -0.5}, 2: {A: -0.5}, 3: {EOS_ID: -1.5}}
    cfg = DecodeConfig(beam_size=2, min_len=0, max_len=4, length_penalty=0.0, length_penalty_style="none",
                       repetition_penalty=penalty)
    out, scores = beam_search(_Scripted(table), random_batch(30, [3], [1]), cfg, return_scores=True)
    row = torch.full((6,), -50.0)
    row[A] = -0.5 * penalty
    rep = torch.log_softmax(row, 0)[A].item()
    row = torch.full((6,), -50.0)
    row[EOS_ID], row[A] = -1.5, -50.0 * penalty
    eos = torch.log_softmax(row, 0)[EOS_ID].item()
    assert out == [[A, A, A]]
    assert scores[0] == pytest.approx(-0.5 + 2 * rep + eos, abs=1e-5)


def test_report_states_the_exact_length_penalty_formulas():
    d = DecodeConfig().__dict__ | {"length_penalty": 0.6, "length_penalty_style": "gnmt"}
    assert "((5 + len) / 6)^0.6" in describe(d)
    assert "len^1.2" in describe(d | {"length_penalty_style": "hf", "length_penalty": 1.2})
    assert "none" in describe(d | {"length_penalty_style": "none"})
    text = describe(d | {"no_repeat_ngram": 3, "repetition_penalty": 1.2, "min_len": 5, "max_len": 40})
    for s in ("beam 4", "no_repeat_ngram 3", "repetition_penalty 1.2 (power", "min_len 5", "max_len 40"):
        assert s in text
    assert "(logprob" in describe(d | {"repetition_penalty": 1.2, "repetition_penalty_style": "logprob"})
    assert describe(d | {"method": "greedy"}).startswith("greedy")


# ===================================================================== training sample and examples
def test_training_sample_is_the_same_for_the_same_seed():
    a = train_sample_indices(12460, 0.05, seed=1)
    torch.manual_seed(123), np.random.seed(7)  # global RNG state plays no part
    assert train_sample_indices(12460, 0.05, seed=1) == a
    assert len(a) == 623 and a == sorted(set(a)) and 0 <= a[0] and a[-1] < 12460
    assert train_sample_indices(12460, 0.05, seed=2) != a
    assert train_sample_indices(10, 0.05, 1) and len(train_sample_indices(10, 0.05, 1)) == 1  # at least one
    assert train_sample_indices(100, 0.0, 1) == [] and train_sample_indices(7, 1.0, 3) == list(range(7))
    assert fraction_text(0.05) == "1/20" and fraction_text(0.3) == "30%"


def _spec(tmp_path, body=""):
    p = tmp_path / "e.toml"
    p.write_text(HEAD + textwrap.dedent(body) + '\n[[runs]]\nname = "a"\n', encoding="utf-8")
    return load_experiment(p).runs[0]


HEAD = """
[experiment]
name = "rec"
dataset = "dialogsum"
metrics = ["rouge"]
[defaults]
model = "transformer"
d_model = 16
heads = 2
"""


def test_default_examples_are_fixed_and_named_ids_are_checked(tmp_path):
    train, test = [f"train_{i}" for i in range(40)], [f"test_{i}" for i in range(9)]
    spec = _spec(tmp_path)
    a = pick_examples(spec, train, test)
    spec.seed = 99  # the shown examples do not depend on the run seed
    assert pick_examples(spec, train, test) == a
    assert [s for s, _ in a] == ["train", "train", "test", "test"] and len({i for _, i in a}) == 4
    spec = _spec(tmp_path, 'eval.examples = ["test_3", "train_7"]\n')
    assert pick_examples(spec, train, test) == [("test", "test_3"), ("train", "train_7")]
    spec.eval.examples = ["tset_3"]
    from seq2seq_zoo.data.corpora import DataError
    with pytest.raises(DataError, match="'tset_3'.*Did you mean 'test_3'"):
        pick_examples(spec, train, test)
    assert _spec(tmp_path, "eval.examples_per_split = 0\n").eval.examples_per_split == 0


# ===================================================================== [[decode]] entries: parsing
def _write(tmp_path, text):
    p = tmp_path / "sweep.toml"
    p.write_text(HEAD + textwrap.dedent(text), encoding="utf-8")
    return p


SWEEP = """
data.max_tgt_len = 40
decode.beam_size = 4
decode.max_len = 30

[[runs]]
name = "a"

[[runs]]
name = "b"
decode.max_len = 20

[[decode]]
name = "greedy"
method = "greedy"

[[decode]]
name = "hf_long"
length_penalty_style = "hf"
length_penalty = 1.2
min_len = 10
"""


def test_decode_entries_parse_and_apply_on_top_of_each_runs_decoding(tmp_path):
    exp = load_experiment(_write(tmp_path, SWEEP))
    assert [(v.name, v.overrides) for v in exp.decodes] == [
        ("greedy", {"method": "greedy"}),
        ("hf_long", {"length_penalty_style": "hf", "length_penalty": 1.2, "min_len": 10})]
    b = exp.runs[1]
    cfg = exp.decodes[1].apply(b.decode)
    assert (cfg.beam_size, cfg.max_len, cfg.min_len, cfg.length_penalty_style) == (4, 20, 10, "hf")
    assert b.decode.min_len == 1  # the run's own settings are untouched


@pytest.mark.parametrize("entry,words,line_text", [
    ('[[decode]]\nname = "x"\nbeam = 8\n', ["beam", "'beam_size'"], "beam = 8"),
    ('[[decode]]\nname = "x"\nbeam_size = 0\n', ["beam_size", ">= 1"], "beam_size = 0"),
    ('[[decode]]\nname = "x"\nlength_penalty_style = "gmnt"\n', ["'gnmt'"], 'length_penalty_style = "gmnt"'),
    ('[[decode]]\nname = "x"\nmax_len = 45\n', ["max_len 45", "max_tgt_len (40)", "'a'"], "max_len = 45"),
    ('[[decode]]\nbeam_size = 8\n', ["needs a name"], "[[decode]]"),
    ('[[decode]]\nname = "default"\nbeam_size = 8\n', ["default", "own decoding"], 'name = "default"'),
    ('[[decode]]\nname = "x y"\nbeam_size = 8\n', ["plain name"], 'name = "x y"'),
    ('[[decode]]\nname = "x"\n', ["changes nothing"], "[[decode]]"),
    ('[[decode]]\nname = "x"\nbeam_size = 2\n[[decode]]\nname = "x"\nbeam_size = 3\n', ["duplicate", "'x'"],
     'name = "x"\nbeam_size = 3'),
    ('[decode]\nbeam_size = 8\n', ["unknown section", "[[decode]]", "[defaults.decode]"], "[decode]"),
])
def test_bad_decode_entries_name_file_line_and_fix(tmp_path, entry, words, line_text):
    text = HEAD + 'data.max_tgt_len = 40\ndecode.max_len = 30\n[[runs]]\nname = "a"\n' + entry
    p = tmp_path / "bad.toml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    msg = str(e.value)
    line = text.count("\n", 0, text.rindex(line_text)) + 1
    assert msg.startswith(f"{p}:{line}:"), (line, msg)
    for w in words:
        assert w in msg, (w, msg)


def test_bad_decode_entry_is_exit_2_one_line(tmp_path, capsys):
    p = _write(tmp_path, '[[runs]]\nname = "a"\n[[decode]]\nname = "x"\nbeam = 8\n')
    assert main(["run", str(p), "--results", str(tmp_path / "R"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "beam_size" in err[0] and "Traceback" not in err[0]


def test_decode_overrides_on_the_command_line():
    assert parse_decode_overrides("beam_size=8, length_penalty=1.0,length_penalty_style=hf,method=greedy") == {
        "beam_size": 8, "length_penalty": 1.0, "length_penalty_style": "hf", "method": "greedy"}
    for text, word in (("beam=8", "'beam_size'"), ("beam_size=0", ">= 1"), ("beam_size", "KEY=VALUE"),
                       ("", "no decode settings"), ("length_penalty_style=gmnt", "'gnmt'"),
                       ("min_len=ten", "int")):
        with pytest.raises(ConfigError, match=word):
            parse_decode_overrides(text)


def test_run_profiles_override_a_run_under_that_profile_only(tmp_path):
    p = _write(tmp_path, """
        train.epochs = 10
        [profiles.cpu]
        train.epochs = 2
        [[runs]]
        name = "small"
        d_model = 16
        [[runs]]
        name = "big"
        d_model = 32
        train.warmup = 4000
        [runs.profiles.cpu]
        d_model = 8
        train.warmup = 100
    """)
    full = {r.name: r for r in load_experiment(p).runs}
    cpu = {r.name: r for r in load_experiment(p, profile="cpu").runs}
    assert full["big"].model_options["d_model"] == 32 and full["big"].train.warmup == 4000
    assert cpu["big"].model_options["d_model"] == 8 and cpu["big"].train.warmup == 100
    assert cpu["small"].model_options["d_model"] == 16 and cpu["small"].train.epochs == 2
    assert "profiles" not in cpu["big"].model_options
    bad = tmp_path / "bad.toml"
    bad.write_text('[profiles.cpu]\nd_model = 8\n[[runs]]\nname = "a"\n[runs.profiles.cpux]\nd_model = 8\n'
                   '[defaults]\nmodel = "transformer"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.toml:5: .*'cpux'.*Did you mean 'cpu'"):
        load_experiment(bad)


def test_a_profile_extends_another_and_its_run_tables(tmp_path):
    """extends = "cpu": the cpu profile, then the long one on top; a run's [runs.profiles.cpu] table applies
    under the long profile too, its own [runs.profiles.long] table after it."""
    p = _write(tmp_path, """
        train.epochs = 10
        [profiles.cpu]
        train.epochs = 2
        train.max_steps = 50
        d_model = 16
        [profiles.long]
        extends = "cpu"
        train.epochs = 15
        [profiles.longer]
        extends = "long"
        train.max_steps = 0
        [[runs]]
        name = "a"
        [[runs]]
        name = "b"
        [runs.profiles.cpu]
        train.warmup = 7
        [runs.profiles.long]
        d_model = 24
    """)
    def runs(profile):
        return {r.name: r for r in load_experiment(p, profile=profile).runs}
    cpu, long, longer = runs("cpu"), runs("long"), runs("longer")
    assert (cpu["a"].train.epochs, cpu["a"].train.max_steps, cpu["a"].model_options["d_model"]) == (2, 50, 16)
    assert (long["a"].train.epochs, long["a"].train.max_steps, long["a"].model_options["d_model"]) == (15, 50, 16)
    assert (longer["a"].train.epochs, longer["a"].train.max_steps) == (15, 0)
    assert cpu["b"].train.warmup == 7 and cpu["b"].model_options["d_model"] == 16
    assert long["b"].train.warmup == 7 and long["b"].model_options["d_model"] == 24
    assert longer["b"].train.warmup == 7 and longer["b"].model_options["d_model"] == 24
    assert "extends" not in long["a"].model_options
    for body, word in (('[profiles.cpu]\nextends = "cpux"\n', r"bad\.toml:2: .*no profile 'cpux'"),
                       ('[profiles.cpu]\nextends = "gpu"\n[profiles.gpu]\nextends = "cpu"\n', "circle: "),
                       ('[profiles.cpu]\nextends = 3\n', "name of another profile")):
        bad = tmp_path / "bad.toml"
        bad.write_text(body + '[[runs]]\nname = "a"\n[defaults]\nmodel = "transformer"\n', encoding="utf-8")
        with pytest.raises(ConfigError, match=word):
            load_experiment(bad)         # checked whether or not the profile is chosen


# ================================================================== end to end: sweep, eval, report
SWEEP_E2E = """
[[runs]]
name = "r"

[[decode]]
name = "greedy"
method = "greedy"

[[decode]]
name = "same"
batch_size = 1      # other batches, same beams: the same outputs

[[decode]]
name = "own"
beam_size = 2       # the run's own settings: no extra row
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    data_dir = write_dialogsum(tmp / "data", n_train=16, n_dev=4, n_test=3)
    toml = tmp / "sweep_e2e.toml"
    toml.write_text(tiny_experiment("sweep_e2e", SWEEP_E2E, data_dir=data_dir, extra_defaults="eval.train_sample = 0.25\n"),
                    encoding="utf-8")
    threads = torch.get_num_threads()
    assert main(["run", str(toml), "--results", str(tmp / "results"), "--no-progress"]) == 0
    torch.set_num_threads(threads)
    return toml, tmp / "results", tmp / "results" / "sweep_e2e"


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_sweep_adds_rows_and_an_unchanged_decode_reproduces_the_run(swept):
    _, _, exp = swept
    run = exp / "r"
    for name in ("greedy", "same"):
        rec = json.loads((run / "decodes" / name / "record.json").read_text())
        assert rec["run"] == "r" and rec["decode_name"] == name and rec["eval"]["n_examples"] == 3
        assert rec["run_finished"] == json.loads((run / "record.json").read_text())["finished"]
    assert json.loads((run / "decodes/greedy/record.json").read_text())["eval"]["decode"]["method"] == "greedy"
    assert not (run / "decodes" / "own").exists()
    # the same settings from the same checkpoint give the same outputs, test split and training sample
    for f in ("predictions.jsonl", "predictions_train_sample.jsonl"):
        assert (run / "decodes/same" / f).read_text() == (run / f).read_text()
    rows = _rows(exp / "table.csv")
    assert [(r["run"], r["decode"]) for r in rows] == [("r", "default"), ("r", "greedy"), ("r", "same")]
    assert rows[0]["R-1"] == rows[2]["R-1"]
    assert rows[1]["decoding"].startswith("greedy") and rows[0]["decoding"].startswith("beam 2")
    readme = (exp / "README.md").read_text()
    assert "Decoding variant** `greedy`" in readme and "((5 + len) / 6)^1.0" in readme


def test_training_sample_rows_in_table_1_layout(swept):
    _, _, exp = swept
    rec = json.loads((exp / "r" / "record.json").read_text())
    ts = rec["train_sample"]
    assert ts["n_examples"] == 4 and ts["of"] == 16 and ts["fraction"] == 0.25 and ts["sample_seed"] == 3
    ids = [json.loads(x)["id"] for x in (exp / "r" / "predictions_train_sample.jsonl").read_text().splitlines()]
    assert ids == [f"train_{i}" for i in train_sample_indices(16, 0.25, 3)]
    rows = _rows(exp / "table_splits.csv")
    assert [(r["decode"], r["split"]) for r in rows] == [
        ("default", "test"), ("default", "train sample (1/4, seed 3)"), ("greedy", "test"),
        ("greedy", "train sample (1/4, seed 3)"), ("same", "test"), ("same", "train sample (1/4, seed 3)")]
    assert float(rows[0]["R-1"]) == pytest.approx(rec["eval"]["scores"]["rouge1"])
    assert float(rows[1]["R-1"]) == pytest.approx(ts["scores"]["rouge1"])
    assert rows[0]["R-1 max"] and not rows[1]["R-1 max"]  # one reference per training dialogue
    assert "Table 1 layout" in (exp / "README.md").read_text()


def test_examples_and_attention_for_every_run(swept):
    _, _, exp = swept
    ex = json.loads((exp / "r" / "examples.json").read_text())
    assert [e["split"] for e in ex["examples"]] == ["train", "train", "test", "test"]
    preds = {json.loads(x)["id"]: json.loads(x)["prediction"] for x in (exp / "r/predictions.jsonl").read_text().splitlines()}
    for e in ex["examples"]:
        assert e["input"] and e["references"] and isinstance(e["output"], str)
        if e["split"] == "test":
            assert e["output"] == preds[e["id"]]
    readme = (exp / "README.md").read_text()
    assert "## Examples" in readme and f"example `{ex['examples'][0]['id']}`" in readme
    assert (exp / "plots" / "attention_r.png").exists()


def test_second_run_skips_decodes_and_zoo_eval_adds_one(swept, capsys):
    toml, results, exp = swept
    capsys.readouterr()
    threads = torch.get_num_threads()
    assert main(["run", str(toml), "--results", str(results), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.count("already done") == 3  # the run and its two decodes
    run = exp / "r"
    assert main(["eval", str(run), "--decode", "beam_size=3,min_len=3", "--name", "b3", "--no-progress", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)  # the scores on stdout, progress on stderr
    assert res["decode"] == "b3" and res["n_examples"] == 3 and "rouge1" in res["train_sample"]
    assert [r["decode"] for r in _rows(exp / "table.csv")] == ["default", "greedy", "same", "b3"]
    assert main(["eval", str(run), "--decode", "beam_size=3,min_len=3", "--name", "b3"]) == 0
    assert "already done" in capsys.readouterr().err
    assert main(["eval", str(run), "--decode", "beam_size=4", "--name", "b3"]) == 2
    err = capsys.readouterr().err
    assert "beam_size 3 -> 4" in err and "--force" in err
    assert main(["eval", str(run), "--decode", "max_len=30"]) == 2
    assert "max_tgt_len" in capsys.readouterr().err
    torch.set_num_threads(threads)


# ===================================================== beam search keeps finished hypotheses
B_ = 5
# EOS at step 0 scores -0.5; two continuations then outscore it in both beam slots and end badly
PUSHED_OUT = {0: {A: -0.1, EOS_ID: -0.5}, 1: {A: -0.1, B_: -0.2}, 2: {EOS_ID: -6.0}}


def test_beam_keeps_a_finished_hypothesis_that_live_ones_push_out_of_the_beam():
    """K=2, no length penalty: the empty summary ends at step 0 with -0.5; at step 1 'a a' (-0.2) and
    'a b' (-0.3) fill both slots and end at step 2 with -6.2 / -6.3. The finished -0.5 must win."""
    cfg = DecodeConfig(beam_size=2, min_len=0, max_len=6, length_penalty=0.0, length_penalty_style="none")
    out, scores = beam_search(_Scripted(PUSHED_OUT), random_batch(30, [3], [1]), cfg, return_scores=True)
    assert out == [[]]
    assert scores[0] == pytest.approx(-0.5)
