"""The FLOP model: matmul parameters per stack, training FLOPs (6 x params x tokens), the least matmul
work of a beam call and the bounds these put on decoding and recurrent speed-ups."""
from __future__ import annotations

from typing import Any

import torch

from seq2seq_zoo.bench.shapes import Shape


def flop_params(model) -> dict[str, int]:
    """Parameters that take part in a matmul per token, per stack: {encoder, decoder, output}.

    Ours: the model's components() (embedding tables skipped, a tied output projection counted as
    output). HF BART: its encoder/decoder linear layers and lm_head; eole: its encoder, decoder and
    generator. Only weights and biases of linear
    and recurrent layers count (embedding lookups and positional tables are not matmuls)."""
    matmul_mods = (torch.nn.Linear, torch.nn.RNNBase, torch.nn.RNNCellBase)
    owner: dict[int, bool] = {}
    for m in model.modules():
        if isinstance(m, matmul_mods):
            for p in m.parameters(recurse=False):
                owner[id(p)] = True
    if hasattr(model, "components"):
        out = {"encoder": 0, "decoder": 0, "output": 0}
        for comp, params in model.components().items():
            if comp == "embedding":
                continue
            key = comp if comp in out else "decoder"
            out[key] += sum(p.numel() for p in params if owner.get(id(p)))
        return out
    def count(mod):
        return sum(p.numel() for m in mod.modules() if isinstance(m, matmul_mods) for p in m.parameters(recurse=False))

    if not hasattr(model, "model"):   # eole: encoder, decoder, generator
        return {"encoder": count(model.encoder), "decoder": count(model.decoder), "output": count(model.generator)}
    inner = model.model  # HF BART

    return {"encoder": count(inner.encoder), "decoder": count(inner.decoder), "output": count(model.lm_head)}


def train_flops(fp: dict[str, int], src_tokens: int, tgt_tokens: int) -> float:
    """6 * params * tokens per stack (forward 2, backward 4 FLOPs per parameter and token)."""
    return 6.0 * (fp["encoder"] * src_tokens + (fp["decoder"] + fp["output"]) * tgt_tokens)


def beam_decode_flops(shape: Shape, beams: int, *, per_hypothesis: bool = False, attention: bool = True) -> float:
    """Matmul FLOPs of a beam search of the Transformer at ``shape`` forced to ``shape.dec_len`` tokens,
    counted from the shape alone (2 FLOPs a multiply-add; biases, norms, softmax and top-k not counted).

    The least any implementation must do (``per_hypothesis=False``): the encoder once per source (its
    linear layers and, with ``attention``, the score and value products), the cross-attention keys and
    values once per source, then at every step, for every live hypothesis (one per source at the first
    step, ``beams`` after), the decoder's query/output/feed-forward layers, the self- and cross-attention
    products and the output projection. ``per_hypothesis=True`` counts what HF ``generate`` does: every
    beam from the first step, and the cross-attention keys and values computed for every beam."""
    d, f, L, S, V = shape.d_model, shape.d_ff, shape.layers, shape.src_len, shape.vocab
    n, T = shape.dec_sources, shape.dec_len
    att = 1 if attention else 0
    encoder = n * L * (S * (4 * d * d + 2 * d * f) + att * 2 * S * S * d)
    cross_kv = n * (beams if per_hypothesis else 1) * L * S * 2 * d * d
    steps = 0
    for t in range(T):
        rows = n * beams if (per_hypothesis or t > 0) else n
        steps += rows * (L * (6 * d * d + 2 * d * f + att * 2 * ((t + 1) * d + S * d)) + d * V)
    return 2.0 * (encoder + cross_kv + steps)


def decode_bound(shape: Shape, decoding: dict[str, dict], peak_gflops: float | None,
                 precision: str) -> dict[str, Any] | None:
    """What the matmul rate allows beam decoding: the least matmul work of a call (beam_decode_flops) at
    ``peak_gflops`` (the ``precision`` product's rate, timed among the decoders: MatmulProbe) is the
    shortest time any implementation could take, so the peer's best time over it is the highest ratio
    against the peer this machine can show. Each of our timings in that precision is also given as the
    share of that rate it reached."""
    ours = {k: v for k, v in decoding.items() if k.startswith("ours_") and v["precision"] == precision}
    if not peak_gflops or not ours:
        return None
    gflop = beam_decode_flops(shape, shape.beams) / 1e9
    min_s = gflop / peak_gflops
    out = {"min_gflop": gflop, "peer_gflop": beam_decode_flops(shape, shape.beams, per_hypothesis=True) / 1e9,
           "precision": precision, "peak_gflops": peak_gflops, "min_s": min_s,
           "ours": {k: {"seconds": v["seconds"], "share_of_peak": min_s / v["seconds"]} for k, v in ours.items()}}
    return _against_peer(out, decoding, min_s)


def _against_peer(out: dict[str, Any], decoding: dict[str, dict], least_s: float) -> dict[str, Any]:
    """``out`` with the fastest peer decoder (``peer_best``) and its time over ``least_s``, the least time
    a bound allows ours (``ceiling_vs_peer``), where a peer was timed."""
    peers = {k: v for k, v in decoding.items() if k.startswith("peer_")}
    if peers:
        best = min(peers, key=lambda k: peers[k]["seconds"])
        out["peer_best"] = best
        out["ceiling_vs_peer"] = peers[best]["seconds"] / least_s
    return out


def int8_bound(decoding: dict[str, dict], free_s: float) -> dict[str, Any]:
    """What int8 linear layers allow decoding: ``free_s`` is the int8 decoder's time with its linear
    layers taking no time (``measure.linears_free``), so an int8 decode cannot take less, and the peer's
    best time over it is the highest int8 ratio against the peer; ``linear_share`` is the part of our
    int8 time that its linear layers took."""
    out: dict[str, Any] = {"seconds": free_s}
    int8 = decoding.get("ours_int8")
    if int8:
        out["linear_share"] = max(0.0, 1.0 - free_s / int8["seconds"])
    return _against_peer(out, decoding, free_s)


def output_bound(flops: float, peak_gflops: float | None, reference_s: float) -> dict[str, float]:
    """Both recurrent implementations do the same output-layer matmuls (``flops``: in training the
    forward product and the two of its backward, 6 x output params x target tokens; in beam decoding
    2 x output params x hypotheses a step, summed over the steps); at ``peak_gflops`` (a product's rate
    timed among the two: MatmulProbe) these alone take ``output_s_at_peak``, so no fast path can beat
    the reference by more than ``ceiling`` = reference time / that time."""
    if not peak_gflops:
        return {}
    out_s = flops / (peak_gflops * 1e9)
    return {"output_s_at_peak": out_s, "ceiling": reference_s / out_s}


def decode_rows(shape: Shape, sources: int) -> int:
    """The fewest hypotheses the output layer must score over a beam call: one per source at the first
    step (all beams are the same empty hypothesis then), ``shape.beams`` per source after. Our beam search,
    as HF's, scores every beam from the first step: 1/dec_len more rows than this."""
    return sources + (shape.dec_len - 1) * sources * shape.beams
