"""The fast paths under the models: the fused output layer + loss, the CPU math attention, the cheaper
dropout mask and the Transformer's decoder state that keeps one row per source, each against the plain
computation it replaces."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from conftest import random_batch, tiny_transformer
from seq2seq_zoo.config import DecodeConfig
from seq2seq_zoo.decode import beam_search
from seq2seq_zoo.models.fast.kernels import Dropout, dropout_keep_mask, math_attention
from seq2seq_zoo.models.losses import fused_token_losses
from seq2seq_zoo.train.objectives import token_losses

CPU = torch.device("cpu")

@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_fused_token_losses_equal_token_losses(eps):
    torch.manual_seed(0)
    V, d = 37, 8
    h = torch.randn(3, 5, d, dtype=torch.float64, requires_grad=True)
    lin = torch.nn.Linear(d, V).double()
    target = torch.randint(4, V, (3, 5))
    target[0, 3:] = 0                 # padding
    target[1, 1] = V + 2              # an extended id the layer cannot produce -> <unk>
    ref_loss, ref_nll, ref_n = token_losses(lin(h).log_softmax(-1), target, eps, V)
    g_ref = torch.autograd.grad(ref_loss, [h, lin.weight, lin.bias])
    loss, nll, n = fused_token_losses(h, lin.weight, lin.bias, target, eps, V)
    g = torch.autograd.grad(loss, [h, lin.weight, lin.bias])
    assert n == ref_n == 13
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b)


def test_fused_token_losses_over_several_row_blocks():
    """A vocabulary large enough that the rows are processed in several blocks (and the upstream
    gradient is not 1)."""
    torch.manual_seed(2)
    V, d = 5000, 4
    h = torch.randn(2, 1000, d, dtype=torch.float64, requires_grad=True)
    lin = torch.nn.Linear(d, V).double()
    target = torch.randint(4, V, (2, 1000))
    target[1, 900:] = 0
    ref = token_losses(lin(h).log_softmax(-1), target, 0.1, V)[0] * 0.37
    g_ref = torch.autograd.grad(ref, [h, lin.weight, lin.bias])
    loss = fused_token_losses(h, lin.weight, lin.bias, target, 0.1, V)[0] * 0.37
    g = torch.autograd.grad(loss, [h, lin.weight, lin.bias])
    torch.testing.assert_close(loss, ref)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b)


def test_fused_token_losses_under_bf16_autocast_match_the_unfused_path():
    torch.manual_seed(1)
    V, d = 300, 16
    h = torch.randn(2, 40, d, requires_grad=True)
    lin = torch.nn.Linear(d, V)
    target = torch.randint(4, V, (2, 40))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = token_losses(lin(h).float().log_softmax(-1), target, 0.1, V)[0]
        fused = fused_token_losses(h, lin.weight, lin.bias, target, 0.1, V)[0]
    torch.testing.assert_close(fused, ref, rtol=1e-4, atol=1e-3)
    g_ref = torch.autograd.grad(ref, [h, lin.weight])
    g = torch.autograd.grad(fused, [h, lin.weight])
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, rtol=0.05, atol=1e-3)


def test_fused_token_losses_bf16_over_several_row_blocks(monkeypatch):
    """bf16 on CPU takes its own path (one logits buffer, G in place, one product for dW): over three
    row blocks it matches the fp32-accumulating blocked path and an fp64 reference to bf16 rounding."""
    from seq2seq_zoo.models.fast import kernels
    torch.manual_seed(3)
    V, d = 5000, 16
    h = torch.randn(2, 1000, d, requires_grad=True)
    lin = torch.nn.Linear(d, V)
    target = torch.randint(4, V, (2, 1000))
    target[1, 950:] = 0

    def fused(low: bool):
        monkeypatch.setattr(kernels, "_low_precision_cpu", lambda cd: low and cd == torch.bfloat16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = fused_token_losses(h, lin.weight, lin.bias, target, 0.1, V)[0] * 0.37
        return loss, torch.autograd.grad(loss, [h, lin.weight, lin.bias])
    new, g_new = fused(True)
    old, g_old = fused(False)
    h64, w64, b64 = (t.detach().double().requires_grad_() for t in (h, lin.weight, lin.bias))
    ref = token_losses(F.linear(h64, w64, b64).log_softmax(-1), target, 0.1, V)[0] * 0.37
    g_ref = torch.autograd.grad(ref, [h64, w64, b64])
    torch.testing.assert_close(new, old, rtol=1e-4, atol=0)
    torch.testing.assert_close(new.double(), ref, rtol=1e-3, atol=0)
    for a, b, r in zip(g_new, g_old, g_ref):
        assert a.dtype == b.dtype == torch.float32
        err_new = ((a.double() - r).norm() / r.norm()).item()
        err_old = ((b.double() - r).norm() / r.norm()).item()
        assert err_new < 0.01 and err_new < 1.5 * err_old + 1e-4, (err_new, err_old)


@pytest.mark.parametrize("autocast", [False, True])
def test_fused_token_losses_weight_gradient_comes_in_the_weights_layout(autocast):
    """dW leaves the backward contiguous in the weight's (V, d) layout, fp32 blocked path and bf16 path
    alike: a transposed sum made autograd copy it into the parameter's layout on every step."""
    torch.manual_seed(5)
    V, d = 3000, 8
    h = torch.randn(700, d, requires_grad=True)
    lin = torch.nn.Linear(d, V)
    target = torch.randint(4, V, (700,))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = fused_token_losses(h, lin.weight, lin.bias, target, 0.1, V)[0] * 0.5
    gw, gb = torch.autograd.grad(loss, [lin.weight, lin.bias])
    assert gw.shape == lin.weight.shape and gw.stride() == lin.weight.stride()
    w64 = lin.weight.detach().double().requires_grad_()
    ref = token_losses(F.linear(h.detach().double(), w64, lin.bias.double()).log_softmax(-1), target, 0.1, V)[0] * 0.5
    (g_ref,) = torch.autograd.grad(ref, [w64])
    assert ((gw.double() - g_ref).norm() / g_ref.norm()).item() < (0.01 if autocast else 1e-5)


