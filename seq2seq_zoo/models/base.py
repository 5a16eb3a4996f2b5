"""The one interface every model speaks (see DESIGN.md).

forward(batch)            teacher forcing -> StepOutput(log_probs (B, T, V_ext), aux losses, attention)
encode(batch)             run the encoder once -> DecoderState
decode_step(state, prev)  log-probs (B, V_ext) for one step and the new state
reorder(state, index)     beam-search reindexing along the batch dimension

V_ext = |V| + the batch's largest number of source OOV words. A model without a copy mechanism may
return only |V| columns: the loss maps targets it cannot produce to <unk>, and the decoder never asks
which model it holds.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from seq2seq_zoo.data.vocab import UNK_ID
from seq2seq_zoo.registry import CONTEXT_KEYS, MODELS, model_context, model_options  # noqa: F401

DecoderState = dict[str, Any]


@dataclass
class StepOutput:
    log_probs: torch.Tensor                                   # (B, T, V or V_ext)
    aux_losses: dict[str, torch.Tensor] = field(default_factory=dict)  # added to the loss by the objective
    attention: dict[str, torch.Tensor] = field(default_factory=dict)   # name -> (B, H, T, S) weights
    extras: dict[str, Any] = field(default_factory=dict)


class Seq2Seq(nn.Module):
    vocab_size: int
    # False for a model with nothing to train (the extractive baselines in models/baselines.py): the
    # runner skips the loop and checkpoints and calls ``tune`` on the validation split instead.
    trainable: bool = True

    def extract(self, examples) -> list[str] | None:
        """Summaries written without the decoder, one per example (objects with ``source_text`` and
        ``references``), e.g. by selecting source sentences; None (the default): decode with beam search."""
        return None

    def tune(self, examples) -> dict[str, Any]:
        """A model without training may choose its options on the validation split here (it sees the
        references); returns what it chose, for the run record."""
        return {}

    def forward(self, batch, need_attention: bool = False) -> StepOutput:  # pragma: no cover - abstract
        raise NotImplementedError

    def encode(self, batch) -> DecoderState:  # pragma: no cover - abstract
        raise NotImplementedError

    def decode_step(self, state: DecoderState, prev: torch.Tensor) -> tuple[torch.Tensor, DecoderState]:
        raise NotImplementedError  # pragma: no cover - abstract

    def reorder(self, state: DecoderState, index: torch.Tensor) -> DecoderState:
        """Default: index every tensor (nested in dicts/lists) along dim 0."""
        return _index(state, index)

    def components(self) -> dict[str, list[nn.Parameter]]:
        """Trainable parameters per component (embedding, encoder, decoder, output) for the tables."""
        return {"model": [p for p in self.parameters() if p.requires_grad]}

    def feed(self, prev: torch.Tensor) -> torch.Tensor:
        """Extended ids (copied OOV words) are fed back to the decoder as <unk>."""
        return prev.masked_fill(prev >= self.vocab_size, UNK_ID)


def _index(obj, index):
    if isinstance(obj, torch.Tensor):
        return obj.index_select(0, index) if obj.dim() > 0 else obj
    if isinstance(obj, dict):
        return {k: _index(v, index) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_index(v, index) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_index(v, index) for v in obj)
    return obj


def count_parameters(model: Seq2Seq) -> dict[str, int]:
    """Unique trainable parameters per component; shared (tied) tensors are counted once, where first seen."""
    seen: set[int] = set()
    out: dict[str, int] = {}
    for name, params in model.components().items():
        n = 0
        for p in params:
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
        out[name] = n
    rest = sum(p.numel() for p in model.parameters() if p.requires_grad and id(p) not in seen)
    if rest:
        out["other"] = rest
    out["total"] = sum(out.values())
    return out


def build_model(name: str, context: dict[str, Any], options: dict[str, Any]) -> Seq2Seq:
    """Create a registered model, passing the data context (vocab size, max lengths) it asks for."""
    factory = MODELS.get(name)
    sig = inspect.signature(factory.__init__ if inspect.isclass(factory) else factory)
    kwargs = {k: v for k, v in context.items() if k in sig.parameters}
    known = model_options(name)
    bad = [k for k in options if k not in known]
    if bad:
        from seq2seq_zoo.registry import did_you_mean
        raise TypeError(f"model '{name}' has no option '{bad[0]}'.{did_you_mean(bad[0], known)}")
    return factory(**kwargs, **options)
