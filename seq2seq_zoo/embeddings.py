"""Initial word vectors for any model that takes ``pretrained_embeddings``.

``embeddings`` option of a model:
  "random"             the model's own initialisation (default)
  "pretrained:<path>"  GloVe-format text vectors (``word v1 v2 ...``, no header) loaded through gensim
  "word2vec"           vectors trained with gensim on the training split before the model trains,
                       cached by a hash of the corpus and settings (so the "pretrained embeddings" row
                       of an experiment runs on any machine, offline)
The coverage of the vocabulary by the vectors is returned for the run record.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable

import numpy as np
import torch

from seq2seq_zoo.data.vocab import SPECIALS, Vocab
from seq2seq_zoo.errors import EmbeddingError


def cache_dir() -> Path:
    return Path(os.environ.get("ZOO_CACHE") or Path.home() / ".cache" / "seq2seq-zoo")


def _matrix(vocab: Vocab, dim: int, lookup, seed: int) -> tuple[torch.Tensor, int]:
    g = np.random.default_rng(seed)
    mat = g.normal(0.0, dim ** -0.5, size=(len(vocab), dim)).astype(np.float32)
    mat[0] = 0.0  # <pad>
    found = 0
    for i, w in enumerate(vocab.itos):
        if w in SPECIALS:
            continue
        v = lookup(w)
        if v is not None:
            mat[i] = v
            found += 1
    return torch.from_numpy(mat), found


def load_glove(path: str | Path, vocab: Vocab, dim: int, seed: int = 0) -> tuple[torch.Tensor, dict]:
    from gensim.models import KeyedVectors
    path = Path(path)
    if not path.is_file():
        raise EmbeddingError(f"embeddings file {path} not found (embeddings = \"pretrained:{path}\")")
    try:
        kv = KeyedVectors.load_word2vec_format(str(path), binary=False, no_header=True)
    except (ValueError, UnicodeDecodeError) as e:
        raise EmbeddingError(f"{path}: not GloVe text format ('word v1 v2 ...' per line, no header): {e}") from None
    if kv.vector_size != dim:
        raise EmbeddingError(f"{path} has {kv.vector_size}-dimensional vectors but the model's embedding size is "
                             f"{dim}; set emb_dim = {kv.vector_size}")
    mat, found = _matrix(vocab, dim, lambda w: kv[w] if w in kv.key_to_index else None, seed)
    return mat, {"embeddings": f"pretrained:{path}", "found": found, "vocab": len(vocab) - len(SPECIALS),
                 "coverage": found / max(len(vocab) - len(SPECIALS), 1)}


def train_word2vec(sentences: list[list[str]], vocab: Vocab, dim: int, seed: int = 1, epochs: int = 5,
                   window: int = 5) -> tuple[torch.Tensor, dict]:
    """Skip-gram word2vec on the training split (single worker: deterministic for a seed)."""
    from gensim.models import KeyedVectors, Word2Vec
    h = hashlib.sha256()
    for s in sentences:
        h.update(" ".join(s).encode("utf-8"))
        h.update(b"\n")
    h.update(f"dim={dim} seed={seed} epochs={epochs} window={window} sg=1".encode())
    key = h.hexdigest()[:20]
    path = cache_dir() / f"word2vec-{key}.txt"
    cached = path.is_file()
    if cached:
        kv = KeyedVectors.load_word2vec_format(str(path), binary=False)
    else:
        model = Word2Vec(sentences=sentences, vector_size=dim, window=window, min_count=1, sg=1, workers=1,
                         seed=seed, epochs=epochs)
        kv = model.wv
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        kv.save_word2vec_format(str(tmp), binary=False)
        os.replace(tmp, path)
    mat, found = _matrix(vocab, dim, lambda w: kv[w] if w in kv.key_to_index else None, seed)
    return mat, {"embeddings": "word2vec", "found": found, "vocab": len(vocab) - len(SPECIALS),
                 "coverage": found / max(len(vocab) - len(SPECIALS), 1), "cache": str(path),
                 "from_cache": cached, "settings": f"skip-gram, dim {dim}, window {window}, {epochs} epochs"}


def resolve(setting: str, vocab: Vocab, dim: int, sentences: Iterable[list[str]] | None, seed: int = 1):
    """(matrix or None, info dict) for an ``embeddings`` option value."""
    if setting in (None, "", "random"):
        return None, {"embeddings": "random"}
    if setting.startswith("pretrained:"):
        return load_glove(setting.split(":", 1)[1], vocab, dim, seed)
    if setting == "word2vec":
        return train_word2vec(list(sentences or []), vocab, dim, seed)
    raise EmbeddingError(f"embeddings = {setting!r}: use \"random\", \"word2vec\" or \"pretrained:<path to GloVe "
                         "text file>\"")
