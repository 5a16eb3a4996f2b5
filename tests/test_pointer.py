"""Pointer-generator (See et al. 2017) and coverage: the copy distribution, extended vocabularies,
coverage loss, step decoding = teacher forcing, beam search with a coverage penalty, parameter counts,
decoded text with copied OOV words, and a tiny copy task that training actually learns."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import make_encoded

from seq2seq_zoo.config import DecodeConfig, TrainConfig
from seq2seq_zoo.data.batching import collate, encode_examples
from seq2seq_zoo.data.corpora import Example
from seq2seq_zoo.data.text import TextConfig, detokenize, tokenize
from seq2seq_zoo.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab
from seq2seq_zoo.decode import beam_search, coverage_penalty, generate, greedy
from seq2seq_zoo.models.base import count_parameters
from seq2seq_zoo.models.rnn import ATTENTION_NAME, coverage_loss
from seq2seq_zoo.registry import MODELS
from seq2seq_zoo.train.loop import fit

V = 20
CPU = torch.device("cpu")


def make(name="pointer_generator", seed=0, vocab_size=V, **kw):
    opts = {"emb_dim": 8, "hidden": 12}
    opts.update(kw)
    torch.manual_seed(seed)
    return MODELS.create(name, vocab_size=vocab_size, **opts).eval()


def oov_batch():
    """Three sources with 0, 1 and 3 OOV words (extended ids V, V+1, ...), ragged lengths; the third
    target copies two of its OOV words."""
    items = [
        make_encoded([5, 6, 7], [8, 9]),
        make_encoded([5, UNK_ID, 7, 8], [UNK_ID, 6], src_ext=[5, V, 7, 8], tgt_ext=[V, 6], oovs=["zorb"]),
        make_encoded([UNK_ID, 4, UNK_ID, UNK_ID, UNK_ID], [UNK_ID, UNK_ID, 9],
                     src_ext=[V, 4, V + 1, V + 2, V], tgt_ext=[V + 2, V + 1, 9], oovs=["a1", "b2", "c3"]),
    ]
    for i, e in enumerate(items):
        e.id = f"e{i}"
    return collate(items)


def force_p_gen(model, value: float):
    """p_gen = sigmoid(b) with zero weights: 0.0 -> b = -1e4 (sigmoid underflows to exactly 0)."""
    with torch.no_grad():
        model.p_gen.weight.zero_()
        model.p_gen.bias.fill_(-1e4 if value == 0.0 else math.log(value / (1 - value)))


# --- the copy distribution ------------------------------------------------------------------------
def test_only_source_oov_word_gets_all_mass_when_p_gen_is_zero():
    """Hand-built: the source is one OOV word (extended id V); with p_gen = 0 every output step puts
    all of its probability on that extended id."""
    model = make()
    force_p_gen(model, 0.0)
    batch = collate([make_encoded([UNK_ID], [UNK_ID], src_ext=[V], tgt_ext=[V], oovs=["zanzibar"])])
    with torch.no_grad():
        out = model(batch)
    assert out.log_probs.shape == (1, 2, V + 1)
    probs = out.log_probs.exp()
    assert torch.allclose(probs[..., V], torch.ones(1, 2), atol=1e-6)
    assert float(probs[..., :V].sum()) < 1e-20
    with torch.no_grad():
        lp, _ = model.decode_step(model.encode(batch), torch.tensor([BOS_ID]))
    assert int(lp.argmax(-1)) == V and float(lp[0, V].exp()) == pytest.approx(1.0, abs=1e-6)


def test_decoded_text_contains_copied_oov_word_not_unk():
    texts = [("the cat sat on the mat", "the cat sat")] * 6
    exs = [Example(f"t{i}", s, [r]) for i, (s, r) in enumerate(texts)]
    cfg = TextConfig()
    vocab = Vocab.build(tokenize(x, cfg) for e in exs for x in (e.source, e.references[0]))
    test = encode_examples([Example("q", "zanzibar", ["zanzibar"])], vocab, cfg, 16, 8)
    assert test[0].oovs == ["zanzibar"] and test[0].src.tolist() == [UNK_ID]
    model = make(vocab_size=len(vocab))
    force_p_gen(model, 0.0)
    batch = collate(test)
    for method in ("greedy", "beam"):
        ids = generate(model, batch, DecodeConfig(method=method, beam_size=3, max_len=2))[0]
        assert ids == [len(vocab), len(vocab)]
        text = detokenize(vocab.decode(ids, batch.oovs[0]))
        assert "zanzibar" in text and "<unk>" not in text


@pytest.mark.parametrize("coverage", [False, True])
def test_final_distribution_sums_to_one_over_extended_vocab(coverage):
    model = make(coverage=coverage)
    batch = oov_batch()
    out = model(batch)
    assert out.log_probs.shape == (3, 4, V + 3)          # V_ext = V + the batch's most OOVs (3)
    sums = out.log_probs.exp().sum(-1)
    real = batch.tgt_out != PAD_ID
    assert torch.allclose(sums[real], torch.ones(int(real.sum())), atol=1e-5)
    lp, _ = model.decode_step(model.encode(batch), torch.full((3,), BOS_ID))
    assert torch.allclose(lp.exp().sum(-1), torch.ones(3), atol=1e-5)


def test_mixture_formula_on_extended_and_absent_words():
    """P(ext id k) = (1 - p_gen) * sum of attention on the positions holding OOV k; a word absent from
    the source keeps exactly p_gen * P_vocab, so P / p_gen is the same softmax for every example."""
    model = make()
    batch = oov_batch()
    out = model(batch, need_attention=True)
    a = out.attention[ATTENTION_NAME][:, 0]              # (B, T, S)
    p_gen = out.extras["p_gen"]                          # (B, T)
    probs = out.log_probs.exp()
    src_ext = batch.src_ext
    for k in range(3):
        held = (src_ext == V + k).float()                 # (B, S)
        expect = (1 - p_gen) * (a * held[:, None, :]).sum(-1)
        assert torch.allclose(probs[..., V + k], expect, atol=1e-6)
    # example 0 has no OOV words: its extended columns get (almost) nothing
    assert float(probs[0, :, V:].sum()) < 1e-20
    # a word in no source: 19 (ids 4..9 appear in the sources); P = p_gen * P_vocab, and P_vocab <= 1
    assert (probs[..., 19] <= p_gen + 1e-7).all()
    assert ((p_gen > 0) & (p_gen < 1)).all()


def test_loss_on_extended_ids_and_feed_as_unk():
    model = make()
    batch = oov_batch()
    assert batch.tgt_in[2, 1:4].tolist() == [UNK_ID, UNK_ID, 9]   # extended words fed back as <unk>
    out = model(batch)
    from seq2seq_zoo.train.objectives import token_losses
    _, nll, n = token_losses(out.log_probs, batch.tgt_out)
    manual = -sum(float(out.log_probs[b, t, batch.tgt_out[b, t]])
                  for b in range(3) for t in range(4) if batch.tgt_out[b, t] != PAD_ID)
    assert n == 3 + 3 + 4 and float(nll) == pytest.approx(manual, rel=1e-6)
    # the copied target V+2 of example 2 is scored as itself, not as <unk>
    assert batch.tgt_out[2, 0] == V + 2


def test_distribution_gradcheck():
    model = make(hidden=4, emb_dim=3).double()
    batch = oov_batch()
    enc = {"src_ext": batch.src_ext, "n_oov": batch.n_oov}
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(3, 2, model.output[0].in_features, dtype=torch.double, generator=g, requires_grad=True)
    a = torch.softmax(torch.randn(3, 2, 5, dtype=torch.double, generator=g), -1).requires_grad_()
    extra = torch.randn(3, 2, model.p_gen.in_features, dtype=torch.double, generator=g, requires_grad=True)
    torch.autograd.gradcheck(lambda f, w, x: model._distribution(f, w, x, enc)[0], (feats, a, extra))


# --- coverage -------------------------------------------------------------------------------------
def test_coverage_loss_hand_computed():
    a = torch.tensor([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.6, 0.2, 0.2]]])
    # cov_1 = 0 -> 0; cov_2 = (.5,.5,0) -> .2+.3+0 = .5; cov_3 = (.7,.8,.5) -> .6+.2+.2 = 1.0
    assert float(coverage_loss(a, torch.ones(1, 3, dtype=torch.bool))) == pytest.approx(1.5 / 3)
    # padding steps do not count
    assert float(coverage_loss(a, torch.tensor([[True, True, False]]))) == pytest.approx(0.5 / 2)


@pytest.mark.parametrize("name", ["bahdanau", "bilstm", "pointer_generator"])
def test_model_coverage_loss_equals_formula_on_its_attention(name):
    model = make(name, coverage=True, cov_loss_weight=0.5)
    batch = oov_batch()
    out = model(batch, need_attention=True)
    a = out.attention[ATTENTION_NAME][:, 0]
    B, T, S = a.shape
    total, n = 0.0, 0
    for b in range(B):
        cov = torch.zeros(S)
        for t in range(T):
            if batch.tgt_out[b, t] != PAD_ID:
                total += float(torch.minimum(a[b, t], cov).sum())
                n += 1
            cov = cov + a[b, t]
    assert float(out.aux_losses["coverage"]) == pytest.approx(0.5 * total / n, rel=1e-5)
    assert "coverage" not in make(name)(batch).aux_losses


def test_coverage_changes_attention_only_through_w_c():
    """w_c starts at 0, so a coverage model equals its no-coverage twin until w_c is trained."""
    torch.manual_seed(0)
    plain = make(coverage=False)
    cov = make(coverage=True)
    cov.load_state_dict(plain.state_dict(), strict=False)
    batch = oov_batch()
    assert torch.allclose(plain(batch).log_probs, cov(batch).log_probs, atol=1e-6)
    with torch.no_grad():
        cov.attention.w_c.fill_(3.0)
    assert not torch.allclose(plain(batch).log_probs, cov(batch).log_probs, atol=1e-4)


def test_gru_rejects_coverage():
    with pytest.raises(ValueError, match="coverage needs an attention model"):
        make("gru", coverage=True)


# --- decoding -------------------------------------------------------------------------------------
@pytest.mark.parametrize("coverage", [False, True])
def test_step_decoding_equals_teacher_forcing_after_reorder(coverage):
    model = make(coverage=coverage)
    batch = oov_batch()
    full = model(batch).log_probs
    state = model.encode(batch)
    perm = torch.tensor([2, 0, 1])
    assert_steps_equal_teacher_forcing(model, model.reorder(state, perm), batch.tgt_out[perm], full[perm])


def assert_steps_equal_teacher_forcing(model, state, inputs, full, atol=1e-5):
    """Feed ``inputs`` (N, T) step by step from <bos>; each step's log-probs equal ``full[:, t]`` (the
    teacher-forced log-probs of the same rows) at the real (non-padding) positions."""
    prev = torch.full((inputs.size(0),), BOS_ID)
    for t in range(full.size(1)):
        lp, state = model.decode_step(state, prev)
        real = inputs[:, t] != PAD_ID
        assert torch.allclose(lp[real], full[:, t][real], atol=atol)
        prev = inputs[:, t].masked_fill(inputs[:, t] == PAD_ID, EOS_ID)


def assert_beam_one_is_greedy(model, batch):
    cfg = DecodeConfig(max_len=6, min_len=2)
    assert beam_search(model, batch, DecodeConfig(beam_size=1, max_len=6, min_len=2, length_penalty=0.0)) == \
        greedy(model, batch, cfg)


def test_beam_one_equals_greedy_with_extended_ids():
    assert_beam_one_is_greedy(make(seed=3), oov_batch())


def test_coverage_penalty_formula_and_effect():
    state = {"cov": torch.tensor([[0.5, 2.0, 0.0], [1.0, 1.0, 1.0]]),
             "mask": torch.tensor([[True, True, False], [True, True, True]])}
    cov = make(seed=5, coverage=True).attention_coverage(state)   # the attention models' hook
    cp = coverage_penalty(cov, 0.4)
    assert torch.allclose(cp, torch.tensor([0.4 * math.log(0.5), 0.0]))
    assert coverage_penalty(cov, 0.0) is None and coverage_penalty(None, 0.4) is None
    # beam search runs with it on models with extended vocabularies, and the output can differ
    model = make(seed=5, coverage=True)
    with torch.no_grad():
        model.attention.w_c.fill_(2.0)
    batch = oov_batch()
    base = beam_search(model, batch, DecodeConfig(beam_size=4, max_len=8))
    pen = beam_search(model, batch, DecodeConfig(beam_size=4, max_len=8, coverage_penalty=5.0))
    assert len(base) == len(pen) == 3
    assert all(i < V + 3 for seq in pen for i in seq)


# --- parameters -----------------------------------------------------------------------------------
@pytest.mark.parametrize("layers", [1, 2])
def test_pointer_adds_4n_plus_m_plus_1_weights(layers):
    n, m = 12, 8
    base = count_parameters(make("bilstm", output_layers=2, layers=layers))
    ptr = count_parameters(make("pointer_generator", layers=layers, variant="bahdanau"))
    assert ptr["pointer"] == 4 * n + m + 1
    assert ptr["total"] - base["total"] == 4 * n + m + 1
    assert {k: v for k, v in ptr.items() if k not in ("pointer", "total")} == \
        {k: v for k, v in base.items() if k != "total"}
    cov = count_parameters(make("pointer_generator", layers=layers, coverage=True, variant="bahdanau"))
    assert cov["total"] - ptr["total"] == n       # w_c: one weight per attention unit


def test_two_layer_output_count():
    n, m = 12, 8
    one = count_parameters(make("bilstm"))["output"]
    two = count_parameters(make("bilstm", output_layers=2))["output"]
    assert one == (3 * n + m) * V + V
    assert two == (3 * n + m) * n + n + n * V + V


# --- training -------------------------------------------------------------------------------------
def copy_task(n: int, seed: int):
    """Sources of in-vocabulary and OOV words; the target repeats the source's OOV words. Only a copy
    mechanism can produce them (the vocabulary holds only the in-vocabulary filler words)."""
    g = np.random.default_rng(seed)
    filler = ["alpha", "beta", "gamma", "delta"]
    exs = []
    for i in range(n):
        names = [f"name{int(k)}" for k in g.integers(0, 500, 2)]
        src = [filler[int(g.integers(4))], names[0], filler[int(g.integers(4))], names[1]]
        exs.append(Example(f"c{i}", " ".join(src), [" ".join(names)]))
    return exs


def test_pointer_learns_to_copy_oov_words(tmp_path):
    cfg = TextConfig()
    train = copy_task(64, 0)
    vocab = Vocab.build([["alpha", "beta", "gamma", "delta"]])
    enc = encode_examples(train, vocab, cfg, 8, 4)
    assert all(len(e.oovs) >= 1 for e in enc)
    torch.manual_seed(0)
    model = MODELS.create("pointer_generator", vocab_size=len(vocab), emb_dim=16, hidden=32)
    st = fit(model, enc, enc[:16], TrainConfig(epochs=25, batch_size=16, lr=0.01, clip_norm=1.0,
                                                precision="fp32"), seed=0, device=CPU, progress=False,
             ckpt_dir=tmp_path, log=lambda *a: None)
    losses = [h["train_loss"] for h in st.history]
    assert losses[-1] < 0.3 * losses[0]
    test = encode_examples(copy_task(8, 99), vocab, cfg, 8, 4)
    batch = collate(test)
    ids = generate(model, batch, DecodeConfig(method="greedy", max_len=4))
    texts = [detokenize(vocab.decode(s, o)) for s, o in zip(ids, batch.oovs)]
    hits = sum(t == e.references[0] for t, e in zip(texts, test))
    assert hits >= 6, texts
    assert not any("<unk>" in t for t in texts)


# --- end to end: pointer run, a final coverage phase and SCST from its checkpoint ------------------
E2E = """
[experiment]
name = "ptr_e2e"
dataset = "dialogsum"
metrics = ["rouge", "unk_ratio", "repetition"]
seeds = [2]
data_dir = "{data_dir}"

