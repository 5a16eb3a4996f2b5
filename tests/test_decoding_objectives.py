"""Decoding and objective rules with known answers: <pad>/<bos> are never produced (not produced and
stripped), one repetition-penalty rule for copy and non-copy models, SCST's two loss terms on the scale
of Paulus et al. (2018) eq. 14-16, the ROUGE rule for a predicted <unk>, and ``zoo tune`` on the
validation split."""
from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import make_encoded, random_batch, tiny_encoded, tiny_transformer
from seq2seq_zoo import decode as dec
from seq2seq_zoo.config import DecodeConfig, EvalConfig, TrainConfig
from seq2seq_zoo.data.batching import collate
from seq2seq_zoo.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seq2seq_zoo.decode import generate, penalise_repeats, rollout
from seq2seq_zoo.registry import MODELS
from seq2seq_zoo.train.objectives import CrossEntropy, SelfCritical, greedy_ids

V = 24


# ------------------------------------------------------------------------- <pad> and <bos> masking
def pad_loving_model(seed=0):
    """A tiny Transformer whose logits strongly prefer <pad> (then <bos>) at every step."""
    m = tiny_transformer(vocab_size=V, seed=seed)
    with torch.no_grad():
        m.generator.bias[PAD_ID] += 40.0
        m.generator.bias[BOS_ID] += 30.0
        m.generator.bias[EOS_ID] -= 2.0
    return m


def without_specials(model):
    """The same model with <pad>/<bos> made impossible in its own logits: what masking must reproduce."""
    import copy
    m = copy.deepcopy(model)
    with torch.no_grad():
        m.generator.bias[PAD_ID] = -1e9
        m.generator.bias[BOS_ID] = -1e9
    return m


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_decoders_never_produce_pad_or_bos(method, monkeypatch):
    model = pad_loving_model()
    batch = random_batch(V, [5, 8, 3, 6], [1] * 4, seed=1)
    raw = []
    strip = dec._strip
    monkeypatch.setattr(dec, "_strip", lambda row: (raw.append(list(row)), strip(row))[1])
    cfg = DecodeConfig(method=method, beam_size=3, max_len=8, min_len=1)
    out = generate(model, batch, cfg)
    assert len(raw) == 4
    for row, o in zip(raw, out):
        assert o, "an empty summary: the decoder spent its steps on <pad>"
        assert BOS_ID not in row
        end = row.index(EOS_ID) if EOS_ID in row else len(row)
        body = row[:end]
        # the output is the decoded row itself, not what is left after removing <pad>s from it
        assert body[:len(o)] == o and all(t == PAD_ID for t in body[len(o):]) and PAD_ID not in o
    if method == "greedy":   # masking is exactly "these ids do not exist" for the argmax
        assert out == generate(without_specials(model), batch, cfg)


def test_rollout_without_settings_masks_too():
    """The greedy baseline of SCST and decode-based validation (``rollout`` without a DecodeConfig)."""
    model = pad_loving_model(2)
    batch = random_batch(V, [4, 7, 5], [1] * 3, seed=2)
    ids = greedy_ids(model, batch, 6)
    for row in ids.tolist():
        end = row.index(EOS_ID) if EOS_ID in row else len(row)
        assert end > 0 and BOS_ID not in row and PAD_ID not in row[:end]
    ref, _ = rollout(without_specials(model).eval(), batch, 6)
    assert torch.equal(ids, ref)


# ------------------------------------------------------------------------------ repetition penalty
def test_power_rule_known_numbers_and_default():
    assert DecodeConfig().repetition_penalty_style == "power"
    p = torch.tensor([[1e-9, 1e-9, 1e-9, 1e-9, 0.6, 0.3, 0.1]])
    lp = p.log()
    out = penalise_repeats(lp, torch.tensor([[4, 0]]), 2.0, "power").exp()[0]   # <pad> (0) is never penalised
    z = 0.36 + 0.3 + 0.1 + 4e-9                      # 0.6^2 for the seen token, the others as they were
    assert out[4].item() == pytest.approx(0.36 / z, rel=1e-6)
    assert out[5].item() == pytest.approx(0.3 / z, rel=1e-6)
    assert out.sum().item() == pytest.approx(1.0, rel=1e-6)


