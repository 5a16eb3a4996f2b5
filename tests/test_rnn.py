"""The recurrent family (gru, bahdanau, bilstm): shapes, padding, attention, step decoding equal to
teacher forcing (also after beam reordering), overfitting, beam 1 = greedy, pretrained embeddings, and
parameter counts equal to the closed forms."""
from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import make_encoded, random_batch, tiny_encoded

from seq2seq_zoo.config import DecodeConfig, TrainConfig
from seq2seq_zoo.data.batching import collate
from seq2seq_zoo.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seq2seq_zoo.precision import autocast
from seq2seq_zoo.decode import beam_search, greedy
from seq2seq_zoo.models.base import build_model, count_parameters
from seq2seq_zoo.models.rnn import ATTENTION_NAME, AdditiveAttention
from seq2seq_zoo.registry import MODELS, model_options
from seq2seq_zoo.train.loop import fit, validation_loss

MODEL_NAMES = ["gru", "bahdanau", "bilstm"]
ATTENTIONAL = ["bahdanau", "bilstm"]
CPU = torch.device("cpu")
V = 30


def make(name, vocab_size=V, seed=0, **kw):
    opts = {"emb_dim": 8, "hidden": 12}
    opts.update(kw)
    torch.manual_seed(seed)
    return MODELS.create(name, vocab_size=vocab_size, **opts).eval()


def ragged_batch(seed=1):
    return random_batch(V, src_lens=[3, 7, 5], tgt_lens=[4, 2, 6], seed=seed)


def real_targets(batch):
    return batch.tgt_out != PAD_ID


# --- registry and construction ------------------------------------------------------------------

def test_models_are_registered_with_their_options():
    assert set(MODEL_NAMES) <= set(MODELS.names())
    assert MODELS.names("b*") == ["bahdanau", "bilstm"]
    for name in MODEL_NAMES:
        opts = model_options(name)
        expect = {"emb_dim": 128, "hidden": 256, "layers": 1, "dropout": 0.0, "share_embeddings": True,
                  "embeddings": "random", "freeze_embeddings": False}
        assert {k: opts.get(k) for k in expect} == expect
        model = build_model(name, {"vocab_size": 20, "max_src_len": 50, "max_tgt_len": 10}, {"hidden": 8, "emb_dim": 4})
        assert model.vocab_size == 20 and model.d_model == 8
        assert MODELS.doc(name)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_builds_on_the_meta_device_with_defaults(name):
    # config.load builds every run's model on the meta device to check its options
    with torch.device("meta"):
        model = build_model(name, {"vocab_size": 1000, "max_src_len": 400, "max_tgt_len": 100}, {})
    assert count_parameters(model)["total"] > 0


@pytest.mark.parametrize("bad", [{"hidden": 0}, {"emb_dim": -1}, {"layers": 0}, {"dropout": 1.0},
                                 {"embeddings": 3}])
def test_bad_options_are_value_errors_naming_the_option(bad):
    key = next(iter(bad))
    with pytest.raises(ValueError, match=key):
        make("bilstm", **bad)


def test_dropout_with_one_layer_builds_without_warnings_and_acts_in_training():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = make("bahdanau", dropout=0.5)
    batch = ragged_batch()
    a = model(batch).log_probs
    torch.testing.assert_close(a, model(batch).log_probs)  # eval: deterministic
    model.train()
    assert not torch.allclose(a, model(batch).log_probs)


# --- shapes ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_shapes_of_forward_encode_and_decode_step(name, layers):
    model = make(name, layers=layers)
    batch = ragged_batch()
    B, S = batch.src.shape
    T = batch.tgt_in.size(1)
    out = model(batch)
    assert out.log_probs.shape == (B, T, V)
    torch.testing.assert_close(out.log_probs.exp().sum(-1), torch.ones(B, T))
    assert out.attention == {}
    state = model.encode(batch)
    assert state["h"].shape == (B, layers, 12)
    if name == "bilstm":
        assert state["c"].shape == (B, layers, 12)
    if name in ATTENTIONAL:
        width = 24 if name == "bilstm" else 12
        assert state["memory"].shape == (B, S, width)
        assert state["keys"].shape == (B, S, 12)
        assert state["mask"].shape == (B, S)
    lp, state2 = model.decode_step(state, batch.tgt_in[:, 0])
    assert lp.shape == (B, V)
    assert state2.keys() - {"logits"} == state.keys() - {"logits"}   # + the step's raw logits
    torch.testing.assert_close(torch.log_softmax(state2["logits"].float(), -1), lp)
    assert all(state2[k].shape == state[k].shape for k in state if torch.is_tensor(state[k]))