[defaults]
model = "pointer_generator"
emb_dim = 8
hidden = 16
data.max_src_len = 48
data.max_tgt_len = 16
data.vocab_size = 30
train.epochs = 1
train.batch_size = 8
train.precision = "fp32"
train.threads = 1
decode.beam_size = 2
decode.max_len = 12

[[runs]]
name = "pg"

[[runs]]
name = "pg-cov-final"
coverage = true
train = {{ init_from = "pg" }}

[[runs]]
name = "rl"
coverage = true
train = {{ init_from = "pg-cov-final", objective = "scst", rl_gamma = 0.9, rl_gamma_end = 1.0, rl_max_len = 12, val_metric = "rouge1", val_every = 1 }}

[[runs]]
name = "bad-init"
hidden = 12
train = {{ init_from = "pg" }}
"""


def test_init_from_coverage_phase_and_scst_end_to_end(tmp_path):
    import json

    from conftest import write_dialogsum

    from seq2seq_zoo.cli import main
    data_dir = write_dialogsum(tmp_path / "data", n_train=16, n_dev=4, n_test=3)
    toml = tmp_path / "e.toml"
    toml.write_text(E2E.format(data_dir=data_dir), encoding="utf-8")
    res = tmp_path / "results"
    threads = torch.get_num_threads()
    rc = main(["run", str(toml), "--results", str(res), "--no-progress", "--only", "pg", "pg-cov-final", "rl"])
    assert rc == 0
    pg = json.loads((res / "ptr_e2e" / "pg" / "record.json").read_text())
    fin = json.loads((res / "ptr_e2e" / "pg-cov-final" / "record.json").read_text())
    rl = json.loads((res / "ptr_e2e" / "rl" / "record.json").read_text())
    assert 0.0 < pg["eval"]["copying"]["p_gen_mean"] < 1.0
    assert fin["init_from"]["new_parameters"] == ["attention.w_c"]
    assert fin["params"]["total"] - pg["params"]["total"] == 16            # w_c: n weights
    # same vocabulary as the run it started from
    v0 = json.loads((res / "ptr_e2e" / "pg" / "checkpoints" / "vocab.json").read_text())
    v1 = json.loads((res / "ptr_e2e" / "rl" / "checkpoints" / "vocab.json").read_text())
    assert v0 == v1
    assert rl["train"]["objective"] == "scst" and rl["train"]["objective_stats"]["steps"] == 2
    assert all("val_rouge1" in p for p in rl["train"]["val_curve"])
    att = json.loads((res / "ptr_e2e" / "pg" / "attention.json").read_text())
    assert len(att["p_gen"]) == len(att["predicted_tokens"])
    readme = (res / "ptr_e2e" / "README.md").read_text()
    assert "Starting checkpoint vs fine-tuned" in readme and "p_gen" in readme
    # a re-decode of the pointer run carries the copy statistics too, and its table row shows them
    assert main(["eval", str(res / "ptr_e2e" / "pg"), "--decode", "method=greedy", "--name", "b2",
                 "--no-progress"]) == 0
    b2 = json.loads((res / "ptr_e2e" / "pg" / "decodes" / "b2" / "record.json").read_text())
    assert 0.0 < b2["eval"]["copying"]["p_gen_mean"] < 1.0
    rows = (res / "ptr_e2e" / "table.csv").read_text().splitlines()
    header = rows[0].split(",")
    b2_row = next(r.split(",") for r in rows[1:] if ",b2," in r)
    assert b2_row[header.index("p_gen")] != ""
    # a run whose shapes do not fit the checkpoint stops with a message naming the mismatch
    rc = main(["run", str(toml), "--results", str(res), "--no-progress", "--only", "bad-init"])
    torch.set_num_threads(threads)
    assert rc == 2


# --- fidelity to See et al. 2017 --------------------------------------------------------------------
def test_see_variant_queries_attention_with_s_t_and_feeds_p_vocab_s_t_and_context():
    """Default variant "see": the decoder LSTM reads E y_{t-1} and gives s_t; attention is queried with
    s_t (eq. 1); P_vocab = softmax(V'(V [s_t; h*_t] + b) + b') (eq. 4). Checked by recomputing one step
    by hand from the model's own layers."""
    model = make(seed=2)
    assert model.variant == "see"
    batch = oov_batch()
    state = model.encode(batch)
    prev = torch.full((3,), BOS_ID)
    with torch.no_grad():
        lp, new = model.decode_step(state, prev)
        y = model.tgt_embed(model.feed(prev))
        h0, c0 = state["h"].transpose(0, 1).contiguous(), state["c"].transpose(0, 1).contiguous()
        s, (h1, c1) = model.decoder(y.unsqueeze(1), (h0, c0))           # s_t from E y_{t-1} alone
        ctx, a = model.attention(h1[-1], state["memory"], state["mask"], state["keys"], state["cov"])
        p_vocab = torch.softmax(model.output(torch.cat([s[:, 0], ctx], -1)), -1)
        p_gen = torch.sigmoid(model.p_gen(torch.cat([ctx, h1[-1], c1[-1], y], -1))).squeeze(-1)
    torch.testing.assert_close(new["p_gen"], p_gen)
    absent = [w for w in range(V) if w not in (5, 6, 7)]      # words not in example 0's source
    torch.testing.assert_close(lp[0, absent].exp(), p_gen[0] * p_vocab[0, absent], atol=1e-6, rtol=1e-5)
    n, m = 12, 8
    counts = count_parameters(model)
    assert counts["output"] == 3 * n * n + n + n * V + V                 # [s_t; h*_t] is 3n wide
    assert counts["decoder"] == 4 * (n * n + n * m + 2 * n) + 3 * n * n + 2 * n   # LSTM on E y_{t-1} + attention
    assert model.model_rules()["pointer_variant"].startswith("see")