def test_keskar_rule_known_numbers():
    logits = torch.tensor([[0.0, 0.1, 0.2, 0.3, 2.0, -1.0, 0.5, 3.0]])
    out = penalise_repeats(torch.log_softmax(logits, -1), torch.tensor([[4, 5]]), 2.0, "keskar", logits=logits)
    want = torch.log_softmax(torch.tensor([[0.0, 0.1, 0.2, 0.3, 1.0, -2.0, 0.5, 3.0]]), -1)
    torch.testing.assert_close(out, want)
    # power on the same step: p^2 renormalised, a different number
    pw = penalise_repeats(torch.log_softmax(logits, -1), torch.tensor([[4, 5]]), 2.0, "power", logits=logits)
    lp = torch.log_softmax(logits, -1)[0]
    z = torch.exp(lp).sum() - lp[4].exp() - lp[5].exp() + (2 * lp[4]).exp() + (2 * lp[5]).exp()
    assert pw[0, 4].item() == pytest.approx((2 * lp[4] - z.log()).item(), abs=1e-6)
    assert abs(pw[0, 4].item() - out[0, 4].item()) > 0.1


class NoLogits(torch.nn.Module):
    """A model's decoding steps without the raw logits it leaves for the decoder: what a copy model's
    mixture looks like to the repetition penalty."""

    def __init__(self, model):
        super().__init__()
        self.m = model
        self.vocab_size = model.vocab_size

    def encode(self, batch):
        return self.m.encode(batch)

    def decode_step(self, state, prev):
        lp, state = self.m.decode_step(state, prev)
        state.pop("logits", None)
        return lp, state

    def reorder(self, state, idx):
        return self.m.reorder(state, idx)

    def attention_coverage(self, state):
        return self.m.attention_coverage(state)


def looping(seed):
    m = tiny_transformer(vocab_size=V, seed=seed, tie_embeddings=False)
    with torch.no_grad():
        m.generator.weight *= 3.0
        m.generator.bias[7] += 4.0
        m.generator.bias[EOS_ID] -= 30
    return m


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_copy_and_non_copy_models_follow_the_same_default_rule(method):
    model = looping(4)
    batch = random_batch(V, [5, 8, 3, 6], [1] * 4, seed=3)
    cfg = DecodeConfig(method=method, beam_size=3, max_len=10, repetition_penalty=3.0)
    with_logits = generate(model, batch, cfg)
    assert with_logits == generate(NoLogits(model), batch, cfg)
    assert with_logits != generate(model, batch, DecodeConfig(method=method, beam_size=3, max_len=10))
    # keskar, asked for by name, is a different rule on the logits (and the label says copy models differ)
    import dataclasses
    k = dataclasses.replace(cfg, repetition_penalty_style="keskar")
    assert generate(NoLogits(model), batch, k) == with_logits
    assert generate(model, batch, k) != with_logits


def test_labels_name_the_repetition_rule():
    from seq2seq_zoo.report.extras import describe
    from seq2seq_zoo.report.tables import decode_label
    d = DecodeConfig(repetition_penalty=1.2).__dict__
    assert decode_label(d).endswith("rep. pen. 1.2 power")
    assert "keskar (copy models: power)" in decode_label(d | {"repetition_penalty_style": "keskar"})
    assert "(power: seen tokens' p -> p^theta, renormalised; the same rule for every model)" in describe(d)
    assert "copy models, which have no logits" in describe(d | {"repetition_penalty_style": "keskar"})


# ------------------------------------------------------------------------------------- SCST scale
def scst_setup(lengths, gamma=0.5, **kw):
    vocab, _ = tiny_encoded(8)
    torch.manual_seed(0)
    model = MODELS.create("pointer_generator", vocab_size=len(vocab), emb_dim=8, hidden=16).eval()
    g = torch.Generator().manual_seed(0)
    items = [make_encoded(torch.randint(4, len(vocab), (6,), generator=g).tolist(),
                          torch.randint(4, len(vocab), (n,), generator=g).tolist(), f"x{i}")
             for i, n in enumerate(lengths)]
    batch = collate(items)
    batch.references = [["r"]] * len(items)
    cfg = TrainConfig(objective="scst", rl_max_len=6, rl_gamma=gamma, **kw)
    obj = SelfCritical.from_config(cfg, vocab)
    obj.rewards = lambda ids, b: torch.full((ids.size(0),), 0.5)   # r(y^s) = r(y^): loss_rl is exactly 0
    return model, batch, obj