@pytest.mark.parametrize("name", ATTENTIONAL)
def test_attention_weights_shape_sum_and_zero_on_padding(name):
    model = make(name)
    batch = ragged_batch()
    out = model(batch, need_attention=True)
    assert list(out.attention) == [ATTENTION_NAME]
    w = out.attention[ATTENTION_NAME]
    B, S = batch.src.shape
    assert w.shape == (B, 1, batch.tgt_in.size(1), S)
    for b, n in enumerate(batch.src_len.tolist()):
        assert torch.all(w[b, :, :, n:] == 0)       # exactly zero, not just small
        assert torch.all(w[b, :, :, :n] > 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, 1, batch.tgt_in.size(1)))
    torch.testing.assert_close(out.log_probs, model(batch).log_probs)  # asking for weights changes nothing
    assert model.attention.weights.shape == (B, S)  # the module exposes its last weights


def test_additive_attention_module():
    torch.manual_seed(0)
    att = AdditiveAttention(query_dim=5, key_dim=6, attn_dim=4)
    q, mem = torch.randn(2, 5), torch.randn(2, 3, 6)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    c, a = att(q, mem, mask)
    # e_j = v^T tanh(W q + U h_j + b), computed by hand
    pre = (q @ att.W.weight.T)[:, None, :] + mem @ att.U.weight.T + att.U.bias
    e = (torch.tanh(pre) @ att.v.weight.T).squeeze(-1)
    expect = e.masked_fill(~mask, float("-inf")).softmax(-1)
    torch.testing.assert_close(a, expect)
    assert a[0, 2] == 0
    torch.testing.assert_close(c, (a[:, :, None] * mem).sum(1))
    assert att.weights is not None and torch.equal(att.weights, a)
    c2, _ = att(q, mem, mask, keys=att.project(mem))
    torch.testing.assert_close(c, c2)


# --- padding never matters -------------------------------------------------------------------------

