"""Building blocks shared by the models: attention, masks, positional encodings, embeddings.

Equation numbers refer to Vaswani et al. (2017), "Attention Is All You Need". The CPU performance
kernels these modules call (math attention, the cheaper dropout mask, packed weights, the fused output
loss) are in ``fast/kernels.py``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seq2seq_zoo.models.fast.kernels import Dropout, math_attention, prefer_math_attention


def attention(q, k, v, mask=None, dropout: nn.Module | None = None):
    """Scaled dot-product attention with explicit weights (eq. 1): softmax(QK^T / sqrt(d_k)) V.

    ``mask`` is boolean, True where attention is allowed, broadcastable to (..., Tq, Tk).
    Used when the weights are wanted (plots, tests); otherwise ``F.scaled_dot_product_attention``.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = scores.softmax(dim=-1)
    if dropout is not None:
        w = dropout(w)
    return w @ v, w


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim where ``mask`` is True; masked positions get exactly 0."""
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


def causal_mask(t: int, device=None) -> torch.Tensor:
    """(1, 1, t, t) look-ahead mask: position i may attend to positions <= i."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril().view(1, 1, t, t)


def padding_mask(ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """(B, 1, 1, S) key mask: True at real tokens."""
    return (ids != pad_id)[:, None, None, :]


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (eq. 4-5).

    ``key_dim`` (the per-head size, Keras' name) may differ from d_model / heads, so shapes such as
    d_model 15 with 19 heads run. Self-attention projects Q, K, V with one fused matmul.
    """

    def __init__(self, d_model: int, heads: int, key_dim: int | None = None, dropout: float = 0.0,
                 self_attention: bool = True):
        super().__init__()
        if key_dim is None:
            if d_model % heads:
                raise ValueError(f"d_model {d_model} is not divisible by heads {heads}; set key_dim")
            key_dim = d_model // heads
        self.h, self.dk, self.p = heads, key_dim, dropout
        inner = heads * key_dim
        self.self_attention = self_attention
        if self_attention:
            self.in_proj = nn.Linear(d_model, 3 * inner)
        else:
            self.q_proj = nn.Linear(d_model, inner)
            self.kv_proj = nn.Linear(d_model, 2 * inner)
        self.out_proj = nn.Linear(inner, d_model)
        self.drop = Dropout(dropout)

    def _split(self, x):  # (B, T, h*dk) -> (B, h, T, dk)
        B, T, _ = x.shape
        return x.view(B, T, self.h, self.dk).transpose(1, 2)

    def project_kv(self, memory):
        """Keys and values of the encoder output, computed once per source (cached while decoding)."""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def forward(self, x, memory=None, mask=None, is_causal: bool = False, need_weights: bool = False,
                cache: dict | None = None, kv=None, kv_rows=None):
        """x: (B, T, d). Self-attention when ``memory`` and ``kv`` are None. ``cache`` (incremental
        decoding) holds the keys/values of earlier steps and is extended in place.

        ``kv_rows`` (cross-attention while decoding, when ``kv`` and ``mask`` hold one row per source and
        ``x`` one row per hypothesis): an int K when the rows of ``x`` are K consecutive hypotheses per
        source (beam search), so the K queries share their source's keys and values without copies; or a
        LongTensor giving each row's source."""
        if self.self_attention:
            q, k, v = self.in_proj(x).chunk(3, dim=-1)
            q, k, v = self._split(q), self._split(k), self._split(v)
            if cache is not None:
                if q.device.type == "cpu" and q.size(2) <= 8 and q.dtype in (torch.bfloat16, torch.float16):
                    # an incremental step with grad (inference takes transformer_incremental.py): the
                    # cache in fp32, as the inference step keeps it; under autocast the products below
                    # still run in bf16
                    q, k, v = q.float(), k.float(), v.float()
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        else:
            q = self._split(self.q_proj(x))
            k, v = kv if kv is not None else self.project_kv(memory)
        weights = None
        B, _, T, _ = q.shape
        group = 0
        if kv_rows is not None and not need_weights:
            if isinstance(kv_rows, int):   # (B0*K, H, T, dk) -> (B0, H, K*T, dk): K hypotheses' queries side by side
                group = kv_rows
                q = q.view(B // group, group, self.h, T, self.dk).transpose(1, 2).reshape(B // group, self.h,
                                                                                          group * T, self.dk)
            else:
                k, v = k.index_select(0, kv_rows), v.index_select(0, kv_rows)
                mask = None if mask is None else mask.index_select(0, kv_rows)
        if is_causal and (need_weights or mask is not None):  # SDPA takes a mask or is_causal, not both
            cm = causal_mask(q.size(2), q.device)
            mask = cm if mask is None else (mask & cm)
            is_causal = False
        p = self.p if self.training else 0.0
        if need_weights:
            out, weights = attention(q, k, v, mask, self.drop if self.training else None)
        elif prefer_math_attention(q, k):
            out = math_attention(q, k, v, mask, is_causal, p)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=p)
        if group:
            out = out.view(B // group, self.h, group, T, self.dk).transpose(1, 2).reshape(B, self.h, T, self.dk)
        out = out.transpose(1, 2).reshape(B, T, self.h * self.dk)
        return self.out_proj(out), weights


def sinusoidal_table(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(pos / base^(2i/d)) (section 3.5).
    base = 10000 in the paper; the T_max variant (H. Li et al. 2019) uses the maximum length. Built on the
    meta device (a shape check), the table is left without values: torch would run these ops through its
    reference implementations there, importing torch._dynamo for nothing."""
    if torch.get_default_device().type == "meta":
        return torch.empty(max_len, d_model)
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / base ** (two_i / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.float()


PE_KINDS = ("learned", "sinusoidal", "sinusoidal_tmax")


class PositionalEncoding(nn.Module):
    """Adds position information: a learned table, or the fixed sinusoid with base 10000 or T_max."""

    def __init__(self, kind: str, d_model: int, max_len: int, tmax: int | None = None, init_std: float = 1.0):
        """tmax: the base of ``sinusoidal_tmax`` (default: this table's own length); init_std: the std of
        the learned table's N(0, init_std^2) initialisation."""
        super().__init__()
        if kind not in PE_KINDS:
            raise ValueError(f"pe must be one of {PE_KINDS}, not {kind!r}")
        self.kind, self.max_len = kind, max_len
        self.base = None
        if kind == "learned":
            self.table = nn.Parameter(torch.randn(max_len, d_model) * init_std)
        else:
            self.base = 10000.0 if kind == "sinusoidal" else float(tmax or max_len)
            self.register_buffer("table", sinusoidal_table(max_len, d_model, self.base), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        T = x.size(1)
        if offset + T > self.max_len:
            raise ValueError(f"sequence of length {offset + T} exceeds the positional table ({self.max_len}); "
                             "raise max_src_len / max_tgt_len")
        return x + self.table[offset:offset + T].to(x.dtype)


class Embeddings(nn.Module):
    """Token embedding scaled by sqrt(d_model) (section 3.4)."""

    def __init__(self, vocab_size: int, d_model: int, pad_id: int = 0):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.emb.weight, std=d_model ** -0.5)
        with torch.no_grad():
            self.emb.weight[pad_id].zero_()
        self.scale = math.sqrt(d_model)

    @property
    def weight(self):
        return self.emb.weight

    def forward(self, ids):
        return self.emb(ids) * self.scale


def run_packed(rnn, x: torch.Tensor, mask: torch.Tensor):
    """``rnn`` over ``x`` (B, S, m) packed by the lengths of ``mask`` (B, S), outputs padded back to S with
    zeros, so padding never reaches a state: the final state(s) are those after each source's last real
    token. The recurrent models' encoder run (``fast.rnn_kernels.run_encoder`` where no unpacked run gives
    the same values)."""
    lengths = mask.sum(1).clamp(min=1).cpu()
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, final = rnn(packed)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=mask.size(1))
    return out, final
