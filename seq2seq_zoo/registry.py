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
import importlib.util
import inspect
import pkgutil
from pathlib import Path
from typing import Any, Callable

from seq2seq_zoo.errors import UnknownName


def nearest(name: str, choices) -> str | None:
    close = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.5)
    return close[0] if close else None


def did_you_mean(name: str, choices) -> str:
    n = nearest(name, choices)
    return f" Did you mean '{n}'?" if n else ""


class Registry:
    def __init__(self, kind: str, discover: str | None = None, entry_points: str | None = None,
                 constructor: str | None = None):
        self.kind = kind
        self._constructor = constructor  # a registered class's classmethod that ``create`` calls, if it has one
        self._entries: dict[str, Callable] = {}
        self._discover = discover  # package whose modules are imported on first lookup
        self._discovered = discover is None and entry_points is None
        self._entry_points = entry_points  # installed packages' entry point group, loaded on first lookup

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
        if self._discover:
            pkg = importlib.import_module(self._discover)
            for mod in pkgutil.iter_modules(getattr(pkg, "__path__", [])):
                importlib.import_module(f"{self._discover}.{mod.name}")
        if self._entry_points:
            load_entry_points(self._entry_points)

    def get(self, name: str) -> Callable:
        self._ensure()
        if name not in self._entries:
            hint = (" (a model defined outside the package: pass its file with --models PATH or list it in "
                    "[experiment] models)") if self._entry_points and not nearest(name, self._entries) else ""
            raise UnknownName(f"unknown {self.kind} '{name}'.{did_you_mean(name, self._entries)} "
                              f"Known: {', '.join(sorted(self._entries))}{hint}")
        return self._entries[name]

    def create(self, name: str, **kwargs: Any):
        obj = self.get(name)
        return getattr(obj, self._constructor, obj)(**kwargs) if self._constructor else obj(**kwargs)

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


# a model class is built by its ``create`` classmethod (models/base.py), which may pick a subclass
MODELS = Registry("model", discover="seq2seq_zoo.models", entry_points="seq2seq_zoo.models", constructor="create")
DATASETS = Registry("dataset", discover="seq2seq_zoo.data")
METRICS = Registry("metric", discover="seq2seq_zoo.metrics")
SCHEDULES = Registry("schedule", discover="seq2seq_zoo.train.schedules")
OBJECTIVES = Registry("objective", discover="seq2seq_zoo.train.objectives")
# each rule a decoder applies (n-gram blocking, penalties, minimum length, ...), with the decode.* keys it
# owns: seq2seq_zoo/decode/rules.py
DECODING_RULES = Registry("decoding rule", discover="seq2seq_zoo.decode.rules")

register_model = MODELS.register
register_dataset = DATASETS.register
register_schedule = SCHEDULES.register
register_objective = OBJECTIVES.register
register_decoding_rule = DECODING_RULES.register


def register_metric(name: str, columns=(), order: int = 50, sentence_scores: Callable | None = None,
                    options: dict[str, str] | None = None) -> Callable:
    """Register a metric with the output columns it declares (``seq2seq_zoo.metrics.Column``: label,
    per-example or not, higher-is-better, CIs, usable as ``train.val_metric`` or a reward). ``order``
    places its columns in the tables (the built-in ones: ROUGE 10, BERTScore 20, UNK ratio 30, repetition
    40, length 90). ``sentence_scores(keys, **options)`` may give a faster scorer of hypotheses against one
    reference each than the per-example values (validation and rewards use it). ``options``: the
    ``eval.*`` settings the metric takes, each with the keyword argument it arrives as (only these reach
    it from a run's settings)."""
    def deco(fn):
        METRICS.register(name)(fn)
        fn.columns, fn.order, fn.options = tuple(columns), order, dict(options or {})
        if sentence_scores is not None:
            fn.sentence_scores = sentence_scores
        return fn
    return deco


def metric_columns(flag: str | None = None) -> list:
    """Every registered metric's declared output columns in table order (the metrics by their ``order``,
    then their name; a metric's columns as it lists them); with ``flag`` ("ci", "val_metric", "reward",
    "per_example", "table"), only the columns that have it."""
    out = []
    for name in sorted(METRICS.names(), key=lambda n: (getattr(METRICS.get(n), "order", 50), n)):
        out += [c for c in getattr(METRICS.get(name), "columns", ()) if flag is None or getattr(c, flag)]
    return out

