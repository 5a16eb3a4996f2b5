"""Transformer shapes (the seed reports' checks), attention maps, and KV-cache incremental decoding."""
from __future__ import annotations

import pytest
import torch

from conftest import make_encoded, random_batch, tiny_transformer
from seq2seq_zoo.data.batching import collate
from seq2seq_zoo.models.base import count_parameters
from seq2seq_zoo.models.transformer import Decoder, Encoder, Transformer


def test_encoder_shape():
    torch.manual_seed(0)
    enc = Encoder(50, d_model=16, heads=4, layers=2, d_ff=32, dropout=0.0).eval()
    src = torch.randint(1, 50, (1, 10))
    out, att = enc(src)
    assert out.shape == (1, 10, 16)
    assert att == {}
    out, att = enc(src, need_weights=True)
    assert sorted(att) == ["encoder_layer1_self_att", "encoder_layer2_self_att"]
    assert all(a.shape == (1, 4, 10, 10) for a in att.values())


def test_decoder_shapes_7_layers_19_heads_d15():
    torch.manual_seed(0)
    dec = Decoder(40, d_model=15, heads=19, layers=7, d_ff=30, key_dim=15, dropout=0.0).eval()
    tgt = torch.randint(4, 40, (3, 4))
    memory = torch.randn(3, 7, 15)
    out, att = dec(tgt, memory, need_weights=True)
    assert out.shape == (3, 4, 15)
    assert len(att) == 14
    for i in range(1, 8):
        self_w = att[f"decoder_layer{i}_block1_self_att"]
        cross_w = att[f"decoder_layer{i}_block2_decenc_att"]
        assert self_w.shape == (3, 19, 4, 4)
        assert cross_w.shape == (3, 19, 4, 7)
        assert torch.all(self_w.triu(1) == 0)  # look-ahead mask
        torch.testing.assert_close(self_w.sum(-1), torch.ones(3, 19, 4))
        torch.testing.assert_close(cross_w.sum(-1), torch.ones(3, 19, 4))


def test_full_transformer_vocab_350_log_probs_shape():
    torch.manual_seed(0)
    model = Transformer(350, d_model=16, d_ff=32, heads=4, layers=2, dropout=0.0, max_src_len=20,
                        max_tgt_len=10).eval()
    # target of 5 words -> decoder input <bos> + 5 = length 6
    batch = collate([make_encoded(list(range(10, 19)), [20, 21, 22, 23, 24])])
    assert batch.tgt_in.shape == (1, 6)
    out = model(batch)
    assert out.log_probs.shape == (1, 6, 350)
    torch.testing.assert_close(out.log_probs.exp().sum(-1), torch.ones(1, 6))


def test_padded_source_positions_get_zero_cross_attention():
    model = tiny_transformer(vocab_size=30)
    batch = random_batch(30, src_lens=[3, 7, 5], tgt_lens=[4, 2, 6], seed=1)
    att = model(batch, need_attention=True).attention
    names = [k for k in att if k.endswith("decenc_att")]
    assert len(names) == 2
    for name in names:
        w = att[name]
        for b, n in enumerate(batch.src_len.tolist()):
            assert torch.all(w[b, :, :, n:] == 0), name
            assert torch.all(w[b, :, :, :n] > 0), name
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
    for name in (k for k in att if k.startswith("encoder")):
        for b, n in enumerate(batch.src_len.tolist()):
            assert torch.all(att[name][b, :, :, n:] == 0)