def test_log_space_mixture_keeps_gradient_for_very_unlikely_targets():
    """A target word whose probability is below 1e-30 still has its true log-prob and a gradient (the
    old clamp_min(1e-30) gave log 1e-30 and no gradient)."""
    model = make(seed=0).double()
    with torch.no_grad():
        model.output[-1].bias[19] -= 200.0            # word 19 appears in no source: only P_vocab holds it
    batch = oov_batch()
    out = model(batch)
    lp = out.log_probs[0, 0, 19]
    assert float(lp) < -150                           # not clamped at log(1e-30) = -69
    g = torch.autograd.grad(lp, model.output[-1].bias)[0]
    assert g[19] != 0


def test_bahdanau_variant_keeps_the_previous_rule():
    model = make(seed=2, variant="bahdanau")
    n, m = 12, 8
    assert count_parameters(model)["output"] == (3 * n + m) * n + n + n * V + V
    with pytest.raises(ValueError, match="variant"):
        make(variant="vinyals")


# --- the fused copy loss ----------------------------------------------------------------------------
def _copy_case(seed=0, dtype=torch.float64):
    """Random copy-model inputs over V = 20 with 3 extended ids: sources with repeated words and OOV
    words, targets that copy OOV words, hit words absent from the source, fall beyond the extension
    (-> <unk>), and padding."""
    from seq2seq_zoo.models.copying import source_words
    g = torch.Generator().manual_seed(seed)
    B, T, S, d, n_oov = 3, 5, 6, 7, 3
    src_ext = torch.tensor([[5, 6, 5, V, 7, 0], [V + 1, 4, V + 2, V + 1, 0, 0], [9, 9, 9, 3, 2, 8]])
    target = torch.tensor([[5, V, 11, 0, 0], [V + 2, V + 1, 4, V + 4, 12], [9, 8, 1, 2, 0]])
    generator = torch.nn.Linear(d, V).to(dtype)
    h = torch.randn(B, T, d, generator=g, dtype=dtype, requires_grad=True)
    z = torch.randn(B, T, generator=g, dtype=dtype, requires_grad=True)
    logits = torch.randn(B, T, S, generator=g, dtype=dtype).masked_fill((src_ext == 0).unsqueeze(1), -1e9)
    a = logits.softmax(-1).requires_grad_()
    same, first = source_words(src_ext, dtype)
    return h, generator, z, a, src_ext, n_oov, same, first, target


