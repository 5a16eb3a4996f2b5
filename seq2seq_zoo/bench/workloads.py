"""The bench's synthetic workloads: random token batches of fixed shapes (no data needed) and our
models built at those shapes."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from seq2seq_zoo.bench.shapes import Shape
from seq2seq_zoo.data.batching import Batch, Encoded, bucket_batches, collate
from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.models.base import build_model


def random_examples(shape: Shape, n: int, seed: int = 0, src_len: int | None = None,
                    tgt_len: int | None = None) -> list[Encoded]:
    """``n`` examples of random in-vocabulary words (ids >= 4: no specials): sources of exactly
    ``src_len`` tokens, targets of ``tgt_len - 1`` words (+ <eos> = ``tgt_len`` decoder positions). Each
    source has ``shape.oovs`` out-of-vocabulary words (extended ids |V|+k) that its target repeats once."""
    g = np.random.default_rng(seed)
    S = src_len or shape.src_len
    T = (tgt_len or shape.tgt_len) - 1
    V = shape.vocab
    out = []
    for i in range(n):
        src = g.integers(4, V, S)
        tgt = g.integers(4, V, T)
        src_ext, tgt_ext = src.copy(), tgt.copy()
        k = min(shape.oovs, S, T)
        oovs = [f"oov{j}" for j in range(k)]
        for j in range(k):
            src[j] = 1                          # <unk> in the in-vocabulary view
            src_ext[j] = V + j
            tgt[j] = 1
            tgt_ext[j] = V + j
        out.append(Encoded(id=f"b{i}", src=src, src_ext=src_ext, oovs=oovs, tgt=tgt, tgt_ext=tgt_ext,
                           references=[""], source_text=""))
    return out


def shaped_batch(shape: Shape, n: int | None = None, seed: int = 0) -> Batch:
    return collate(random_examples(shape, n or shape.batch, seed))


def target_tokens(batch: Batch) -> int:
    return int((batch.tgt_out != PAD_ID).sum())


def source_tokens(batch: Batch) -> int:
    return int((batch.src != PAD_ID).sum())


def context(shape: Shape) -> dict[str, Any]:
    return {"vocab_size": shape.vocab, "max_src_len": shape.src_len, "max_tgt_len": shape.tgt_len,
            "vocab_size_ext": shape.vocab + shape.oovs}


def our_transformer(shape: Shape, device: torch.device, seed: int = 0):
    torch.manual_seed(seed)
    opts = dict(d_model=shape.d_model, d_ff=shape.d_ff, heads=shape.heads, layers=shape.layers,
                dropout=shape.dropout)
    return build_model("transformer", context(shape), opts).to(device), opts


def our_model(name: str, shape: Shape, device: torch.device, seed: int = 0, **extra):
    """A registered model at the bench shape: the Transformer with the paper's sizes, the recurrent
    models with rnn_progression's (emb_dim, hidden, dropout); options a model does not take are left
    out. ``extra``: further options (e.g. ``impl``)."""
    if name == "transformer":
        return our_transformer(shape, device, seed)
    from seq2seq_zoo.registry import model_options
    known = model_options(name)
    want = dict(emb_dim=shape.rnn_emb, hidden=shape.rnn_hidden, dropout=shape.dropout, **extra)
    opts = {k: v for k, v in want.items() if k in known}
    torch.manual_seed(seed)
    return build_model(name, context(shape), opts).to(device), opts


def token_batches(shape: Shape, max_tokens: int, n: int, seed: int = 0) -> list[Batch]:
    """``n`` random examples with sources of shape.src_len/2 .. shape.src_len tokens and targets of
    shape.tgt_len/2 .. shape.tgt_len positions, batched as the training loop does with train.batch_size = 0
    and train.max_tokens (``bucket_batches``): the batches of a GPU run."""
    g = np.random.default_rng(seed)
    ex = []
    for i in range(n):
        S = int(g.integers(max(1, shape.src_len // 2), shape.src_len + 1))
        T = int(g.integers(max(2, shape.tgt_len // 2), shape.tgt_len + 1))
        ex += random_examples(shape, 1, seed=seed * 100003 + i, src_len=S, tgt_len=T)
    return [collate([ex[i] for i in b]) for b in bucket_batches(ex, 0, max_tokens=max_tokens, seed=seed)]