def test_attention_maps_do_not_change_the_output():
    model = tiny_transformer(vocab_size=30)
    batch = random_batch(30, src_lens=[3, 7], tgt_lens=[4, 6], seed=2)
    a = model(batch).log_probs
    b = model(batch, need_attention=True).log_probs
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_padding_in_batch_does_not_change_an_example():
    """An example's log-probs are the same alone and padded inside a batch."""
    model = tiny_transformer(vocab_size=30)
    e1 = make_encoded([5, 6, 7], [8, 9])
    e2 = make_encoded([5, 6, 7, 10, 11, 12, 13], [8, 9, 10, 11, 12])
    alone = model(collate([e1])).log_probs[0]
    both = model(collate([e1, e2])).log_probs[0, : alone.size(0)]
    torch.testing.assert_close(alone, both, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("opts", [dict(), dict(pre_ln=True, pe="learned"), dict(tie_embeddings=False,
                                                                                  pe="sinusoidal_tmax")])
def test_incremental_decoding_matches_teacher_forcing(opts):
    model = tiny_transformer(vocab_size=30, seed=3, **opts)
    batch = random_batch(30, src_lens=[4, 9, 6], tgt_lens=[7, 3, 5], seed=4)
    with torch.no_grad():
        full = model(batch).log_probs                       # (B, T, V)
        state = model.encode(batch)
        steps = []
        for t in range(batch.tgt_in.size(1)):
            lp, state = model.decode_step(state, batch.tgt_in[:, t])
            steps.append(lp)
    inc = torch.stack(steps, 1)
    assert inc.shape == full.shape
    torch.testing.assert_close(inc, full, atol=1e-5, rtol=1e-5)


def test_incremental_decoding_after_reorder():
    """Beam search reorders the state: decoding the reordered rows equals decoding them directly."""
    model = tiny_transformer(vocab_size=30, seed=5)
    batch = random_batch(30, src_lens=[4, 6], tgt_lens=[5, 5], seed=6)
    idx = torch.tensor([1, 1, 0])
    with torch.no_grad():
        full = model(batch).log_probs
        state = model.encode(batch)
        lp0, state = model.decode_step(state, batch.tgt_in[:, 0])
        state = model.reorder(state, idx)
        outs = [lp0[idx]]
        for t in range(1, batch.tgt_in.size(1)):
            lp, state = model.decode_step(state, batch.tgt_in[idx, t])
            outs.append(lp)
    torch.testing.assert_close(torch.stack(outs, 1), full[idx], atol=1e-5, rtol=1e-5)


def test_parameter_counts_per_component_add_up():
    for tie in (True, False):
        model = tiny_transformer(vocab_size=30, tie_embeddings=tie, pe="learned")
        c = count_parameters(model)
        unique_total = sum(p.numel() for p in model.parameters())  # parameters() de-duplicates tied tensors
        assert c["total"] == unique_total
        assert set(c) >= {"embedding", "encoder", "decoder", "output", "total"}
        V, d = 30, 16
        assert c["embedding"] == (1 if tie else 2) * V * d
        assert c["output"] == (V if tie else V * d + V)  # tied: only the bias is new


@pytest.mark.parametrize("opts", [dict(), dict(pre_ln=True, pe="learned", tie_embeddings=False)])
@pytest.mark.parametrize("bf16", [False, True])
def test_inference_step_matches_the_general_step_through_reorders(opts, bf16):
    """``decode_step`` without grad in eval mode takes the inference path (``transformer_incremental``: fewer calls,
    the attention products in fp32 on CPU, the source keys converted once); its log-probs equal the
    general path's (taken with grad enabled) through a beam's reorders: rows grouped per source (the
    shared-keys case), then rows in any order (keys gathered per row)."""
    import contextlib
    model = tiny_transformer(vocab_size=30, seed=7, **opts)
    batch = random_batch(30, src_lens=[4, 9, 6], tgt_lens=[6, 6, 6], seed=8)
    K = 2
    grouped = torch.arange(3).repeat_interleave(K)
    schedule = [torch.tensor([1, 1, 2, 3, 5, 4]), torch.tensor([0, 1, 3, 3, 4, 4]),
                torch.tensor([5, 0, 3, 3, 1, 2]), torch.tensor([2, 2, 0, 1, 5, 4]), torch.arange(6)]
    prevs = torch.randint(4, 30, (len(schedule), 6), generator=torch.Generator().manual_seed(0))

    from seq2seq_zoo.models import transformer_incremental as incremental

    def run(grad: bool):
        steps = []
        orig = incremental.decoder_step
        incremental.decoder_step = lambda *a: steps.append(1) or orig(*a)
        out = []
        try:
            with torch.set_grad_enabled(grad), (torch.autocast("cpu", dtype=torch.bfloat16) if bf16
                                                else contextlib.nullcontext()):
                state = model.reorder(model.encode(batch), grouped)
                for t, idx in enumerate(schedule):
                    lp, state = model.decode_step(state, prevs[t])
                    state.pop("logits")
                    out.append(lp.detach().float())
                    state = model.reorder(state, idx)
        finally:
            incremental.decoder_step = orig
        return torch.stack(out), len(steps)

    fast, n_fast = run(grad=False)
    general, n_general = run(grad=True)
    assert (n_fast, n_general) == (len(schedule), 0)
    if bf16:  # the general path's attention products round to bf16, the inference path's stay fp32
        torch.testing.assert_close(fast, general, atol=0.03, rtol=0.02)   # measured: 0.015 at most
        assert (fast.argmax(-1) == general.argmax(-1)).float().mean() > 0.9
    else:
        torch.testing.assert_close(fast, general, atol=1e-5, rtol=1e-5)


def test_inference_step_attention_products_stay_fp32_under_bf16_autocast():
    """On CPU the step's attention products run in fp32 although the step runs under bf16 autocast (which
    would cast fp32 matmul inputs back to bf16): the self-attention cache is fp32 and the products match
    an fp64 computation to fp32 rounding."""
    from seq2seq_zoo.models.transformer_incremental import step_attention
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, s, 8, generator=g) for s in (4, 11, 11))
    bias = torch.zeros(2, 1, 1, 11).masked_fill_(torch.arange(11) >= 9, float("-inf"))
    ref = torch.softmax((q.double() @ k.double().transpose(-2, -1)) / 8 ** 0.5 + bias.double(), -1) @ v.double()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = step_attention(q, k, v, bias, fp32=True)
        low = step_attention(q, k, v, bias, fp32=False)
    assert out.dtype == torch.float32 and low.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref, atol=1e-6, rtol=1e-5)
    # GPUs take F.scaled_dot_product_attention with the same additive bias: the same values
    torch.testing.assert_close(torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias).double(),
                               ref, atol=1e-6, rtol=1e-5)
    model = tiny_transformer(vocab_size=30, seed=2)
    batch = random_batch(30, src_lens=[4, 6], tgt_lens=[3, 3], seed=1)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        state = model.encode(batch)
        _, state = model.decode_step(state, batch.tgt_in[:, 0])
        _, state = model.decode_step(state, batch.tgt_in[:, 1])
    assert all(c["k"].dtype == c["v"].dtype == torch.float32 and c["k"].size(2) == 2 for c in state["caches"])
    assert all(k.dtype == torch.float32 for k, _ in state["cross_kv"])


