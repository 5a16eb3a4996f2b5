"""Which examples a run uses: the one selection shared by training (``runner.prepare_data``) and
re-decoding a trained run (``evaluation.run_decodes``), so both always see the same examples."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from seq2seq_zoo.data.batching import percentile_filter
from seq2seq_zoo.data.corpora import Example, ReadStats, load_split
from seq2seq_zoo.data.text import TextConfig

SPLIT_NAMES = ("train", "validation", "test")


def text_config(data_cfg) -> TextConfig:
    """The text normalisation a run's ``[data]`` section asks for."""
    return TextConfig(lowercase=data_cfg.lowercase, num_token=data_cfg.num_token)


def select_splits(spec, root: Path, which: tuple[str, ...] = SPLIT_NAMES, stats: dict[str, ReadStats] | None = None,
                  log: Callable[[str], None] | None = None) -> dict[str, list[Example]]:
    """The examples of each split in ``which`` ("train", "validation", "test"; "test" is the run's
    evaluation split ``eval.split``): read from ``root``, the training split length-filtered
    (``data.filter_percentiles``), then each cut to ``data.max_train`` / ``max_valid`` / ``max_test``.
    ``stats``: per-split ReadStats to fill (skipped examples)."""
    d = spec.data
    stats = stats if stats is not None else {}
    out: dict[str, list[Example]] = {}
    for name in which:
        split = spec.eval.split if name == "test" else name
        out[name] = load_split(d.dataset, root, split, d.on_bad, stats.setdefault(name, ReadStats()), d.options)
    if "train" in out and d.filter_percentiles:
        lo, hi = d.filter_percentiles
        before = len(out["train"])
        out["train"] = percentile_filter(out["train"], lo, hi, text_config(d))
        if log is not None:
            log(f"length filter {lo}-{hi} percentiles kept {len(out['train'])}/{before} training examples")
    limits = {"train": d.max_train, "validation": d.max_valid, "test": d.max_test}
    return {name: xs[: limits[name]] if limits[name] else xs for name, xs in out.items()}
