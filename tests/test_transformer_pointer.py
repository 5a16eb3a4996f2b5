"""transformer_pointer: the Transformer with a pointer-generator copy switch. The extended-vocabulary
distribution, the mixture formula on its copy head, step decoding = teacher forcing (in order, in beam
groups and in no order), bf16 decoding, gradients, parameter counts, and a copy task that training learns."""
from __future__ import annotations

import math

import pytest
import torch
from conftest import make_encoded
from test_pointer import assert_beam_one_is_greedy, assert_steps_equal_teacher_forcing, copy_task, oov_batch

from seq2seq_zoo.config import DecodeConfig, TrainConfig
from seq2seq_zoo.data.batching import collate, encode_examples
from seq2seq_zoo.data.text import TextConfig, detokenize
from seq2seq_zoo.data.vocab import BOS_ID, PAD_ID, UNK_ID, Vocab
from seq2seq_zoo.decode import beam_search, generate
from seq2seq_zoo.models.base import build_model, count_parameters
from seq2seq_zoo.models.layers import padding_mask
from seq2seq_zoo.train.loop import fit

V = 20
CPU = torch.device("cpu")


def make(seed=0, vocab_size=V, **kw):
    opts = {"d_model": 16, "d_ff": 32, "heads": 2, "layers": 2, "dropout": 0.0, "pre_ln": True,
            "pe": "sinusoidal_tmax"}
    opts.update(kw)
    torch.manual_seed(seed)
    return build_model("transformer_pointer", {"vocab_size": vocab_size, "max_src_len": 16, "max_tgt_len": 8},
                       opts).eval()


def test_distribution_sums_to_one_over_extended_vocab():
    model = make()
    batch = oov_batch()
    with torch.no_grad():
        out = model(batch)
        lp, _ = model.decode_step(model.encode(batch), torch.full((3,), BOS_ID))
    assert out.log_probs.shape == (3, 4, V + 3)           # V_ext = V + the batch's most OOVs (3)
    real = batch.tgt_out != PAD_ID
    assert torch.allclose(out.log_probs.exp().sum(-1)[real], torch.ones(int(real.sum())), atol=1e-5)
    assert lp.shape == (3, V + 3) and torch.allclose(lp.exp().sum(-1), torch.ones(3), atol=1e-5)
    assert out.extras["p_gen"].shape == (3, 4)


def test_mixture_formula_on_the_copy_head():
    """P(ext id k) = (1 - p_gen) * the copy head's attention on the positions holding OOV k; a word in no
    source keeps p_gen * P_vocab <= p_gen; padding gets no copy attention."""
    model = make(seed=1)
    batch = oov_batch()
    with torch.no_grad():
        out = model(batch, need_attention=True)
    a = out.attention["copy_att"][:, 0]                   # (B, T, S)
    p_gen, probs = out.extras["p_gen"], out.log_probs.exp()
    assert torch.allclose(a.sum(-1), torch.ones(3, 4), atol=1e-6)
    assert float(a[0, :, 3:].abs().sum()) == 0.0          # example 0 has 3 source tokens
    for k in range(3):
        held = (batch.src_ext == V + k).float()
        assert torch.allclose(probs[..., V + k], (1 - p_gen) * (a * held[:, None, :]).sum(-1), atol=1e-6)
    assert float(probs[0, :, V:].sum()) < 1e-20
    assert (probs[..., 19] <= p_gen + 1e-7).all() and ((p_gen > 0) & (p_gen < 1)).all()
    # a source word's probability: p_gen P_vocab + (1 - p_gen) copy mass (word 7 at position 2 of examples 0, 1)
    with torch.no_grad():
        memory = model.encoder(batch.src)[0]
        h = model.decoder(model.feed(batch.tgt_in), memory, padding_mask(batch.src))[0]
    log_vocab = torch.log_softmax(model.generator(h), -1)
    expect = p_gen[:2] * log_vocab[:2, :, 7].exp() + (1 - p_gen[:2]) * a[:2, :, 2]
    assert torch.allclose(probs[:2, :, 7], expect, atol=1e-6)


def test_only_source_oov_word_gets_all_mass_when_p_gen_is_zero():
    model = make()
    with torch.no_grad():
        model.p_gen.weight.zero_()
        model.p_gen.bias.fill_(-1e4)
    batch = collate([make_encoded([UNK_ID], [UNK_ID], src_ext=[V], tgt_ext=[V], oovs=["zanzibar"])])
    with torch.no_grad():
        out = model(batch)
        lp, _ = model.decode_step(model.encode(batch), torch.tensor([BOS_ID]))
    assert torch.allclose(out.log_probs.exp()[..., V], torch.ones(1, 2), atol=1e-6)
    assert int(lp.argmax(-1)) == V and float(lp[0, V].exp()) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("order", ["in order", "groups of 2", "no order"])