def decoding_rules(by: str = "order") -> list:
    """Every registered decoding rule class (``seq2seq_zoo.decode.rules``) in chain order, or with
    ``by="label_order"`` in the order their words take in labels and settings lines (then by name)."""
    classes = [DECODING_RULES.get(n) for n in DECODING_RULES.names()]
    key = (lambda c: c.order) if by == "order" else (lambda c: c.order if c.label_order is None else c.label_order)
    return sorted(classes, key=lambda c: (key(c), c._registry_name))


# decode.* keys of the search itself, owned by no decoding rule
SEARCH_KEYS = ("method", "beam_size", "max_len", "batch_size")


def decoding_rule_keys() -> dict[str, tuple[Any, Any]]:
    """``decode.*`` key -> (the decoding rule owning it, its ``Key`` declaration). A key is owned by one
    rule: a second rule declaring it (or a search key) is an error naming both."""
    out: dict[str, tuple[Any, Any]] = {}
    for cls in decoding_rules():
        for k, key in cls.keys.items():
            if k in SEARCH_KEYS or k in out:
                other = "the search itself" if k in SEARCH_KEYS else f"rule '{out[k][0]._registry_name}'"
                raise ValueError(f"decoding rule '{cls._registry_name}' ({cls.__module__}) declares decode.{k}, "
                                 f"which {other} owns; give it another name")
            out[k] = (cls, key)
    return out


def objective_options() -> dict[str, dict[str, Any]]:
    """Registered objective -> the options it declares (``options`` of an ``Objective`` class: option name
    -> ``Option``), for the objectives that declare any; an experiment file sets them as the objective's
    table ``train.<objective>`` (e.g. ``train.scst = { gamma = 0.9 }``)."""
    return {name: dict(opts) for name in OBJECTIVES.names() if (opts := getattr(OBJECTIVES.get(name), "options", None))}


def objective_stored_keys() -> dict[str, tuple[str, str, Any]]:
    """The flat ``train.*`` keys records keep objectives' options under (an ``Option``'s ``stored``, SCST's
    ``rl_*``) -> (objective, option, its ``Option``). A key stored by two options is an error naming both."""
    out: dict[str, tuple[str, str, Any]] = {}
    for objective, opts in objective_options().items():
        for name, opt in opts.items():
            key = getattr(opt, "stored", None)
            if key is None:
                continue
            if key in out:
                raise ValueError(f"objective '{objective}' stores its option '{name}' as train.{key}, which "
                                 f"'{out[key][0]}' stores '{out[key][1]}' as; give it another stored name")
            out[key] = (objective, name, opt)
    return out


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


def model_option_rules(name: str) -> dict[str, Callable[[Any], str | None]]:
    """A registered model's declared option rules (``option_rules`` of its class and its bases, a
    subclass's rule winning): option name -> callable returning what is wrong with a value, or None."""
    obj = MODELS.get(name)
    out: dict[str, Callable] = {}
    for cls in reversed(inspect.getmro(obj)) if inspect.isclass(obj) else ():
        out.update(vars(cls).get("option_rules", None) or {})
    return out


