"""Load a trained run (``zoo summarize``, ``zoo eval --decode``) and summarise raw text with it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from seq2seq_zoo.config import RunSpec, read_spec
from seq2seq_zoo.data.batching import Encoded, collate
from seq2seq_zoo.data.splits import text_config
from seq2seq_zoo.data.text import detokenize, tokenize_source
from seq2seq_zoo.data.vocab import Vocab
from seq2seq_zoo.decode import generate
from seq2seq_zoo.errors import DataError, MissingFile
from seq2seq_zoo.models.base import MODELS, Seq2Seq, build_model, model_context
from seq2seq_zoo.utils import load_checkpoint, load_weights


@dataclass
class TrainedRun:
    spec: RunSpec
    vocab: Vocab
    model: Seq2Seq        # in eval mode, on the CPU
    checkpoint: Path


def run_spec(run_dir: str | Path, record: dict | None = None) -> RunSpec:
    """The run's configuration: ``checkpoints/spec.json``, else the spec stored in its record."""
    spec_path = Path(run_dir) / "checkpoints" / "spec.json"
    if spec_path.is_file():
        return read_spec(spec_path)  # a damaged one raises DamagedFile naming it
    if record is not None and "spec" in record:
        return RunSpec.from_dict(record["spec"])
    not_a_run(run_dir)
    raise MissingFile(f"{spec_path} not found: {run_dir} has no trained run here (checkpoints are not committed "
                      "to git); train it with `zoo run` first")


def not_a_run(path: str | Path) -> None:
    """``MissingFile`` when ``path`` is not a run folder at all (missing, or an experiment's results folder:
    it names the runs there), so that the user is not told to train a run that is not one. Any other
    folder passes: the caller names the file of a run it lacks."""
    path = Path(path)
    if not path.exists():
        raise MissingFile(f"{path}: no such folder (give a run folder, e.g. results/smoke/tiny)")
    if (path / "record.json").is_file() or (path / "checkpoints").is_dir():
        return
    runs = sorted(p.parent.name for p in path.glob("*/record.json"))
    if runs:
        raise MissingFile(f"{path}: not a run but a results folder of {len(runs)} run(s); give one of them: "
                          f"{', '.join(str(path / r) for r in runs[:5])}{' ...' if len(runs) > 5 else ''}")
    # any other folder: the caller names the run's file it misses (checkpoints are not committed to git)


def legacy_defaults(run_dir, spec: RunSpec, record: dict | None) -> dict:
    """For a run recorded before records stated ``model_rules``, the option defaults its model had then (the
    class's ``legacy_defaults``); {} for a later run. ``record``: read from ``run_dir`` when None."""
    if record is None:
        path = Path(run_dir) / "record.json"
        try:
            record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        except (OSError, ValueError):
            record = None
    if record is None or "model_rules" in record:
        return {}
    # a run recorded before records stated model_rules: the model declares the defaults it had then
    return dict(getattr(MODELS.get(spec.model), "legacy_defaults", {}))


