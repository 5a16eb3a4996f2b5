"""The one interface every model speaks.

Required (``build_model`` checks these when the model is built and stops with a one-line ``ContractError``
naming the rule a model breaks; docs/extending-models.md walks through them):
    subclass Seq2Seq, and call ``super().__init__()`` first in ``__init__``
    vocab_size                            attribute: the output vocabulary |V| (an int; the constructor gets
                                          it as the ``vocab_size`` keyword)
    forward(batch, need_attention=False)  teacher forcing -> StepOutput(log_probs (B, T, V_ext), aux_losses,
                                          attention (filled only when need_attention), extras)
    encode(batch)                         run the encoder once -> DecoderState (a dict)
    decode_step(state, prev)              log-probs (B, V_ext) for one step and the new state
    (a model with ``trainable = False`` implements ``extract(examples)`` instead of the last four)

Declarations (class attributes / methods the suite reads instead of guessing from names):
    option_rules                    option name -> rule (``at_least``, ``between``, ``one_of``), checked when
                                    the experiment file is read; merged along the class hierarchy
    attention_maps()                names of the StepOutput.attention maps the report keeps in
                                    attention.json (default: the ``cross_attention`` map, if any)
    embeddings_option, embedding_dim(options)
                                    the option that names pretrained word vectors and their width; the
                                    runner resolves the vectors and passes them as ``pretrained_embeddings``
                                    (default: None, the model takes no pretrained vectors)
    legacy_defaults                 options a run recorded before ``model_rules`` existed was trained with

Optional hooks, each with a default (override what the model has; the rest of the suite only calls these,
it never inspects a model's class, attributes or state keys):
    create(**options)               classmethod that builds the model (default: the class called with them)
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

import contextlib
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import torch
from torch import nn

from seq2seq_zoo.data.vocab import UNK_ID
from seq2seq_zoo.errors import ContractError
from seq2seq_zoo.models.losses import targets_for, token_losses  # noqa: F401 - StepOutput's loss; one definition
from seq2seq_zoo.registry import CONTEXT_KEYS, MODELS, did_you_mean, model_context, model_options  # noqa: F401

DecoderState = dict[str, Any]


# ------------------------------------------------------------------------------------ option rules
@dataclass(frozen=True)
class Rule:
    """A check of one model option, declared in the model's ``option_rules``. Calling it with a value
    returns what is wrong (e.g. "must be >= 1"), or None; None values (an option left unset) pass."""
    test: Callable[[Any], bool]
    says: str
    choices: tuple = ()

    def __call__(self, value) -> str | None:
        if value is None or self.test(value):
            return None
        return self.says + (did_you_mean(value, self.choices) if self.choices else "")


def at_least(low) -> Rule:
    return Rule(lambda v: isinstance(v, (int, float)) and v >= low, f"must be >= {low}")


def between(low, high, closed: bool = False) -> Rule:
    """low <= v < high (``closed``: <= high)."""
    return Rule(lambda v: isinstance(v, (int, float)) and low <= v and (v <= high if closed else v < high),
                f"must be in [{low}, {high}{']' if closed else ')'}")


def one_of(*choices) -> Rule:
    return Rule(lambda v: v in choices, f"is not one of {', '.join(map(str, choices))}.", tuple(choices))


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

    @classmethod
    def create(cls, **options) -> Seq2Seq:
        """Hook: build the model from its options (``build_model`` and ``MODELS.create`` call this, not the
        class). Default: ``cls(**options)``; a family may build a subclass chosen by an option (the
        recurrent models' ``impl``, models/rnn.py)."""
        return cls(**options)

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

    #: hook: True for a model whose summaries do not depend on the training seed (an extractive baseline):
    #: a comparison against it has no seed variance on its side (see ``seq2seq_zoo.stats.method_test``).
    deterministic: bool = False

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

    def attention_maps(self) -> list[str]:
        """Declaration: the keys of ``StepOutput.attention`` (each (B, H, T, S)) that the runner keeps in
        ``attention.json`` for the report. Default: the ``cross_attention`` map, if the model names one."""
        return [self.cross_attention] if self.cross_attention else []

    #: declaration: option name -> ``Rule`` (``at_least(1)``, ``between(0, 1)``, ``one_of("a", "b")``),
    #: checked when the experiment file is read, before anything is built; a subclass adds to its
    #: parents' rules (they are merged along the class hierarchy, ``registry.model_option_rules``).
    #: Consistency between options (heads dividing d_model) is for ``__init__`` to check: its
    #: ValueError becomes the experiment file's error, pointing at the option it names.
    option_rules: ClassVar[dict[str, Callable[[Any], str | None]]] = {}

    #: declaration: the option that names pretrained word vectors ("random" | "word2vec" |
    #: "pretrained:<file>"); the runner resolves it to a (vocab_size, embedding_dim(options)) tensor and
    #: passes it as the ``pretrained_embeddings`` constructor keyword. None: the model takes none.
    embeddings_option: ClassVar[str | None] = None

    @classmethod
    def embedding_dim(cls, options: dict[str, Any]) -> int | None:
        """Declaration: the width of the pretrained vectors, from the run's options (defaults filled
        in); used only with ``embeddings_option``. Default None."""
        return None

    #: declaration: option values a run recorded before records stated ``model_rules`` was trained with
    #: (defaults that changed since); ``zoo summarize``/``zoo eval`` rebuild such a run with them.
    legacy_defaults: ClassVar[dict[str, Any]] = {}

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
    """Create a registered model, passing the data context (vocab size, max lengths) it asks for. A
    model that breaks the contract (module docstring) raises ``ContractError`` naming the rule."""
    factory = MODELS.get(name)
    check_class(name, factory)
    sig = inspect.signature(factory.__init__ if inspect.isclass(factory) else factory)
    kwargs = {k: v for k, v in context.items() if k in sig.parameters}
    known = model_options(name)
    bad = [k for k in options if k not in known]
    if bad:
        raise TypeError(f"model '{name}' has no option '{bad[0]}'.{did_you_mean(bad[0], known)}")
    try:
        model = MODELS.create(name, **kwargs, **options)   # a class's ``create`` classmethod, else the factory
    except AttributeError as e:
        if "before Module.__init__() call" in str(e):  # torch's message for a module set too early
            raise _broken(name, factory, "__init__ must call super().__init__() before it sets any attribute "
                          f"(torch: {e})") from None
        raise
    check_instance(name, factory, model)
    return model


# Random initialisers a module's constructor may call; on the meta device each is skipped (see build_on_meta).
_INITS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
          "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_")