def test_fused_token_losses_bf16_second_backward_is_an_error():
    torch.manual_seed(4)
    h = torch.randn(50, 8, requires_grad=True)
    lin = torch.nn.Linear(8, 40)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = fused_token_losses(h, lin.weight, lin.bias, torch.randint(4, 40, (50,)), 0.1, 40)[0]
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):   # not a silent wrong result
        loss.backward()


def test_logit_stats_values_gradcheck_and_bf16_buffer():
    """``kernels.logit_stats``: each row's log-sum-exp and the logits at the given columns, with a
    hand-written backward (gradcheck in fp64); under CPU bf16 autocast the logits live in one bf16 buffer
    that the backward turns into the gradient in place, so a second backward is an error."""
    from seq2seq_zoo.models.fast.kernels import logit_stats
    torch.manual_seed(0)
    h = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    lin = torch.nn.Linear(5, 11).double()
    idx = torch.randint(0, 11, (7, 3))
    lse, picked = logit_stats(h, lin.weight, lin.bias, idx)
    z = lin(h)
    torch.testing.assert_close(lse, z.logsumexp(-1))
    torch.testing.assert_close(picked, z.gather(1, idx))
    assert torch.autograd.gradcheck(lambda h, w, b: logit_stats(h, w, b, idx), (h, lin.weight, lin.bias))
    hf, lf = h.detach().float().requires_grad_(), torch.nn.Linear(5, 11)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lse, picked = logit_stats(hf, lf.weight, lf.bias, idx)
    assert lse.dtype == picked.dtype == torch.float32
    (lse.sum() + picked.sum()).backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):   # the bf16 buffer was used
        (lse.sum() + picked.sum()).backward()