@pytest.mark.parametrize("eps,width", [(0.1, V), (0.1, None), (0.0, V), (0.3, 10)])
def test_fused_copy_losses_equal_the_mixture_and_token_losses(eps, width):
    """``copy_losses`` (the output layer read at the target and source words only) gives what the
    (B, T, V + n_oov) mixture gives through ``token_losses``: loss, NLL, token count and every gradient,
    for label smoothing over the vocabulary, over the extended width, over part of it, and none."""
    from seq2seq_zoo.models.base import token_losses
    from seq2seq_zoo.models.copying import copy_mixture
    from seq2seq_zoo.models.losses import copy_losses
    h, gen, z, a, src_ext, n_oov, same, first, target = _copy_case()
    params = [h, z, a, gen.weight, gen.bias]
    loss, nll, n = copy_losses(h, gen, z, a, src_ext, n_oov, same, first, target, eps, width)
    grads = torch.autograd.grad(loss, params)
    log_probs = copy_mixture(torch.log_softmax(gen(h), -1), z, a, src_ext, n_oov, same, first)
    ref_loss, ref_nll, ref_n = token_losses(log_probs, target, eps, width)
    ref_grads = torch.autograd.grad(ref_loss, params)
    assert n == ref_n == int((target != PAD_ID).sum())
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll.detach())
    for name, x, y in zip(("h", "z", "a", "W", "b"), grads, ref_grads):
        torch.testing.assert_close(x, y, msg=name)