def reader_options(dataset: str) -> dict[str, tuple[Any, Any]]:
    """The options of a dataset's reader: {name: (default, type hint)} from its keyword-only arguments."""
    import typing
    reader = DATASETS.get(dataset)
    hints = typing.get_type_hints(reader)
    return {n: (p.default, hints.get(n, Any)) for n, p in inspect.signature(reader).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


def check_reader_options(dataset: str, options: dict) -> tuple[str, str] | None:
    """Names and reader-specific rules of ``data.options`` (types are checked by config against the
    hints of :func:`reader_options`): ``(key, message)`` for the first problem, or None."""
    known = reader_options(dataset)
    for k in options:
        if k not in known:
            if not known:
                return k, f"dataset '{dataset}' takes no options (remove data.options)"
            return k, (f"dataset '{dataset}' has no option '{k}'.{did_you_mean(k, known)} "
                       f"Options: {', '.join(known)}")
    check = getattr(DATASETS.get(dataset), "check_options", None)
    return check(options) if check else None


# ------------------------------------------------------------------ models from outside the package
_LOADED: dict[str, str] = {}   # resolved path -> module name, so a path named twice is imported once


def load_models(paths, base: str | Path | None = None, what: str = "--models") -> list[str]:
    """Import user model code so that its ``@register_model`` decorators run (fairseq's ``--user-dir``):
    each path is a ``.py`` file, or a folder (a package with ``__init__.py`` is imported with every
    module in it; a plain folder, each ``*.py`` file in it not starting with ``_``). Relative paths are
    taken from ``base`` (the experiment file's folder), else the working directory. Importing the same
    file again is a no-op. Returns the module names imported. A missing path or a module that fails to
    import raises ``PluginError`` naming it."""
    import sys

    from seq2seq_zoo.errors import PluginError
    MODELS._ensure()   # the package's own models first, so a user model cannot shadow one silently
    done = []
    for raw in paths:
        p = Path(raw).expanduser()
        if not p.is_absolute() and base is not None:
            p = Path(base) / p
        p = p.resolve()
        if not p.exists():
            raise PluginError(f"{what}: {raw!r}: no such file or folder ({p}); give a .py file or a folder of them")
        if p.is_file() and p.suffix != ".py":
            raise PluginError(f"{what}: {raw!r}: not a Python file (.py) or a folder")
        if p.is_dir() and (p / "__init__.py").is_file():
            targets = [p / "__init__.py"] + sorted(q for q in p.glob("*.py") if q.name != "__init__.py")
        elif p.is_dir():
            targets = sorted(q for q in p.glob("*.py") if not q.name.startswith("_"))
            if not targets:
                raise PluginError(f"{what}: {raw!r}: the folder holds no .py files")
        else:
            targets = [p]
        pkg = None
        for f in targets:
            key = str(f)
            if key in _LOADED:
                done.append(_LOADED[key])
                continue
            if f.name == "__init__.py":
                modname = f"seq2seq_zoo_user_{_tag(p)}"
                spec = importlib.util.spec_from_file_location(modname, f, submodule_search_locations=[str(p)])
                pkg = modname
            elif pkg is not None:
                modname = f"{pkg}.{f.stem}"
                spec = importlib.util.spec_from_file_location(modname, f)
            else:
                modname = f"seq2seq_zoo_user_{_tag(f)}"
                spec = importlib.util.spec_from_file_location(modname, f)
            if modname in sys.modules:   # imported already (a package's __init__ importing its modules)
                _LOADED[key] = modname
                done.append(modname)
                continue
            module = importlib.util.module_from_spec(spec)
            sys.modules[modname] = module
            try:
                spec.loader.exec_module(module)
            except Exception as e:  # noqa: BLE001 - the user's code: name the file and the error in one line
                del sys.modules[modname]
                line = getattr(e, "lineno", None) or _user_line(e, f)
                raise PluginError(f"{f}{f':{line}' if line else ''}: importing this model file failed "
                                  f"({type(e).__name__}: {e}); fix it (run with --debug for the traceback)") from e
            _LOADED[key] = modname
            done.append(modname)
    return done


def _tag(path: Path) -> str:
    """A module name for a user file or folder: its name (letters, digits, _) and a hash of its path."""
    import hashlib
    import re
    return re.sub(r"\W", "_", path.stem) + "_" + hashlib.sha1(str(path).encode()).hexdigest()[:8]


def _user_line(e: BaseException, f: Path) -> int | None:
    """The innermost line of file ``f`` in an exception's traceback."""
    tb, line = e.__traceback__, None
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == f:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def load_entry_points(group: str) -> list[str]:
    """Load every installed entry point of ``group`` (e.g. a package declaring
    ``[project.entry-points."seq2seq_zoo.models"] my_model = "my_pkg.models"`` in its pyproject.toml);
    loading imports the module, so its ``@register_model`` decorators run."""
    from importlib.metadata import entry_points

    from seq2seq_zoo.errors import PluginError
    names = []
    for ep in entry_points(group=group):
        try:
            ep.load()
        except Exception as e:  # noqa: BLE001 - an installed plugin: name it in one line
            raise PluginError(f"entry point '{ep.name} = {ep.value}' (group {group}): loading it failed "
                              f"({type(e).__name__}: {e}); fix or uninstall that package") from e
        names.append(ep.name)
    return names
