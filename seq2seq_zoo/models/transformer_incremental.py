"""The Transformer's incremental decoding in inference, kept apart from the paper's classes in
``transformer.py`` (which read in the order of the Annotated Transformer): one new position per
hypothesis, the self-attention keys and values of earlier positions cached, the source's keys and values
computed once per source.

``Transformer.decode_hidden`` takes this path when it ``applies`` (eval mode, no gradient, a state from
``Transformer.encode``); otherwise (with grad: SCST's sampling) it runs the paper's ``Decoder.forward``
with ``caches``. Each function gives the values of the ``forward`` it stands for up to float rounding
with fewer operations, because a decoding step of few rows is overhead-bound (~130 small ops):

- sub-modules are called through ``.forward`` (no module-call overhead; module hooks on them do not
  run), about 2% of a beam-4 call; norms through ``F.layer_norm``; dropout is the identity;
- on CPU the attention products run in fp32 outside autocast (``step_attention``), faster than bf16
  for a step's few queries; the source keys and values are converted once, not at every step;
- ``rows`` / ``kv_rows``: K consecutive hypotheses per source take their source's keys and values
  side by side without copies (beam search), or a LongTensor gives each row's source.

The functions take the modules of ``transformer.py`` (``Transformer``, ``Decoder``, ``DecoderLayer``,
``Residual``) and ``layers.MultiHeadAttention`` as arguments; transformer.py imports this module, so
this one does not import it back.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq_zoo.models.layers import MultiHeadAttention


def applies(model: nn.Module, state) -> bool:
    """Whether ``hidden_step`` serves this decoding step: inference (eval mode, no gradient) on a state
    from ``Transformer.encode`` (which holds the source mask as an additive bias)."""
    return not (model.training or torch.is_grad_enabled()) and "src_bias" in state


def hidden_step(model: nn.Module, state, prev: torch.Tensor, t: int, kv_rows) -> torch.Tensor:
    """One step up to the decoder's output: (N, 1, d) for ``prev`` (N,) at position ``t``, the caches
    extended in place; ``Decoder.forward(prev[:, None], ..., caches=, cross_kv=, offset=t)``'s values."""
    if state["memory"].device.type == "cpu" and state["cross_kv"][0][0].dtype != torch.float32:
        # the step's attention products run in fp32 on CPU (``step_attention``): the source keys and
        # values are converted once, not at every step
        state["cross_kv"] = [(k.float(), v.float()) for k, v in state["cross_kv"]]
        state["src_bias"] = state["src_bias"].float()
    return decoder_step(model.decoder, model.feed(prev), state["cross_kv"], state["src_bias"], state["caches"],
                        t, kv_rows)


def decoder_step(decoder: nn.Module, prev, memory_kv, src_bias, caches, offset: int, kv_rows):
    """``Decoder.forward`` for one position: prev (N,) ids -> (N, 1, d); the values of
    ``decoder(prev[:, None], ..., caches=caches, offset=offset)`` up to float rounding."""
    x = decoder.pe(decoder.embed(prev[:, None]), offset)
    for layer, cache, kv in zip(decoder.layers, caches, memory_kv):
        x = layer_step(layer, x, cache, kv, src_bias, kv_rows)
    return decoder.norm(x)


def layer_step(layer: nn.Module, x, cache: dict, cross_kv, src_bias, kv_rows):
    """``DecoderLayer.forward`` for one position (no weights); ``cache``, ``cross_kv``, ``kv_rows`` as there."""
    x = residual_step(layer.sub1, x, lambda h: self_attention_step(layer.self_att, h, cache))
    x = residual_step(layer.sub2, x, lambda h: cross_attention_step(layer.cross_att, h, cross_kv, src_bias, kv_rows))
    ffn = layer.ffn
    return residual_step(layer.sub3, x, lambda h: ffn.w2.forward(ffn.act.forward(ffn.w1.forward(h))))


def residual_step(sub: nn.Module, x, f):
    """``Residual`` in inference (dropout is the identity): post-LN norm(x + f(x)), pre-LN x + f(norm(x));
    the norm through ``F.layer_norm`` and ``f`` calling ``.forward``."""
    n = sub.norm
    if sub.pre_ln:
        return x + f(F.layer_norm(x, n.normalized_shape, n.weight, n.bias, n.eps))
    return F.layer_norm(x + f(x), n.normalized_shape, n.weight, n.bias, n.eps)


def self_attention_step(att: MultiHeadAttention, x: torch.Tensor, cache: dict) -> torch.Tensor:
    """Self-attention of one new position per row: x (N, 1, d) -> (N, 1, d); ``cache`` holds the keys and
    values (N, h, t, dk) of the earlier positions and is extended in place."""
    N = x.size(0)
    qkv = att.in_proj.forward(x)
    fp32 = x.device.type == "cpu"
    if fp32:  # one cast of q, k and v together (see step_attention)
        qkv = qkv.float()
    qkv = qkv.view(N, 3, att.h, 1, att.dk)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    if "k" in cache:
        k = torch.cat([cache["k"], k], dim=2)
        v = torch.cat([cache["v"], v], dim=2)
    cache["k"], cache["v"] = k, v
    out = step_attention(q, k, v, None, fp32)
    return att.out_proj.forward(out.reshape(N, 1, att.h * att.dk))


def cross_attention_step(att: MultiHeadAttention, x: torch.Tensor, kv, bias: torch.Tensor | None,
                         rows) -> torch.Tensor:
    """Source-target attention of one new position per row: x (N, 1, d) -> (N, 1, d) against keys and
    values (B, h, S, dk) with one row per source and an additive ``bias`` (B, 1, 1, S); ``rows`` as
    ``kv_rows`` of ``MultiHeadAttention.forward`` (None: row i is source i)."""
    N = x.size(0)
    k, v = kv
    q = att.q_proj.forward(x)
    fp32 = x.device.type == "cpu" and k.dtype == torch.float32
    if fp32:
        q = q.float()
    if isinstance(rows, torch.Tensor):
        k, v = k.index_select(0, rows), v.index_select(0, rows)
        bias = None if bias is None else bias.index_select(0, rows)
        rows = 1
    K = rows or 1    # K consecutive rows share a source: their queries side by side, (B, h, K, dk)
    q = q.view(N // K, K, att.h, att.dk).transpose(1, 2)
    out = step_attention(q, k, v, bias, fp32)                       # (B, h, K, dk)
    return att.out_proj.forward(out.transpose(1, 2).reshape(N, 1, att.h * att.dk))


def step_attention(q, k, v, bias=None, fp32: bool = False):
    """softmax(q k^T / sqrt(dk) + bias) v for a decoding step's few queries: ``fast.kernels.math_attention``'s
    arithmetic without its chunking and mask handling, whose extra calls cost more than these products
    (the step is overhead-bound). ``fp32``: the products in fp32 outside autocast, which on CPU is faster
    than bf16 for a step's few queries; under autocast the products would be cast back to bf16 (with a
    copy of the whole cache each step). Off the CPU: ``F.scaled_dot_product_attention``, as
    the general step takes there (a GPU's step is launch-bound: one fused kernel rather than five)."""
    if q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    with torch.autocast(q.device.type, enabled=False) if fp32 else contextlib.nullcontext():
        scores = torch.matmul(q * (q.size(-1) ** -0.5), k.transpose(-2, -1))
        if bias is not None:
            scores.add_(bias)
        return torch.matmul(scores.softmax(-1), v)
