"""Scaled dot-product attention, masks, the two MultiHeadAttention paths, and gradient checks."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from seq2seq_zoo.models.layers import MultiHeadAttention, attention, causal_mask, padding_mask


def np_attention(q, k, v, allowed):
    """softmax(Q K^T / sqrt(d)) V in numpy, disallowed keys removed before the softmax."""
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    s = np.where(allowed, s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    w = np.exp(s)
    w = w / w.sum(-1, keepdims=True)
    return w @ v, w


def test_attention_by_hand():
    # d = 4, so sqrt(d) = 2; scores are [2*2/2, 0, 2*4/2] = [2, 0, 4]; the third key is masked out.
    q = torch.tensor([[[2.0, 0, 0, 0]]])
    k = torch.tensor([[[2.0, 0, 0, 0], [0, 0, 0, 0], [4.0, 0, 0, 0]]])
    v = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [100.0, 100.0]]])
    mask = torch.tensor([[[True, True, False]]])
    out, w = attention(q, k, v, mask)
    e2 = math.exp(2.0)
    expected_w = [e2 / (e2 + 1), 1 / (e2 + 1), 0.0]
    assert w.shape == (1, 1, 3)
    assert w[0, 0].tolist() == pytest.approx(expected_w, abs=1e-6)
    assert out[0, 0].tolist() == pytest.approx([e2 / (e2 + 1), 1 / (e2 + 1)], abs=1e-6)
    # without the mask the third key dominates: weight e^4 / (e^4 + e^2 + 1)
    out2, w2 = attention(q, k, v)
    e4 = math.exp(4.0)
    assert float(w2[0, 0, 2]) == pytest.approx(e4 / (e4 + e2 + 1), rel=1e-6)


def test_attention_matches_numpy_with_padding_mask():
    g = np.random.default_rng(0)
    B, H, T, S, d = 2, 3, 4, 5, 6
    q, k, v = (g.standard_normal(s).astype(np.float32) for s in ((B, H, T, d), (B, H, S, d), (B, H, S, d)))
    ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    mask = padding_mask(ids)
    allowed = np.broadcast_to(ids.numpy()[:, None, None, :] != 0, (B, H, T, S))
    exp_out, exp_w = np_attention(q, k, v, allowed)
    out, w = attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), mask)
    np.testing.assert_allclose(w.numpy(), exp_w, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), exp_out, atol=1e-5)
    assert torch.all(w[0, :, :, 3:] == 0)  # padded keys: exactly zero


def test_padding_mask_shape_and_values():
    ids = torch.tensor([[4, 5, 0, 0], [7, 0, 0, 0], [1, 2, 3, 9]])
    m = padding_mask(ids)
    assert m.shape == (3, 1, 1, 4) and m.dtype == torch.bool
    assert m[:, 0, 0].tolist() == [[True, True, False, False], [True, False, False, False], [True] * 4]
    assert padding_mask(ids, pad_id=9)[2, 0, 0].tolist() == [True, True, True, False]


def test_causal_mask_is_lower_triangular():
    m = causal_mask(5)
    assert m.shape == (1, 1, 5, 5) and m.dtype == torch.bool
    for i in range(5):
        for j in range(5):
            assert bool(m[0, 0, i, j]) == (j <= i)


def _mha_pair(self_attention=True, seed=0, d=8, h=2, key_dim=None):
    torch.manual_seed(seed)
    return MultiHeadAttention(d, h, key_dim=key_dim, dropout=0.0, self_attention=self_attention).eval()


@pytest.mark.parametrize("case", ["none", "padding", "causal", "padding+causal"])
def test_mha_sdpa_path_equals_explicit_path_self_attention(case):
    m = _mha_pair()
    torch.manual_seed(1)
    x = torch.randn(2, 5, 8)
    ids = torch.tensor([[4, 5, 6, 0, 0], [4, 5, 6, 7, 8]])
    mask = padding_mask(ids) if "padding" in case else None
    causal = "causal" in case
    fast, none_w = m(x, mask=mask, is_causal=causal, need_weights=False)
    slow, w = m(x, mask=mask, is_causal=causal, need_weights=True)
    assert none_w is None and w.shape == (2, 2, 5, 5)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    if causal:
        assert torch.all(w.triu(1) == 0)  # no weight on future positions
    if mask is not None:
        assert torch.all(w[0, :, :, 3:] == 0)


def test_mha_sdpa_path_equals_explicit_path_cross_attention():
    m = _mha_pair(self_attention=False, d=6, h=3, key_dim=5)
    torch.manual_seed(2)
    x, mem = torch.randn(2, 3, 6), torch.randn(2, 4, 6)
    mask = padding_mask(torch.tensor([[4, 5, 0, 0], [4, 5, 6, 7]]))
    fast, _ = m(x, mem, mask=mask)
    slow, w = m(x, mem, mask=mask, need_weights=True)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    assert w.shape == (2, 3, 3, 4)
    assert torch.all(w[0, :, :, 2:] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 3))


def test_mha_explicit_path_equals_manual_computation():
    """The explicit path against projections + heads written out with plain matmuls."""
    m = _mha_pair(d=6, h=2, key_dim=4)
    torch.manual_seed(3)
    x = torch.randn(1, 3, 6)
    W, b = m.in_proj.weight, m.in_proj.bias
    q, k, v = (x @ W.T + b).split(8, dim=-1)
    heads = []
    for i in range(2):
        sl = slice(4 * i, 4 * i + 4)
        s = q[..., sl] @ k[..., sl].transpose(-1, -2) / 2.0  # sqrt(4)
        heads.append(s.softmax(-1) @ v[..., sl])
    expected = torch.cat(heads, -1) @ m.out_proj.weight.T + m.out_proj.bias
    out, _ = m(x, need_weights=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_mha_needs_key_dim_when_heads_do_not_divide():
    with pytest.raises(ValueError, match="key_dim"):
        MultiHeadAttention(15, 19)
    MultiHeadAttention(15, 19, key_dim=15)  # fine with key_dim


# -------------------------------------------------------------------------- gradient checks (float64)
def test_gradcheck_self_attention_with_mask():
    m = _mha_pair(d=4, h=2).double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    mask = padding_mask(torch.tensor([[5, 6, 0], [5, 6, 7]]))
    assert torch.autograd.gradcheck(lambda t: m(t, mask=mask, need_weights=True)[0], (x,), eps=1e-6, atol=1e-5)
    assert torch.autograd.gradcheck(lambda t: m(t, is_causal=True)[0], (x,), eps=1e-6, atol=1e-5)


def test_gradcheck_cross_attention_inputs_and_memory():
    m = _mha_pair(self_attention=False, d=4, h=2, key_dim=3).double()
    x = torch.randn(1, 2, 4, dtype=torch.float64, requires_grad=True)
    mem = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: m(a, b)[0], (x, mem), eps=1e-6, atol=1e-5)


def test_gradcheck_decoder_layer():
    from seq2seq_zoo.models.transformer import DecoderLayer
    torch.manual_seed(0)
    layer = DecoderLayer(4, 2, 6, dropout=0.0, pre_ln=False).double().eval()
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    mem = torch.randn(1, 2, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(1, 1, 1, 2, dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda a, b: layer(a, b, mask)[0], (x, mem), eps=1e-6, atol=1e-5)


def test_gradcheck_parameters_of_attention():
    """Gradients w.r.t. the projection weights, not only the inputs (both paths)."""
    from torch.func import functional_call
    m = _mha_pair(d=4, h=2).double()
    x = torch.randn(1, 3, 4, dtype=torch.float64)
    w_in = m.in_proj.weight.detach().clone().requires_grad_(True)
    w_out = m.out_proj.weight.detach().clone().requires_grad_(True)
    for need in (True, False):
        f = lambda a, b: functional_call(m, {"in_proj.weight": a, "out_proj.weight": b}, (x,),  # noqa: E731
                                         {"is_causal": True, "need_weights": need})[0]
        assert torch.autograd.gradcheck(f, (w_in, w_out), eps=1e-6, atol=1e-5)