def test_fused_copy_losses_under_bf16_autocast_and_all_padding():
    from seq2seq_zoo.models.base import token_losses
    from seq2seq_zoo.models.copying import copy_mixture
    from seq2seq_zoo.models.losses import copy_losses
    h, gen, z, a, src_ext, n_oov, same, first, target = _copy_case(dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, nll, n = copy_losses(h, gen, z, a, src_ext, n_oov, same, first, target, 0.1, V)
        ref = token_losses(copy_mixture(torch.log_softmax(gen(h).float(), -1), z, a, src_ext, n_oov, same, first),
                           target, 0.1, V)
    assert loss.dtype == torch.float32 and float(loss.detach()) == pytest.approx(float(ref[0].detach()), rel=0.01)
    g = torch.autograd.grad(loss, [h, gen.weight])
    rg = torch.autograd.grad(ref[0], [h, gen.weight])
    for x, y in zip(g, rg):
        assert float((x - y).norm()) <= 0.03 * float(y.norm())
    loss, nll, n = copy_losses(h, gen, z, a, src_ext, n_oov, same, first, torch.zeros_like(target), 0.1, V)
    assert n == 0 and float(loss) == 0.0 and loss.requires_grad


@pytest.mark.parametrize("name", ["pointer_generator", "transformer_pointer"])
def test_copy_models_fused_loss_equals_the_loss_of_their_log_probs(name):
    """Both copy models' training output takes the fused loss; it equals token_losses of the same
    output's log-probs (made when read), with the same gradients for every parameter."""
    from seq2seq_zoo.models.base import token_losses
    from seq2seq_zoo.models.fast.outputs import CopyOutput
    torch.manual_seed(0)
    model = (MODELS.create(name, vocab_size=V, d_model=8, heads=2, layers=1, d_ff=16, dropout=0.0)
             if name == "transformer_pointer" else make(name)).double().train()
    batch = oov_batch()
    out = model(batch)
    assert isinstance(out, CopyOutput)
    loss, nll, n = out.token_losses(batch.tgt_out, 0.1, V)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    ref_loss, ref_nll, ref_n = token_losses(model(batch).log_probs, batch.tgt_out, 0.1, V)
    ref_grads = torch.autograd.grad(ref_loss, params, allow_unused=True)
    assert n == ref_n
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll.detach())
    for x, y in zip(grads, ref_grads):
        if y is None:
            assert x is None or not bool(x.any())
        else:
            torch.testing.assert_close(x, y)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("fast", [True, False])
def test_copy_mixture_without_gradient_is_the_same_tensor_written_in_place(dtype, fast):
    """Decoding's ``copy_mixture`` (no gradient: the extended row written once and mixed in place) gives
    exactly, bit for bit, what the differentiable form gives, with repeated source words, OOV words
    and padding; with and without ``source_words``."""
    from seq2seq_zoo.models.pointer import copy_mixture
    h, gen, z, a, src_ext, n_oov, same, first, _ = _copy_case(dtype=dtype)
    log_vocab = torch.log_softmax(gen(h), -1)
    extra = (same, first) if fast else ()
    with_grad = copy_mixture(log_vocab, z, a, src_ext, n_oov, *extra)
    assert with_grad.requires_grad
    with torch.no_grad():
        without = copy_mixture(log_vocab, z, a, src_ext, n_oov, *extra)
    assert not without.requires_grad and without.shape == (3, 5, V + n_oov)
    assert torch.equal(without, with_grad.detach())
    assert torch.equal(copy_mixture(log_vocab.detach(), z.detach(), a.detach(), src_ext, n_oov, *extra), without)