def test_transformer_output_log_probs_are_lazy_and_unchanged():
    model = tiny_transformer(vocab_size=30)
    batch = random_batch(30, src_lens=[4, 6], tgt_lens=[3, 5], seed=1)
    out = model(batch)
    assert out._log_probs is None     # nothing computed until read
    h, _ = model.decoder(model.feed(batch.tgt_in), model.encoder(batch.src)[0], batch.src_mask[:, None, None, :])
    torch.testing.assert_close(out.log_probs, model.generator(h).log_softmax(-1))
    loss, nll, _ = out.token_losses(batch.tgt_out, 0.1, 30)
    ref = token_losses(out.log_probs, batch.tgt_out, 0.1, 30)
    torch.testing.assert_close(loss, ref[0])
    torch.testing.assert_close(nll, ref[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_math_attention_equals_sdpa(dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 4, dtype=dtype) for _ in range(3))
    mask = torch.ones(3, 1, 1, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(math_attention(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               **tol)
    torch.testing.assert_close(math_attention(q, k, v, is_causal=True),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True), **tol)
    # one query against cached keys: the causal mask is aligned to the last key
    torch.testing.assert_close(math_attention(q[:, :, -1:], k, v, is_causal=True),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :, -1:], **tol)


def test_fast_dropout_rate_scale_and_determinism():
    keep, rate = dropout_keep_mask((400, 500), 0.1, CPU)
    assert rate == pytest.approx(0.1, abs=1e-5)
    assert abs(1 - keep.float().mean().item() - 0.1) < 0.005
    drop = Dropout(0.1).train()
    x = torch.ones(200, 300)
    torch.manual_seed(3)
    a = drop(x)
    torch.manual_seed(3)
    b = drop(x)
    assert torch.equal(a, b)                                           # a function of torch's RNG state
    zero, kept = torch.unique(a).tolist()
    assert zero == 0.0 and kept == pytest.approx(1 / (1 - rate))
    assert abs(a.mean().item() - 1.0) < 0.01                           # unbiased
    assert torch.equal(drop.eval()(x), x)
    g = torch.autograd.grad(Dropout(0.5).train()(x.requires_grad_()).sum(), x)[0]
    assert set(torch.unique(g).tolist()) <= {0.0, 2.0}


def test_attention_dropout_takes_the_cheap_mask_on_cpu():
    """Attention-weight dropout on CPU (math path, and the weights path the copy models read) zeroes the
    weights where ``dropout_keep_mask`` drawn from the same RNG state says, and scales the rest by
    1 / (1 - rate); the math path's gradient flows only through the kept weights."""
    from seq2seq_zoo.models.layers import MultiHeadAttention
    torch.manual_seed(0)
    q = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    k, v = (torch.randn(2, 3, 6, 5, dtype=torch.float64) for _ in range(2))
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False
    w = (q @ k.transpose(-2, -1) / math.sqrt(5)).masked_fill(~mask, float("-inf")).softmax(-1)
    torch.manual_seed(5)
    keep, rate = dropout_keep_mask(w.shape, 0.25, CPU)
    expected = (w * keep / (1 - rate)) @ v
    torch.manual_seed(5)
    vg = v.clone().requires_grad_()
    out = math_attention(q, k, vg, mask, dropout_p=0.25)
    torch.testing.assert_close(out, expected)
    assert 0 < (~keep).sum() < keep.numel()
    (gv,) = torch.autograd.grad(out.sum(), vg)
    torch.testing.assert_close(gv, (w * keep / (1 - rate)).sum(2).unsqueeze(-1).expand_as(v))
    mha = MultiHeadAttention(8, 2, dropout=0.5).double().train()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    torch.manual_seed(9)
    _, weights = mha(x, need_weights=True)
    torch.manual_seed(9)
    keep, rate = dropout_keep_mask(weights.shape, 0.5, CPU)
    assert torch.equal(weights == 0, ~keep)
    _, plain = mha.eval()(x, need_weights=True)
    torch.testing.assert_close(weights, plain * keep / (1 - rate))


def test_beam_search_with_one_row_per_source_equals_expanded_state():
    """Keeping the encoder output once per source (grouped cross-attention) decodes exactly as the
    generic state that copies it for every hypothesis."""
    model = tiny_transformer(vocab_size=30, seed=7)
    batch = random_batch(30, src_lens=[5, 9, 3], tgt_lens=[3, 3, 3], seed=2)
    cfg = DecodeConfig(beam_size=3, max_len=8, min_len=2, length_penalty=0.6)
    fast, fast_scores = beam_search(model, batch, cfg, return_scores=True)

    class Generic(type(model)):  # the base class's reorder: every tensor indexed per hypothesis
        def encode(self, b):
            st = super().encode(b)
            return {k: v for k, v in st.items() if k not in ("row", "group", "src_bias")}

        def reorder(self, state, index):
            from seq2seq_zoo.models.base import _index
            return _index(state, index)

    generic = Generic.__new__(Generic)
    generic.__dict__ = model.__dict__
    slow, slow_scores = beam_search(generic, batch, cfg, return_scores=True)
    assert fast == slow
    assert fast_scores == pytest.approx(slow_scores, abs=1e-4)
    assert all(math.isfinite(s) for s in fast_scores)
