"""The one interface every model speaks.

Required:
    forward(batch, need_attention=False)  teacher forcing -> StepOutput(log_probs (B, T, V_ext), aux_losses,
                                          attention (filled only when need_attention), extras)
    encode(batch)                         run the encoder once -> DecoderState (a dict)
    decode_step(state, prev)              log-probs (B, V_ext) for one step and the new state

Optional hooks, each with a default (override what the model has; the rest of the suite only calls these,
it never inspects a model's class, attributes or state keys):
    reorder(state, index)           beam-search reindexing along dim 0 (default: every tensor in the state)
    components()                    trainable parameters per component for the tables (default: one "model")
    schedule_dim()                  d of the Noam learning-rate schedule (default: ``d_model``, else the
                                    width of the first embedding, else 512)
    cross_attention                 name of the source-target attention map in StepOutput.attention that
                                    the report draws (default None: no plot)
    positional_tables()             name -> (positions, dim) tables the report plots (default: none)
    model_rules()                   derived settings the record and tables state (default: none)
    trainable, tune(examples), extract(examples), describe(), upper_bound
                                    models with nothing to train (extractive baselines): the runner skips
                                    the loop, ``tune`` chooses options on validation, ``extract`` writes
                                    summaries without the decoder (defaults: a trained, decoded model)
    attention_coverage(state)       (summed past attention, source mask) of a decoder state, which beam
                                    search's coverage penalty needs (default None: no coverage tracked)
    StepOutput.token_losses(...)    (loss sum, NLL sum, tokens) for the cross-entropy objective; default
                                    from ``log_probs``; a model with a fused output layer + loss returns a
                                    StepOutput subclass overriding it (same values, less memory)
    StepOutput.extras["p_gen"]      copy models: p_gen per target step (B, T), for the copying statistics

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

from seq2seq_zoo.data.vocab import PAD_ID, UNK_ID
from seq2seq_zoo.registry import CONTEXT_KEYS, MODELS, did_you_mean, model_context, model_options  # noqa: F401

DecoderState = dict[str, Any]


def targets_for(log_probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Targets the model can produce: extended ids beyond its output width become <unk>."""
    return target.masked_fill(target >= log_probs.size(-1), UNK_ID)


def token_losses(log_probs: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0,
                 smooth_width: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Returns (sum of training loss, sum of NLL, number of target tokens), padding excluded.

    Label smoothing: loss = (1 - eps) * NLL + eps * mean_{w in V} (-log p(w)), the uniform part taken
    over the base vocabulary (``smooth_width`` columns), which is where every model puts mass.
    """
    target = targets_for(log_probs, target)
    mask = target != PAD_ID
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    nll = nll.masked_fill(~mask, 0.0)
    n = int(mask.sum())
    nll_sum = nll.sum()
    if label_smoothing > 0:
        w = smooth_width or log_probs.size(-1)
        uniform = -log_probs[..., :w].mean(-1).masked_fill(~mask, 0.0)
        loss_sum = (1 - label_smoothing) * nll_sum + label_smoothing * uniform.sum()
    else:
        loss_sum = nll_sum
    return loss_sum, nll_sum, n


@dataclass
class StepOutput:
    log_probs: torch.Tensor                                   # (B, T, V or V_ext)
    aux_losses: dict[str, torch.Tensor] = field(default_factory=dict)  # added to the loss by the objective
    attention: dict[str, torch.Tensor] = field(default_factory=dict)   # name -> (B, H, T, S) weights
    extras: dict[str, Any] = field(default_factory=dict)     # e.g. "p_gen" (B, T) of copy models

    def token_losses(self, target: torch.Tensor, label_smoothing: float = 0.0,
                     smooth_width: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Hook: (sum of training loss, sum of NLL, target tokens) of ``target`` (B, T), padding
        excluded; the cross-entropy objective calls it. Default: ``token_losses(self.log_probs, ...)``.
        Override it in a subclass to fuse the output layer and the loss (the values must stay the same)."""
        return token_losses(self.log_probs, target, label_smoothing, smooth_width)


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

    #: hook: True for a model that reads the references (an oracle); every table labels it an upper bound.
    upper_bound: bool = False

    def describe(self) -> str | None:
        """Hook: one line saying what a model without training does (tables and logs); default None,
        the registered name is used."""
        return None

    def model_rules(self) -> dict[str, Any]:
        """Hook: settings the model derived from its options that the record and the tables' settings
        should state (e.g. the Transformer's positional-encoding rule and bases); default none."""
        return {}

    #: hook: the key of ``StepOutput.attention`` holding the source-target attention (B, H, T, S) that the
    #: report draws as a heat map; None = nothing to draw.
    cross_attention: str | None = None

    def forward(self, batch, need_attention: bool = False) -> StepOutput:  # pragma: no cover - abstract
        """Teacher forcing. ``need_attention``: also fill ``StepOutput.attention`` (for the plots); a
        model without attention accepts the flag and returns no maps."""
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

    def schedule_dim(self) -> int:
        """Hook: d in the Noam schedule lr = factor * d^-0.5 * min(step^-0.5, step * warmup^-1.5).
        Default: the model's ``d_model``, else the width of its first embedding, else 512."""
        d = getattr(self, "d_model", None)
        if d:
            return int(d)
        emb = next((m for m in self.modules() if isinstance(m, nn.Embedding)), None)
        return emb.embedding_dim if emb is not None else 512

    def positional_tables(self) -> dict[str, torch.Tensor]:
        """Hook: positional encoding tables, name -> (positions, dim), which the report plots. Default: none."""
        return {}

    def attention_coverage(self, state: DecoderState) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Hook: (coverage, mask) of a decoder state, both (N, S): the attention summed over the steps so
        far and the real source positions, for beam search's coverage penalty. Default None: the model
        keeps no coverage and the penalty does not apply."""
        return None

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



def reorder_rows(state: dict, out: dict, index: torch.Tensor, sources: int) -> None:
    """``out``'s ``row`` (each hypothesis' source, after taking hypotheses ``index`` of ``state``) and
    ``group``: K when the rows are K consecutive hypotheses per source (beam search: per-source tensors
    are then shared without copies), 0 otherwise. The reference arange(B).repeat_interleave(K) is made
    once per decode and kept in the state (``grouped_row``)."""
    row = state["row"].index_select(0, index)
    N = row.numel()
    group = 0
    if N % sources == 0:
        grouped = state.get("grouped_row")
        if grouped is None or grouped.numel() != N:
            grouped = out["grouped_row"] = torch.arange(sources, device=row.device).repeat_interleave(N // sources)
        if torch.equal(row, grouped):
            group = N // sources
    out.update(row=row, group=group)

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
        raise TypeError(f"model '{name}' has no option '{bad[0]}'.{did_you_mean(bad[0], known)}")
    return factory(**kwargs, **options)