def test_reorders_compose_and_the_inference_path_takes_over_the_general_paths_caches():
    """Two beam reorders in a row act as their composition, and a state the general path extended (with
    grad) goes on in the inference path from its caches; the log-probs equal the general path's
    throughout."""
    model = tiny_transformer(vocab_size=30, seed=3)
    batch = random_batch(30, src_lens=[5, 7], tgt_lens=[6, 6], seed=4)
    prevs = torch.randint(4, 30, (5, 4), generator=torch.Generator().manual_seed(1))
    first, second = torch.tensor([1, 0, 3, 3]), torch.tensor([2, 2, 0, 1])

    def run(grad_steps: int, split: bool):
        state = model.reorder(model.encode(batch), torch.tensor([0, 0, 1, 1]))
        out = []
        for t in range(len(prevs)):
            with torch.set_grad_enabled(t < grad_steps):
                lp, state = model.decode_step(state, prevs[t])
            state.pop("logits")
            out.append(lp.detach())
            if t == 2:   # the same reorder, in two steps or at once
                state = model.reorder(model.reorder(state, first), second) if split \
                    else model.reorder(state, first[second])
        return torch.stack(out)

    general = run(grad_steps=len(prevs), split=False)
    for grad_steps, split in ((0, True), (0, False), (2, True)):
        torch.testing.assert_close(run(grad_steps, split), general, atol=1e-5, rtol=1e-5)
