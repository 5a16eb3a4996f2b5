"""Word-level vocabulary with ``max_size`` / ``min_freq`` and per-source extended vocabularies.

Ids 0..3 are the specials; every source's out-of-vocabulary words get ids |V|, |V|+1, ... in order of
first appearance (See et al. 2017), so a copy mechanism can point at them and the loss can be computed
on extended ids. Models without copying simply never predict ids >= |V|.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIALS = (PAD, UNK, BOS, EOS)
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


class Vocab:
    def __init__(self, itos: list[str]):
        if tuple(itos[:4]) != SPECIALS:
            raise ValueError(f"vocabulary must start with {SPECIALS}")
        self.itos = list(itos)
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    @classmethod
    def build(cls, token_lists: Iterable[list[str]], max_size: int | None = None, min_freq: int = 1,
              extra: Iterable[str] = ()) -> "Vocab":
        counts = Counter()
        for toks in token_lists:
            counts.update(toks)
        for s in SPECIALS:
            counts.pop(s, None)
        # frequency, then alphabetical: deterministic whatever the corpus order
        words = sorted((w for w, c in counts.items() if c >= min_freq), key=lambda w: (-counts[w], w))
        extra = [w for w in extra if w not in SPECIALS]
        words = extra + [w for w in words if w not in set(extra)]
        if max_size is not None:
            words = words[: max(0, max_size - len(SPECIALS))]
        return cls(list(SPECIALS) + words)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.stoi.get(t, UNK_ID) for t in tokens]

    def encode_ext(self, tokens: list[str], oovs: list[str] | None = None) -> tuple[list[int], list[str]]:
        """Ids with this source's OOV words as |V|+k; returns (ids, oov list)."""
        oovs = [] if oovs is None else oovs
        pos = {w: i for i, w in enumerate(oovs)}
        ids = []
        for t in tokens:
            i = self.stoi.get(t)
            if i is None:
                if t not in pos:
                    pos[t] = len(oovs)
                    oovs.append(t)
                i = len(self.itos) + pos[t]
            ids.append(i)
        return ids, oovs

    def encode_target_ext(self, tokens: list[str], oovs: list[str]) -> list[int]:
        """Target ids where words found among the source OOVs get their extended id, others <unk>."""
        pos = {w: i for i, w in enumerate(oovs)}
        return [self.stoi[t] if t in self.stoi else (len(self.itos) + pos[t] if t in pos else UNK_ID)
                for t in tokens]

    def decode(self, ids: Iterable[int], oovs: list[str] | None = None, strip: bool = True) -> list[str]:
        out = []
        for i in ids:
            i = int(i)
            if strip and i == EOS_ID:
                break
            if strip and i in (PAD_ID, BOS_ID):
                continue
            if i < len(self.itos):
                out.append(self.itos[i])
            elif oovs is not None and i - len(self.itos) < len(oovs):
                out.append(oovs[i - len(self.itos)])
            else:
                out.append(UNK)
        return out

    def save(self, path: str | Path) -> None:
        from seq2seq_zoo.utils import atomic_write_json
        atomic_write_json(path, {"itos": self.itos})

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        """A vocab.json the suite wrote; a truncated, empty or hand-edited one raises ``DamagedFile``."""
        from seq2seq_zoo.utils import DamagedFile, read_json
        fix = "delete the run's checkpoints folder and train it again"
        d = read_json(path, "vocabulary", fix)
        itos = d.get("itos") if isinstance(d, dict) else None
        if not isinstance(itos, list) or not all(isinstance(w, str) for w in itos) or tuple(itos[:4]) != SPECIALS:
            raise DamagedFile(f"{path}: damaged vocabulary (needs \"itos\": a list of words starting with "
                              f"{', '.join(SPECIALS)}); {fix}")
        return cls(itos)

    def to_hf_tokenizer(self):
        """The same vocabulary as a Hugging Face ``tokenizers`` WordLevel tokenizer (for interop)."""
        from tokenizers import Tokenizer, models, pre_tokenizers
        tok = Tokenizer(models.WordLevel(vocab=dict(self.stoi), unk_token=UNK))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        return tok