def _checkpoint_dir(run_dir: Path, record: dict | None) -> Path:
    """``<run>/checkpoints``; for a run taken over from another experiment (``same_as``: the record's
    ``reused_from``), the source run's checkpoints (any here are of an unfinished training of its own)."""
    ck = run_dir / "checkpoints"
    if record is None:
        try:
            record = json.loads((run_dir / "record.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return ck
    src = (record.get("reused_from") or {}).get("run") if isinstance(record, dict) else None
    if src:
        alt = run_dir.parent.parent / src / "checkpoints"  # results/<experiment>/<run>
        if (alt / "vocab.json").is_file():
            return alt
    return ck


def load_trained_run(run_dir: str | Path, checkpoint: str = "best.pt", purpose: str = "this command",
                     record: dict | None = None) -> TrainedRun:
    """A trained run's spec, vocabulary and model with the weights of ``checkpoints/<checkpoint>``.
    ``purpose`` names the command in the message when a file is missing."""
    not_a_run(run_dir)
    from seq2seq_zoo.names import name_problem
    if name_problem(checkpoint):   # a file name in checkpoints/, never a path elsewhere
        raise MissingFile(f"--checkpoint {checkpoint!r}: not a checkpoint name (best.pt, last.pt, averaged.pt)")
    ck = _checkpoint_dir(Path(run_dir), record)
    for f in ("vocab.json", checkpoint):
        if not (ck / f).is_file():
            raise MissingFile(f"{ck / f} not found: {purpose} needs the run's checkpoints, which are not committed "
                              "to git; train the run on this machine first (`zoo run ...`, `--force` to retrain)")
    spec = run_spec(run_dir, record)
    vocab = Vocab.load(ck / "vocab.json")
    model = build_model(spec.model, model_context(len(vocab), spec.data),
                        {**legacy_defaults(run_dir, spec, record), **spec.model_options})
    load_weights(model, load_checkpoint(ck / checkpoint)["model"], ck / checkpoint)
    return TrainedRun(spec, vocab, model.eval(), ck / checkpoint)


class Summarizer:
    """A trained summariser: ``Summarizer.from_run(RUN_DIR)`` (a run folder with its checkpoints) or
    ``Summarizer.from_pretrained(FOLDER)`` (a folder written by ``zoo export``). ``s(text)`` summarises one
    text, ``s.summarize(texts)`` a list in batches, in order."""

    def __init__(self, model, vocab: Vocab, spec: RunSpec):
        self.model, self.vocab, self.spec = model.eval(), vocab, spec
        self.text_cfg = text_config(spec.data)

    @classmethod
    def from_run(cls, run_dir: str | Path, checkpoint: str = "best.pt") -> "Summarizer":
        run = load_trained_run(run_dir, checkpoint, purpose="summarize")
        return cls(run.model, run.vocab, run.spec)

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> "Summarizer":
        """Load a folder written by ``zoo export`` (safetensors weights: nothing is unpickled)."""
        from seq2seq_zoo.exported import load_exported
        model, vocab, spec = load_exported(folder)
        return cls(model, vocab, spec)

    @classmethod
    def load(cls, path: str | Path, checkpoint: str = "best.pt") -> "Summarizer":
        """An exported folder (it has ``config.json``) or a run folder."""
        from seq2seq_zoo.exported import CONFIG_FILE, WEIGHTS_FILE
        if (Path(path) / CONFIG_FILE).is_file() or (Path(path) / WEIGHTS_FILE).is_file():
            return cls.from_pretrained(path)
        return cls.from_run(path, checkpoint)

    def _encode(self, text: str, id_: str = "input") -> Encoded | None:
        toks = tokenize_source(text, self.text_cfg)[: self.spec.data.max_src_len]
        if not toks:
            return None
        src_ext, oovs = self.vocab.encode_ext(toks)
        return Encoded(id_, np.asarray(self.vocab.encode(toks)), np.asarray(src_ext), oovs,
                       np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), [""], text)

    def _decode_cfg(self, beam_size, max_len, int8: bool = False):
        """The run's decode settings with ``beam_size``/``max_len`` changed (and ``decode.precision =
        "int8"`` with ``int8``), checked by the experiment file's rules (types, ranges, at most the longest
        target the model is built for) before any work."""
        from seq2seq_zoo.config.schema import DecodeConfig, decode_too_long, decode_with
        from seq2seq_zoo.config.values import build_section
        from seq2seq_zoo.errors import ConfigError
        over = {k: v for k, v in {"beam_size": beam_size, "max_len": max_len}.items() if v is not None}
        if int8:
            over["precision"] = "int8"
        build_section(DecodeConfig, over, "decode", "<arguments>")
        cfg = decode_with(self.spec.decode, over)
        too_long = decode_too_long(cfg, self.spec.data)
        if too_long:
            raise ConfigError(f"max_len: {too_long}")
        return cfg

    @torch.no_grad()
    def __call__(self, text: str, beam_size: int | None = None, max_len: int | None = None,
                 int8: bool = False) -> str:
        ex = self._encode(text)
        if ex is None:
            raise DataError("the input has no words to summarise (it is empty or only whitespace)")
        ids = generate(self.model, collate([ex]), self._decode_cfg(beam_size, max_len, int8))[0]
        return detokenize(self.vocab.decode(ids, ex.oovs))

    @torch.no_grad()
    def summarize(self, texts, batch_size: int = 16, beam_size: int | None = None, max_len: int | None = None,
                  progress: bool = False, int8: bool = False) -> list[str]:
        """Summaries of ``texts`` (any iterable of strings), in order; an empty text gets "". Texts of
        similar length are batched together (``batch_size`` per batch). ``int8``: the linear layers in
        int8 (``decode.precision = "int8"``)."""
        from tqdm.auto import tqdm
        texts = list(texts)
        cfg = self._decode_cfg(beam_size, max_len, int8)
        encoded = [self._encode(t, str(i)) for i, t in enumerate(texts)]
        order = sorted((i for i, e in enumerate(encoded) if e is not None), key=lambda i: len(encoded[i].src))
        out = [""] * len(texts)
        with tqdm(total=len(order), desc="summarize", unit="text", disable=None if progress else True) as bar:
            for k in range(0, len(order), max(batch_size, 1)):
                idx = order[k: k + batch_size]
                exs = [encoded[i] for i in idx]
                for i, e, ids in zip(idx, exs, generate(self.model, collate(exs), cfg)):
                    out[i] = detokenize(self.vocab.decode(ids, e.oovs))
                bar.update(len(idx))
        return out