_TENSOR_INITS = ("normal_", "uniform_", "log_normal_", "exponential_", "geometric_", "cauchy_", "random_",
                 "bernoulli_", "fill_", "zero_")


@contextlib.contextmanager
def _values_skipped_on_meta():
    """Within the block, filling a meta tensor with values is a no-op. A meta tensor holds no values, yet
    torch runs an initialiser on one through its reference implementations, which import ``torch._dynamo``
    (seconds of every process that checks an experiment file's models, for nothing; docs/performance.md,
    "Start-up of a zoo process"). Tensors on real devices are filled as usual."""
    saved = []

    def skip(owner, name):
        original = getattr(owner, name, None)
        if original is None:
            return

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            t = args[0] if args else None
            if isinstance(t, torch.Tensor) and t.is_meta:
                return t
            return original(*args, **kwargs)
        saved.append((owner, name, original))
        setattr(owner, name, wrapper)

    try:
        for name in _INITS:
            skip(nn.init, name)
        for name in _TENSOR_INITS:
            skip(torch.Tensor, name)
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def build_on_meta(name: str, context: dict[str, Any], options: dict[str, Any]) -> Seq2Seq:
    """``build_model`` on the meta device (no memory, and no random initialisation): the shapes, parameter
    count and option checks of a model without its values."""
    with torch.device("meta"), _values_skipped_on_meta():
        return build_model(name, context, options)


def _where(factory) -> str:
    """``file.py:line, class Name`` of a model's definition, for contract messages."""
    try:
        return f"{inspect.getsourcefile(factory)}:{inspect.getsourcelines(factory)[1]}, {factory.__qualname__}"
    except (OSError, TypeError):
        return getattr(factory, "__qualname__", repr(factory))


def _broken(name: str, factory, rule: str) -> ContractError:
    return ContractError(f"model '{name}' ({_where(factory)}) breaks the model contract: {rule} "
                         "(see docs/extending-models.md)")


def check_class(name: str, factory) -> None:
    """The contract rules a model's class can be checked against before it is built."""
    if not (inspect.isclass(factory) and issubclass(factory, Seq2Seq)):
        if inspect.isclass(factory):
            raise _broken(name, factory, "a registered model must subclass seq2seq_zoo.models.base.Seq2Seq")
        return  # a factory function: its result is checked by check_instance
    if not getattr(factory, "trainable", True):
        if factory.extract is Seq2Seq.extract:
            raise _broken(name, factory, "a model with trainable = False must implement extract(examples)")
        return
    for hook in ("forward", "encode", "decode_step"):
        if getattr(factory, hook) is getattr(Seq2Seq, hook):
            raise _broken(name, factory, f"{hook}(...) is required and is not implemented")
    params = inspect.signature(factory.forward).parameters
    if "need_attention" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        raise _broken(name, factory, "forward must accept need_attention: def forward(self, batch, "
                      "need_attention=False) (the runner asks for the attention maps the report draws)")
    rules = getattr(factory, "option_rules", {})
    if not isinstance(rules, dict) or not all(callable(r) for r in rules.values()):
        raise _broken(name, factory, "option_rules must map option names to rules (at_least, between, one_of)")
    unknown = [k for k in rules if k not in model_options(name)]
    if unknown:
        raise _broken(name, factory, f"option_rules names '{unknown[0]}', which is not a keyword argument of "
                      "__init__")
    emb = factory.embeddings_option
    if emb is not None:
        if emb not in model_options(name):
            raise _broken(name, factory, f"embeddings_option '{emb}' is not a keyword argument of __init__")
        if "pretrained_embeddings" not in inspect.signature(factory.__init__).parameters:
            raise _broken(name, factory, "a model with an embeddings_option must take the pretrained_embeddings "
                          "keyword in __init__ (the runner passes the vectors there)")
        if factory.embedding_dim.__func__ is Seq2Seq.embedding_dim.__func__:
            raise _broken(name, factory, "a model with an embeddings_option must declare embedding_dim(options)")


def check_instance(name: str, factory, model) -> None:
    """The contract rules a built model is checked against."""
    if not isinstance(model, Seq2Seq):
        raise _broken(name, factory, f"building it must give a Seq2Seq, not {type(model).__name__}")
    if "_modules" not in model.__dict__:
        raise _broken(name, factory, "__init__ must call super().__init__() first")
    if model.trainable:
        v = getattr(model, "vocab_size", None)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise _broken(name, factory, "vocab_size must be set to the output vocabulary size, an int "
                          f"(self.vocab_size = vocab_size in __init__), not {v!r}")
        maps = model.attention_maps()
        if not isinstance(maps, (list, tuple)) or not all(isinstance(m, str) for m in maps):
            raise _broken(name, factory, f"attention_maps() must return a list of names, not {maps!r}")
