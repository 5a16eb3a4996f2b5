"""Summarise raw text with a trained run (``zoo summarize``)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

from seq2seq_zoo.config import RunSpec, read_spec
from seq2seq_zoo.data.batching import Encoded, collate
from seq2seq_zoo.data.corpora import DataError
from seq2seq_zoo.data.text import TextConfig, detokenize, tokenize
from seq2seq_zoo.data.vocab import Vocab
from seq2seq_zoo.decode import generate
from seq2seq_zoo.models.base import build_model, model_context
from seq2seq_zoo.utils import load_checkpoint, load_weights


class Summarizer:
    def __init__(self, model, vocab: Vocab, spec: RunSpec):
        self.model, self.vocab, self.spec = model.eval(), vocab, spec
        self.text_cfg = TextConfig(lowercase=spec.data.lowercase, num_token=spec.data.num_token)

    @classmethod
    def from_run(cls, run_dir: str | Path, checkpoint: str = "best.pt") -> "Summarizer":
        ck = Path(run_dir) / "checkpoints"
        for f in ("spec.json", "vocab.json", checkpoint):
            if not (ck / f).is_file():
                raise FileNotFoundError(f"{ck / f} not found: summarize needs a run trained on this machine "
                                        "(checkpoints are not committed); run `zoo run` first")
        spec = read_spec(ck / "spec.json")
        vocab = Vocab.load(ck / "vocab.json")
        model = build_model(spec.model, model_context(len(vocab), spec.data), spec.model_options)
        state = load_checkpoint(ck / checkpoint)
        load_weights(model, state["model"], ck / checkpoint)
        return cls(model, vocab, spec)

    @torch.no_grad()
    def __call__(self, text: str, beam_size: int | None = None, max_len: int | None = None) -> str:
        toks = tokenize(text, self.text_cfg)[: self.spec.data.max_src_len]
        if not toks:
            raise DataError("the input has no words to summarise (it is empty or only whitespace)")
        src_ext, oovs = self.vocab.encode_ext(toks)
        ex = Encoded("input", np.asarray(self.vocab.encode(toks)), np.asarray(src_ext), oovs,
                     np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), [""], text)
        cfg = dataclasses.replace(self.spec.decode, **{k: v for k, v in
                                  {"beam_size": beam_size, "max_len": max_len}.items() if v is not None})
        ids = generate(self.model, collate([ex]), cfg)[0]
        return detokenize(self.vocab.decode(ids, oovs))
