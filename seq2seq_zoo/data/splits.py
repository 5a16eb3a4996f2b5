"""Which examples a run uses: the one selection shared by training (``runner.prepare_data``) and
re-decoding a trained run (``evaluation.run_decodes``), so both always see the same examples."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from seq2seq_zoo.data.batching import percentile_filter
from seq2seq_zoo.data.corpora import Example, ReadStats, load_split
from seq2seq_zoo.data.text import TextConfig
from seq2seq_zoo.errors import DataError, EmptySelection

SPLIT_NAMES = ("train", "validation", "test")


def text_config(data_cfg) -> TextConfig:
    """The text normalisation a run's ``[data]`` section asks for."""
    return TextConfig(lowercase=data_cfg.lowercase, num_token=data_cfg.num_token,
                      turn_separator=data_cfg.turn_separator)


def check_unique_ids(examples: list[Example], split: str, files: list[str]) -> None:
    """Every example of a split has its own id: confidence intervals, paired tests and the shown examples
    pair examples by id. A repeated id raises ``DataError`` naming the file(s) and the id."""
    seen: set[str] = set()
    for e in examples:
        if e.id in seen:
            raise DataError(f"{', '.join(map(str, files))}: id {e.id!r} appears twice in the {split} split; ids must "
                            "be unique per split (fix the file, or for your own files name a unique field with "
                            "data.options.id, or leave it unset to number the rows)")
        seen.add(e.id)


def select_splits(spec, root: Path, which: tuple[str, ...] = SPLIT_NAMES, stats: dict[str, ReadStats] | None = None,
                  log: Callable[[str], None] | None = None) -> dict[str, list[Example]]:
    """The examples of each split in ``which`` ("train", "validation", "test"; "test" is the run's
    evaluation split ``eval.split``): read from ``root``, the training split length-filtered
    (``data.filter_percentiles``), then each cut to ``data.max_train`` / ``max_valid`` / ``max_test``.
    ``stats``: per-split ReadStats to fill (skipped examples)."""
    d = spec.data
    stats = stats if stats is not None else {}
    out: dict[str, list[Example]] = {}
    trail: dict[str, list[str]] = {}  # how each split got to its size, for the message when one is empty
    for name in which:
        split = spec.eval.split if name == "test" else name
        out[name] = load_split(d.dataset, root, split, d.on_bad, stats.setdefault(name, ReadStats()), d.options)
        check_unique_ids(out[name], split, stats[name].notes.get("files") or [f"{root / d.dataset} ({d.dataset})"])
        skipped = sum(stats[name].skipped.values())
        trail[name] = [f"{len(out[name])} read" + (f" ({skipped} rows skipped)" if skipped else "")]
    if "train" in out and d.filter_percentiles:
        lo, hi = d.filter_percentiles
        before = len(out["train"])
        out["train"] = percentile_filter(out["train"], lo, hi, text_config(d)) if out["train"] else []
        trail["train"].append(f"data.filter_percentiles = {list(d.filter_percentiles)} kept {len(out['train'])}")
        if log is not None:
            log(f"length filter {lo}-{hi} percentiles kept {len(out['train'])}/{before} training examples")
    limits = {"train": ("max_train", d.max_train), "validation": ("max_valid", d.max_valid),
              "test": ("max_test", d.max_test)}
    for name in out:
        key, limit = limits[name]
        if limit is not None:  # 0 leaves none (it is not "no limit"): reported below
            out[name] = out[name][:limit]
            trail[name].append(f"data.{key} = {limit} kept {len(out[name])}")
    _check_not_empty(spec, root, out, trail)
    return out


def _check_not_empty(spec, root: Path, splits: dict, trail: dict) -> None:
    """Stop before anything is trained or written when a split has no examples left, naming the
    settings that removed them and the counts at each step."""
    empty = [s for s, x in splits.items() if not x]
    if not empty:
        return
    label = {"train": "train split", "validation": "validation split",
             "test": f"evaluation split (eval.split = {spec.eval.split!r})"}
    parts = [f"{label[s]} of {spec.data.dataset} in {root}: " + ", ".join(trail[s]) for s in empty]
    raise EmptySelection(f"run '{spec.name}': no {' and no '.join(empty)} examples left ({'; '.join(parts)}). "
                         "Change the setting that removes them, or fix the split file; nothing was trained")
