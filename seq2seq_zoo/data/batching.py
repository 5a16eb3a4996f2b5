"""Encoding examples once, and length-bucketed batches so padding stays small."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch

from seq2seq_zoo.data.corpora import Example
from seq2seq_zoo.data.text import TextConfig, tokenize, tokenize_source
from seq2seq_zoo.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab


@dataclass
class Encoded:
    id: str
    src: np.ndarray          # in-vocabulary ids (OOV -> <unk>)
    src_ext: np.ndarray      # ids with this source's OOVs as |V|+k
    oovs: list[str]
    tgt: np.ndarray          # target ids (no BOS/EOS), OOV -> <unk>
    tgt_ext: np.ndarray      # target ids with source OOVs as extended ids
    references: list[str]    # raw reference strings, for scoring
    source_text: str


def encode_examples(examples: Sequence[Example], vocab: Vocab, text_cfg: TextConfig, max_src: int,
                    max_tgt: int) -> list[Encoded]:
    out = []
    for ex in examples:
        s = tokenize_source(ex.source, text_cfg)[:max_src] or ["<unk>"]
        t = tokenize(ex.references[0], text_cfg)[: max_tgt - 1]  # room for <eos>
        src_ext, oovs = vocab.encode_ext(s)
        out.append(Encoded(
            id=ex.id,
            src=np.asarray(vocab.encode(s), dtype=np.int64),
            src_ext=np.asarray(src_ext, dtype=np.int64),
            oovs=oovs,
            tgt=np.asarray(vocab.encode(t), dtype=np.int64),
            tgt_ext=np.asarray(vocab.encode_target_ext(t, oovs), dtype=np.int64),
            references=list(ex.references),
            source_text=ex.source,
        ))
    return out


def percentile_filter(examples: Sequence[Example], lo: float, hi: float, text_cfg: TextConfig) -> list[Example]:
    """Keep examples whose source and target lengths lie within the [lo, hi] percentiles (seed paper: 5/95)."""
    sl = np.array([len(tokenize_source(e.source, text_cfg)) for e in examples])
    tl = np.array([len(tokenize(e.references[0], text_cfg)) for e in examples])
    s_lo, s_hi = np.percentile(sl, [lo, hi])
    t_lo, t_hi = np.percentile(tl, [lo, hi])
    keep = (sl >= s_lo) & (sl <= s_hi) & (tl >= t_lo) & (tl <= t_hi)
    return [e for e, k in zip(examples, keep) if k]


@dataclass
class Batch:
    ids: list[str]
    src: torch.Tensor        # (B, S) vocab ids, OOV -> <unk>, padded with 0
    src_ext: torch.Tensor    # (B, S) extended ids
    src_len: torch.Tensor    # (B,)
    tgt_in: torch.Tensor     # (B, T) <bos> y_1 .. y_{n}   (decoder input; extended ids fed back as <unk>)
    tgt_out: torch.Tensor    # (B, T) y_1 .. y_n <eos>     (extended ids: the loss target)
    oovs: list[list[str]]
    references: list[list[str]]
    sources: list[str]
    n_oov: int = 0           # max OOVs in the batch: the extended vocabulary is |V| + n_oov
    extra: dict = field(default_factory=dict)

    def to(self, device) -> "Batch":
        for k in ("src", "src_ext", "src_len", "tgt_in", "tgt_out"):
            setattr(self, k, getattr(self, k).to(device, non_blocking=True))
        return self

    @property
    def size(self) -> int:
        return self.src.size(0)

    @property
    def src_mask(self) -> torch.Tensor:
        return self.src != PAD_ID

    def n_tokens(self) -> int:
        return int((self.src != PAD_ID).sum() + (self.tgt_out != PAD_ID).sum())


def collate(items: Sequence[Encoded]) -> Batch:
    B = len(items)
    S = max(len(e.src) for e in items)
    T = max(len(e.tgt) for e in items) + 1
    src = np.full((B, S), PAD_ID, dtype=np.int64)
    src_ext = np.full((B, S), PAD_ID, dtype=np.int64)
    tgt_in = np.full((B, T), PAD_ID, dtype=np.int64)
    tgt_out = np.full((B, T), PAD_ID, dtype=np.int64)
    for i, e in enumerate(items):
        n, m = len(e.src), len(e.tgt)
        src[i, :n] = e.src
        src_ext[i, :n] = e.src_ext
        tgt_in[i, 0] = BOS_ID
        tgt_in[i, 1:m + 1] = e.tgt          # in-vocab ids: extended words are fed back as <unk>
        tgt_out[i, :m] = e.tgt_ext
        tgt_out[i, m] = EOS_ID
    return Batch(
        ids=[e.id for e in items], src=torch.from_numpy(src), src_ext=torch.from_numpy(src_ext),
        src_len=torch.tensor([len(e.src) for e in items]), tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out), oovs=[e.oovs for e in items],
        references=[e.references for e in items], sources=[e.source_text for e in items],
        n_oov=max((len(e.oovs) for e in items), default=0))


def bucket_batches(data: Sequence[Encoded], batch_size: int, *, max_tokens: int | None = None,
                   shuffle: bool = True, seed: int = 0, epoch: int = 0, pool_factor: int = 50,
                   drop_last: bool = False) -> list[list[int]]:
    """Index batches of similar length: at most ``batch_size`` examples (0: no cap) and, with
    ``max_tokens``, at most that many padded tokens (source + target length x examples; an example longer
    than the cap is a batch of its own). Deterministic for (seed, epoch), so a resumed run can skip to
    batch k of its epoch and see exactly the batches it would have seen."""
    if batch_size < 1 and max_tokens is None:
        raise ValueError("batch_size 0 (no cap on examples) needs max_tokens")
    n = len(data)
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(n) if shuffle else np.arange(n)
    lengths = np.array([len(e.src) + len(e.tgt) for e in data])
    if batch_size < 1:   # token batches alone: sort pools of about as many examples as fit 50 full batches
        mean_len = max(1.0, float(lengths.mean())) if n else 1.0
        pool = max(1, int(max_tokens // mean_len) * pool_factor)
    else:
        pool = max(batch_size * pool_factor, batch_size)
    batches: list[list[int]] = []
    for start in range(0, n, pool):
        chunk = order[start:start + pool]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        cur: list[int] = []
        cur_max = 0
        for i in chunk:
            L = int(lengths[i])
            too_many = batch_size >= 1 and len(cur) >= batch_size
            too_long = max_tokens is not None and cur and max(cur_max, L) * (len(cur) + 1) > max_tokens
            if too_many or too_long:
                batches.append(cur)
                cur, cur_max = [], 0
            cur.append(int(i))
            cur_max = max(cur_max, L)
        if cur:
            batches.append(cur)
    if drop_last and batches and len(batches[-1]) < batch_size and max_tokens is None:
        batches.pop()
    if shuffle:
        perm = rng.permutation(len(batches))
        batches = [batches[i] for i in perm]
    return batches


def iterate(data: Sequence[Encoded], batches: list[list[int]], start: int = 0) -> Iterator[tuple[int, Batch]]:
    for k in range(start, len(batches)):
        yield k, collate([data[i] for i in batches[k]])


def unk_mapped(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Extended ids (>= |V|) replaced by <unk>: what a decoder is fed after predicting a copied word."""
    return ids.masked_fill(ids >= vocab_size, UNK_ID)