def _items(seed=3):
    g = torch.Generator().manual_seed(seed)
    src_lens, tgt_lens = [3, 7, 5], [4, 2, 6]
    return [make_encoded(torch.randint(4, V, (s,), generator=g).tolist(),
                         torch.randint(4, V, (t,), generator=g).tolist(), f"x{i}")
            for i, (s, t) in enumerate(zip(src_lens, tgt_lens))]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_an_example_alone_equals_the_example_in_a_padded_batch(name):
    model = make(name, layers=2)
    items = _items()
    together = model(collate(items), need_attention=True)
    for i, item in enumerate(items):
        alone = model(collate([item]), need_attention=True)
        T, S = len(item.tgt) + 1, len(item.src)
        torch.testing.assert_close(together.log_probs[i, :T], alone.log_probs[0], atol=1e-5, rtol=0)
        if name in ATTENTIONAL:
            torch.testing.assert_close(together.attention[ATTENTION_NAME][i, :, :T, :S],
                                       alone.attention[ATTENTION_NAME][0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_extra_source_padding_and_the_pad_embedding_change_nothing(name):
    model = make(name)
    batch = ragged_batch()
    ref = model(batch, need_attention=True)
    keep = real_targets(batch)
    wider = dataclasses.replace(batch, src=F.pad(batch.src, (0, 4), value=PAD_ID))
    out = model(wider, need_attention=True)
    torch.testing.assert_close(out.log_probs, ref.log_probs, atol=1e-6, rtol=0)
    if name in ATTENTIONAL:
        w = out.attention[ATTENTION_NAME]
        assert torch.all(w[..., -4:] == 0)
        torch.testing.assert_close(w[..., :-4], ref.attention[ATTENTION_NAME], atol=1e-6, rtol=0)
    with torch.no_grad():  # whatever the padding vector is, no scored output moves
        model.src_embed.weight[PAD_ID] = torch.randn(model.emb_dim) * 10
    out = model(batch)
    torch.testing.assert_close(out.log_probs[keep], ref.log_probs[keep], atol=1e-6, rtol=0)


# --- step decoding = teacher forcing ---------------------------------------------------------------

@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_decode_step_equals_forward_position_by_position_with_reorder(name, layers):
    model = make(name, layers=layers, share_embeddings=False)
    batch = ragged_batch(seed=4)
    ref = model(batch).log_probs                          # (B, T, V)
    T = ref.size(1)
    tgt = batch.tgt_in
    # plain
    state = model.encode(batch)
    for t in range(T):
        lp, state = model.decode_step(state, tgt[:, t])
        torch.testing.assert_close(lp, ref[:, t], atol=1e-5, rtol=0)
    # as beam search uses it: expand to beams, then reorder again in the middle of decoding
    index = torch.tensor([2, 0, 0, 1, 2])
    state = model.reorder(model.encode(batch), index)
    rows = index.clone()
    for t in range(T):
        if t == 2:
            perm = torch.tensor([4, 3, 1, 1, 0])
            state = model.reorder(state, perm)
            rows = rows[perm]
        lp, state = model.decode_step(state, tgt[rows, t])
        torch.testing.assert_close(lp, ref[rows, t], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_extended_ids_are_fed_back_as_unk(name):
    model = make(name)
    batch = ragged_batch()
    state = model.encode(batch)
    prev = torch.tensor([V, V + 3, 1])   # copied OOV words: <unk> to the decoder
    a, _ = model.decode_step(state, prev)
    b, _ = model.decode_step(model.encode(batch), torch.tensor([1, 1, 1]))
    torch.testing.assert_close(a, b)


# --- decoding ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODEL_NAMES)
def test_beam_1_equals_greedy_and_wider_beams_run(name):
    torch.manual_seed(0)
    model = make(name, seed=1)
    with torch.no_grad():  # a peaked output of real words that never ends early: a non-trivial argmax path
        model.output.weight.mul_(20)
        model.output.bias[[PAD_ID, BOS_ID, EOS_ID]] = -1e4
    batch = random_batch(V, src_lens=[6, 3, 8, 5], tgt_lens=[2, 2, 2, 2], seed=5)
    g = greedy(model, batch, DecodeConfig(method="greedy", max_len=12))
    b1 = beam_search(model, batch, DecodeConfig(method="beam", beam_size=1, max_len=12))
    assert g == b1
    assert all(len(x) == 12 for x in g)
    b3 = beam_search(model, batch, DecodeConfig(method="beam", beam_size=3, max_len=12))
    assert len(b3) == 4 and all(len(x) <= 12 for x in b3)


# --- training ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODEL_NAMES)
def test_overfits_eight_examples_with_the_loop(name, tmp_path):
    vocab, data = tiny_encoded(8)
    torch.manual_seed(0)
    model = MODELS.create(name, vocab_size=len(vocab), emb_dim=16, hidden=32)
    initial = validation_loss(model, data, 8, CPU, None)
    cfg = TrainConfig(epochs=25, batch_size=8, lr=1e-2, betas=[0.9, 0.999], eps=1e-8, precision="fp32")
    st = fit(model, data, data, cfg, seed=0, ckpt_dir=tmp_path, device=CPU, progress=False, log=lambda s: None)
    final = validation_loss(model, data, 8, CPU, None)
    assert st.finished and final < 0.5 * initial, (initial, final)
    # a trained model: beam 1 still equals greedy
    batch = collate(data[:4])
    model.eval()
    assert greedy(model, batch, DecodeConfig(method="greedy", max_len=12)) == \
        beam_search(model, batch, DecodeConfig(beam_size=1, max_len=12))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_bf16_autocast_trains_and_decodes(name):
    model = make(name).train()
    batch = ragged_batch()
    # the suite's autocast context (the loop's, decoding's and evaluation's): on CPUs without oneDNN bf16
    # kernels (AVX2 only) a bare torch.autocast makes oneDNN's LSTM fail
    with autocast(torch.device("cpu"), torch.bfloat16):
        out = model(batch)
        loss = -out.log_probs[real_targets(batch)].gather(-1, batch.tgt_out[real_targets(batch)][:, None]).mean()
        loss.backward()
        model.eval()
        with torch.no_grad():
            lp, _ = model.decode_step(model.encode(batch), batch.tgt_in[:, 0])
    assert torch.isfinite(loss) and torch.isfinite(lp).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)


# --- embeddings -------------------------------------------------------------------------------------

@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_pretrained_embeddings_are_copied_and_frozen(name, share, tmp_path):
    torch.manual_seed(7)
    pre = torch.randn(V, 8)
    # the runner passes the vectors in the data context, beside vocab_size
    model = build_model(name, {"vocab_size": V, "max_src_len": 9, "pretrained_embeddings": pre},
                        {"emb_dim": 8, "hidden": 12, "share_embeddings": share, "embeddings": "word2vec",
                         "freeze_embeddings": True})
    tables = [model.src_embed, model.tgt_embed]
    assert (tables[0] is tables[1]) == share
    for t in tables:
        assert torch.equal(t.weight, pre) and not t.weight.requires_grad
    assert count_parameters(model)["embedding"] == 0
    batch = ragged_batch()
    model.train()
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.1)
    (-model(batch).log_probs.mean()).backward()
    opt.step()
    for t in tables:
        assert torch.equal(t.weight, pre)               # untouched by training
    # copied but trainable
    model = make(name, pretrained_embeddings=pre, share_embeddings=share)
    assert all(torch.equal(t.weight, pre) and t.weight.requires_grad for t in (model.src_embed, model.tgt_embed))
    assert count_parameters(model)["embedding"] == (1 if share else 2) * V * 8
    with pytest.raises(ValueError, match="pretrained_embeddings"):
        make(name, pretrained_embeddings=torch.randn(V, 9))


def test_frozen_random_embeddings_and_zero_padding_row():
    model = make("gru", freeze_embeddings=True, share_embeddings=False)
    assert not model.src_embed.weight.requires_grad and not model.tgt_embed.weight.requires_grad
    assert torch.all(model.src_embed.weight[PAD_ID] == 0) and torch.all(model.tgt_embed.weight[PAD_ID] == 0)


# --- parameter counts = closed forms ----------------------------------------------------------------

def gru_layer(n, i):
    return 3 * (n * n + n * i + 2 * n)


def lstm_layer(n, i):
    return 4 * (n * n + n * i + 2 * n)


def closed_form(name, V, m, n, L, share):
    emb = (1 if share else 2) * V * m
    if name == "gru":
        enc = gru_layer(n, m) + (L - 1) * gru_layer(n, n)
        return {"embedding": emb, "encoder": enc, "decoder": enc, "output": n * V + V}
    if name == "bahdanau":
        enc = gru_layer(n, m) + (L - 1) * gru_layer(n, n)
        attention = n * n + (n * n + n) + n                     # W, (U, b), v
        dec = gru_layer(n, m + n) + (L - 1) * gru_layer(n, n) + attention
        return {"embedding": emb, "encoder": enc, "decoder": dec, "output": (2 * n + m) * V + V}
    if name == "bilstm":
        reduce = 2 * (2 * n * n + n)
        enc = 2 * lstm_layer(n, m) + (L - 1) * 2 * lstm_layer(n, 2 * n) + reduce
        attention = n * n + (2 * n * n + n) + n
        dec = lstm_layer(n, m + 2 * n) + (L - 1) * lstm_layer(n, n) + attention
        return {"embedding": emb, "encoder": enc, "decoder": dec, "output": (3 * n + m) * V + V}
    raise AssertionError(name)


@pytest.mark.parametrize("cfg", [(1, True), (2, False), (3, True)])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_parameter_counts_equal_the_closed_forms(name, cfg):
    L, share = cfg
    Vs, m, n = 37, 6, 10
    model = make(name, vocab_size=Vs, emb_dim=m, hidden=n, layers=L, share_embeddings=share)
    counts = count_parameters(model)
    expect = closed_form(name, Vs, m, n, L, share)
    assert {k: counts[k] for k in expect} == expect
    assert "other" not in counts                        # every parameter belongs to a component
    assert counts["total"] == sum(expect.values()) == sum(p.numel() for p in model.parameters())


def test_paper_sized_gru_encoder_count():
    # e.g. m = 128, n = 256: 3(n^2 + nm + 2n) = 3(65536 + 32768 + 512) = 296,448
    with torch.device("meta"):
        model = MODELS.create("gru", vocab_size=1000)
    assert count_parameters(model)["encoder"] == 296_448