def test_step_decoding_equals_teacher_forcing(order):
    """Teacher forcing and step-by-step decoding give the same extended log-probs, with the state's rows
    one per source, two consecutive hypotheses per source (beam search) or permuted."""
    model = make(seed=2)
    batch = oov_batch()
    index = {"in order": [0, 1, 2], "groups of 2": [0, 0, 1, 1, 2, 2], "no order": [2, 0, 1]}[order]
    index = torch.tensor(index)
    with torch.no_grad():
        full = model(batch).log_probs[index]
        state = model.reorder(model.encode(batch), index)
        assert state["group"] == {"in order": 1, "groups of 2": 2, "no order": 0}[order]
        assert_steps_equal_teacher_forcing(model, state, batch.tgt_out[index], full)


def test_beam_one_equals_greedy_and_bf16_decoding_runs():
    model = make(seed=3)
    batch = oov_batch()
    assert_beam_one_is_greedy(model, batch)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        lp, _ = model.decode_step(model.encode(batch), torch.full((3,), BOS_ID))
        ids = beam_search(model, batch, DecodeConfig(beam_size=3, max_len=6, min_len=2))
    assert torch.isfinite(lp).all() and torch.allclose(lp.float().exp().sum(-1), torch.ones(3), atol=1e-2)
    assert len(ids) == 3 and all(max(s, default=0) < V + 3 for s in ids)


def test_gradients_reach_the_copy_head_and_match_finite_differences():
    model = make(d_model=8, d_ff=8, layers=1).double()
    batch = oov_batch()
    loss = -model(batch).log_probs.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)[batch.tgt_out != PAD_ID].sum()
    loss.backward()
    for lin in (model.copy_q, model.copy_k, model.p_gen):
        assert float(lin.weight.grad.abs().sum()) > 0
    params = {n: p.detach() for n, p in model.named_parameters()}

    def nll(wq, wk):
        out = torch.func.functional_call(model, {**params, "copy_q.weight": wq, "copy_k.weight": wk}, (batch,))
        return -out.log_probs.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)[batch.tgt_out != PAD_ID].sum()

    torch.autograd.gradcheck(nll, (params["copy_q.weight"].clone().requires_grad_(),
                                   params["copy_k.weight"].clone().requires_grad_()))


def test_pointer_component_counts_2d2_plus_3d_plus_1():
    d = 16
    plain = count_parameters(build_model("transformer", {"vocab_size": V, "max_src_len": 16, "max_tgt_len": 8},
                                         {"d_model": d, "d_ff": 32, "heads": 2, "layers": 2}))
    copy = count_parameters(make(d_model=d, d_ff=32, pre_ln=False, pe="sinusoidal"))
    assert copy["pointer"] == 2 * d * d + 3 * d + 1
    assert copy["total"] == plain["total"] + copy["pointer"]
    assert "dedicated head" in make().model_rules()["copy"]


def test_transformer_pointer_learns_to_copy_oov_words(tmp_path):
    cfg = TextConfig()
    train = copy_task(64, 0)
    vocab = Vocab.build([["alpha", "beta", "gamma", "delta"]])
    enc = encode_examples(train, vocab, cfg, 8, 4)
    torch.manual_seed(0)
    model = build_model("transformer_pointer", {"vocab_size": len(vocab), "max_src_len": 8, "max_tgt_len": 4},
                        {"d_model": 32, "d_ff": 64, "heads": 2, "layers": 1, "dropout": 0.0, "pre_ln": True})
    st = fit(model, enc, enc[:16], TrainConfig(epochs=25, batch_size=16, lr=3e-3, clip_norm=1.0,
                                                precision="fp32"), seed=0, device=CPU, progress=False,
             ckpt_dir=tmp_path, log=lambda *a: None)
    losses = [h["train_loss"] for h in st.history]
    assert losses[-1] < 0.3 * losses[0], losses
    test = encode_examples(copy_task(8, 99), vocab, cfg, 8, 4)
    batch = collate(test)
    ids = generate(model.eval(), batch, DecodeConfig(method="greedy", max_len=4))
    texts = [detokenize(vocab.decode(s, o)) for s, o in zip(ids, batch.oovs)]
    assert sum(t == e.references[0] for t, e in zip(texts, test)) >= 6, texts
    assert not any("<unk>" in t for t in texts)
    assert math.isfinite(losses[-1])
