"""Named registries (timm/fairseq style): a decorator registers a plain entry point.

    @register_model("transformer")
    class Transformer(Seq2Seq): ...

    create_model("transformer", d_model=128)
    list_models("trans*")
"""
from __future__ import annotations

import difflib
import fnmatch
import importlib
import inspect
import pkgutil
from typing import Any, Callable

from seq2seq_zoo.errors import UnknownName


def nearest(name: str, choices) -> str | None:
    close = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.5)
    return close[0] if close else None


def did_you_mean(name: str, choices) -> str:
    n = nearest(name, choices)
    return f" Did you mean '{n}'?" if n else ""


class Registry:
    def __init__(self, kind: str, discover: str | None = None):
        self.kind = kind
        self._entries: dict[str, Callable] = {}
        self._discover = discover  # package whose modules are imported on first lookup
        self._discovered = discover is None

    def register(self, name: str) -> Callable:
        def deco(obj):
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} '{name}' is registered twice "
                                 f"({self._entries[name].__module__} and {obj.__module__})")
            self._entries[name] = obj
            obj._registry_name = name
            return obj
        return deco

    def _ensure(self) -> None:
        # "Adding a model is one new file": every module of the package is imported, so its
        # decorators run, without a central list to edit.
        if self._discovered:
            return
        self._discovered = True
        pkg = importlib.import_module(self._discover)
        for mod in pkgutil.iter_modules(getattr(pkg, "__path__", [])):
            importlib.import_module(f"{self._discover}.{mod.name}")

    def get(self, name: str) -> Callable:
        self._ensure()
        if name not in self._entries:
            raise UnknownName(f"unknown {self.kind} '{name}'.{did_you_mean(name, self._entries)} "
                              f"Known: {', '.join(sorted(self._entries))}")
        return self._entries[name]

    def create(self, name: str, **kwargs: Any):
        return self.get(name)(**kwargs)

    def names(self, pattern: str = "*") -> list[str]:
        self._ensure()
        return sorted(n for n in self._entries if fnmatch.fnmatch(n, pattern))

    def __contains__(self, name: str) -> bool:
        self._ensure()
        return name in self._entries

    def doc(self, name: str) -> str:
        obj = self.get(name)
        d = inspect.getdoc(obj) or ""
        return d.splitlines()[0] if d else ""


MODELS = Registry("model", discover="seq2seq_zoo.models")
DATASETS = Registry("dataset", discover="seq2seq_zoo.data")
METRICS = Registry("metric", discover="seq2seq_zoo.metrics")
SCHEDULES = Registry("schedule", discover="seq2seq_zoo.train.schedules")
OBJECTIVES = Registry("objective", discover="seq2seq_zoo.train.objectives")

register_model = MODELS.register
register_dataset = DATASETS.register
register_metric = METRICS.register
register_schedule = SCHEDULES.register
register_objective = OBJECTIVES.register


def create_model(name: str, **kwargs):
    return MODELS.create(name, **kwargs)


def list_models(pattern: str = "*") -> list[str]:
    return MODELS.names(pattern)


# keyword arguments a model may ask for in its constructor; the framework fills them from the data
CONTEXT_KEYS = ("vocab_size", "max_src_len", "max_tgt_len", "pretrained_embeddings")


def model_context(vocab_size: int, data, **extra) -> dict[str, Any]:
    """The context every model build receives: vocabulary size and the data's length limits."""
    return {"vocab_size": vocab_size, "max_src_len": data.max_src_len, "max_tgt_len": data.max_tgt_len, **extra}


def model_options(name: str) -> dict[str, Any]:
    """Constructor keyword arguments of a registered model with their defaults (for config checks)."""
    obj = MODELS.get(name)
    sig = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    out = {}
    for p in sig.parameters.values():
        if p.name == "self" or p.name in CONTEXT_KEYS or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out[p.name] = None if p.default is inspect.Parameter.empty else p.default
    return out