def teacher_forced_nll(model, batch):
    """-sum_t log p(y*_t) per target sequence (its EOS included), computed here from the log-probs."""
    lp = model(batch).log_probs.float()
    tok = lp.gather(-1, batch.tgt_out.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(tok * (batch.tgt_out != PAD_ID)).sum(1)


@pytest.mark.parametrize("lengths", [[3], [22], [3, 22]])
def test_scst_ml_term_is_the_per_sequence_sum_of_eq_14(lengths):
    """loss = gamma * L_rl + (1 - gamma) * L_ml with L_ml = mean_b -sum_t log p(y*_t) (Paulus et al.
    2018, eq. 14 and 16): for a 3-token summary (4 targets with EOS) and a 22-token one (23 targets)."""
    model, batch, obj = scst_setup(lengths, gamma=0.9)
    torch.manual_seed(1)
    loss, stats = obj(model, batch)
    assert stats["loss_rl"] == 0.0
    want = 0.1 * teacher_forced_nll(model, batch).mean()
    assert float(loss.detach()) == pytest.approx(float(want.detach()), rel=1e-5)
    # the same scale as L_rl: both sum over the tokens of a sequence, neither divides by its length
    per_token = 0.1 * teacher_forced_nll(model, batch).sum() / sum(n + 1 for n in lengths)
    if len(lengths) == 1:
        assert float(loss) / float(per_token) == pytest.approx(lengths[0] + 1, rel=1e-5)


def test_scst_ml_and_rl_gradients_scale_alike_with_length():
    """The gradient of each term grows with the summary's length the same way: per-sequence sums."""
    grads = {}
    for n in (3, 22):
        model, batch, obj = scst_setup([n], gamma=0.0)
        torch.manual_seed(1)
        loss, _ = obj(model, batch)
        loss.backward()
        grads[n] = model.output[-1].bias.grad.abs().sum().item()
    # teacher-forced NLL summed over 23 vs 4 target tokens: the ML gradient is several times larger
    assert grads[22] / grads[3] > 2.0


def test_scst_token_scale_is_the_old_rule_by_name():
    model, batch, obj = scst_setup([3, 22], gamma=0.0, rl_ml_scale="token")
    torch.manual_seed(1)
    loss, _ = obj(model, batch)
    ce, _ = CrossEntropy(0.0)(model, batch)
    assert float(loss) == pytest.approx(float(ce), rel=1e-6)
    assert obj.summary()["rl_ml_scale"] == "token"
    assert TrainConfig().rl_ml_scale == "sequence"


def test_scst_default_gamma_zero_is_cross_entropy_summed_per_sequence():
    model, batch, obj = scst_setup([3, 22], gamma=0.0)
    torch.manual_seed(1)
    loss, stats = obj(model, batch)
    ce, ce_stats = CrossEntropy(0.0)(model, batch)
    assert float(loss) == pytest.approx(float(ce) * ce_stats["tokens"] / 2, rel=1e-5)
    assert stats["tokens"] == ce_stats["tokens"] == 4 + 23


def test_old_scst_records_show_as_token_scale_and_other_objectives_do_not_drift():
    from seq2seq_zoo.reuse import drift
    spec = {"experiment": "x", "name": "r", "model": "gru", "model_options": {"hidden": 8},
            "train": {"objective": "scst"}, "eval": {"metrics": ["rouge"]}, "decode": {"repetition_penalty": 1.0}}
    old = {"spec": spec, "train": {}, "eval": {"settings": {"rouge": {}}}}
    new = {**spec, "train": {"objective": "scst", "rl_ml_scale": "sequence"},
           "eval": {"metrics": ["rouge"], "rouge_unk": "match"},
           "decode": {"repetition_penalty": 1.0, "repetition_penalty_style": "power"}}
    assert drift(new, old) == ["train.rl_ml_scale: 'sequence' vs 'token'"]
    ce = {**new, "train": {"objective": "ce", "rl_ml_scale": "sequence"}}
    assert drift(ce, {**old, "spec": {**spec, "train": {"objective": "ce"}}}) == []
    pen = {**new, "decode": {"repetition_penalty": 1.2, "repetition_penalty_style": "power"}}
    was = {**old, "spec": {**spec, "decode": {"repetition_penalty": 1.2, "repetition_penalty_style": "keskar"}}}
    assert drift(pen, was) == ["decode.repetition_penalty_style: 'power' vs 'keskar'", "train.rl_ml_scale: 'sequence' vs 'token'"]


# ------------------------------------------------------------------------------------- ROUGE <unk>
def test_rouge_unk_match_and_strip():
    from seq2seq_zoo.metrics import rouge, strip_unk
    assert EvalConfig().rouge_unk == "match"
    preds, refs = ["<unk> wins UNK", "<unk>'s team wins"], [["UNK wins cup"], ["UNK 's team wins"]]
    m, ms = rouge(preds, refs)
    s, ss = rouge(preds, refs, rouge_unk="strip")
    # ex 1: match: unk,wins,unk vs unk,wins,cup: 2 of 3 each way, F 2/3; strip: "wins": P 1, R 1/3, F 1/2
    # ex 2: match: unk,s,team,wins = the reference: F 1; strip: s,team,wins vs 4: P 1, R 3/4, F 6/7
    assert m["rouge1"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert s["rouge1"] == pytest.approx(100 * (0.5 + 6 / 7) / 2)
    assert ms["label"] == "ROUGE (unk: match)" and ss["label"] == "ROUGE (unk: strip)"
    assert strip_unk("a <unk> b\nUNK c UNKNOWN") == "a b\nc UNKNOWN"


def test_config_rejects_a_bad_rouge_unk_rule(tmp_path):
    from seq2seq_zoo.config import load_experiment
    from seq2seq_zoo.errors import ConfigError
    f = tmp_path / "x.toml"
    f.write_text('[experiment]\nname = "x"\ndataset = "dialogsum"\n[defaults]\nmodel = "gru"\n'
                 'eval.rouge_unk = "strp"\n[[runs]]\nname = "a"\n')
    with pytest.raises(ConfigError, match="rouge_unk"):
        load_experiment(f)


# --------------------------------------------------------------------------------------- zoo tune
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from conftest import trained_tiny_experiment
    tmp = tmp_path_factory.mktemp("tune")
    data_dir, toml, results = trained_tiny_experiment(tmp, "tune", '[[runs]]\nname = "base"\n')
    return results / "tune" / "base"


def _snapshot(d):
    return {str(p.relative_to(d)): p.stat().st_mtime_ns for p in d.rglob("*") if p.is_file()}


def test_zoo_tune_scores_a_grid_on_validation_and_stores_only_its_grid(tiny_run, capsys):
    from conftest import run_cli
    before = _snapshot(tiny_run.parent)
    capsys.readouterr()
    assert run_cli(["tune", str(tiny_run), "--grid", "beam_size=1,2", "length_penalty=0.6,1.0",
                    "--json", "--no-progress"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["settings"] for r in rows] == [{"beam_size": 1, "length_penalty": 0.6}, {"beam_size": 1, "length_penalty": 1.0},
                                             {"beam_size": 2, "length_penalty": 0.6}, {"beam_size": 2, "length_penalty": 1.0}]
    assert all(r["n_examples"] == 4 for r in rows)          # the tiny corpus: 4 validation, 3 test examples
    assert rows[0]["rouge1"] == rows[1]["rouge1"]            # beam 1 is greedy whatever the length penalty
    after = _snapshot(tiny_run.parent)                       # only the run's tune.json is new: no test output
    assert {k: v for k, v in after.items() if k != "base/tune.json"} == before and "base/tune.json" in after
    stored = json.loads((tiny_run / "tune.json").read_text(encoding="utf-8"))["rows"]
    assert [(r["settings"], r["rouge1"]) for r in stored] == [(r["settings"], r["rouge1"]) for r in rows]
    # the scores are those of the validation split decoded with that setting
    from seq2seq_zoo.evaluation import decode_split
    from seq2seq_zoo.inference import load_trained_run, run_spec
    from seq2seq_zoo.data.batching import encode_examples
    from seq2seq_zoo.data.corpora import resolve_data_dir
    from seq2seq_zoo.data.splits import select_splits, text_config
    from seq2seq_zoo.metrics import rouge
    import dataclasses
    spec = run_spec(tiny_run)
    tr = load_trained_run(tiny_run, "best.pt", purpose="test")
    root = resolve_data_dir(spec.data.dataset, None, json.loads((tiny_run / "record.json").read_text())["data"]["data_dir"])
    valid = select_splits(spec, root, ("validation",))["validation"]
    data = encode_examples(valid, tr.vocab, text_config(spec.data), spec.data.max_src_len, spec.data.max_tgt_len)
    cfg = dataclasses.replace(spec.decode, beam_size=2, length_penalty=1.0)
    preds = decode_split(tr.model.eval(), data, tr.vocab, cfg, torch.device("cpu"), None)
    assert rouge(preds, [e.references for e in data])[0]["rouge1"] == pytest.approx(rows[3]["rouge1"])
    # the table form, best first
    assert run_cli(["tune", str(tiny_run), "--grid", "beam_size=1,2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "| beam_size | val ROUGE-1 |" in out and "validation split, 4 examples; ROUGE (unk: match)" in out


def test_zoo_tune_bad_grid_is_one_line_exit_2(tiny_run, capsys):
    from conftest import run_cli
    capsys.readouterr()
    assert run_cli(["tune", str(tiny_run), "--grid", "beam_sise=1,2"]) == 2
    err = capsys.readouterr().err
    assert "beam_sise" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert run_cli(["tune", str(tiny_run), "--grid", "beam_size=0"]) == 2
    assert ">= 1" in capsys.readouterr().err
