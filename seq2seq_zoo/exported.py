"""Reads an exported model folder back; not to be confused with export.py (``zoo export``), which writes it.

An exported model folder (what ``zoo export`` writes, export.py) read back: its file names and format,
and ``load_exported``, which ``Summarizer.from_pretrained`` calls. Nothing is unpickled.

A folder may come from anywhere, so it is checked whole before any tensor is allocated, and every
problem is one ``BadExport`` naming the file: the three files are there and of bounded size;
``config.json`` is an object with an integer ``format`` this version reads and a valid run spec (every
setting in its range); ``vocab.json`` is a list of distinct words starting with the special tokens; the
safetensors header of ``model.safetensors`` (read by hand: a length and a JSON table, so a pickle or a
file cut short is refused before safetensors maps it) lists tensors whose byte ranges lie inside the file;
and the model the config describes, built on the ``meta`` device (shapes only, no memory), has exactly
those tensors with those shapes and dtypes. Only then is the model built and the weights loaded, so
what is allocated is bounded by the size of the weights file.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from seq2seq_zoo.errors import BadExport, UserError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCAB_FILE = "vocab.json"
CARD_FILE = "README.md"
FILES = (WEIGHTS_FILE, CONFIG_FILE, VOCAB_FILE, CARD_FILE)   # everything `zoo export` writes
FORMAT = 1

MAX_CONFIG_BYTES = 1 << 20          # a config is a few kB
MAX_VOCAB_BYTES = 512 << 20         # 10 million words of up to ~50 bytes
MAX_VOCAB_WORDS = 10_000_000
MAX_HEADER_BYTES = 100 << 20        # safetensors' own limit
MAX_EXTRA_BYTES = 512 << 20         # buffers that are not weights (positional tables) beyond the file's size
_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                "BOOL": 1}
_TORCH_DTYPE = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
                "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


def _file(folder: Path, name: str, limit: int | None) -> Path:
    path = folder / name
    if not path.is_file():
        raise BadExport(f"{path} not found: {folder} is not a folder written by `zoo export` (it needs "
                        f"{WEIGHTS_FILE}, {CONFIG_FILE} and {VOCAB_FILE})")
    if limit is not None and path.stat().st_size > limit:
        raise BadExport(f"{path}: {path.stat().st_size:,} bytes, more than a {name} of an export can be "
                        f"({limit:,}); not an export of seq2seq-zoo")
    return path


def _json(path: Path, what: str):
    from seq2seq_zoo.utils.io import read_json
    try:
        return read_json(path, what, "export the run again (`zoo export RUN FOLDER --force`)")
    except UserError as e:
        raise BadExport(str(e)) from None
    except OSError as e:
        raise BadExport(f"{path}: cannot be read ({e.strerror or e})") from None


def read_config(folder: str | Path):
    """(config dict, RunSpec) of an exported folder, checked: format, types, every setting in range."""
    from seq2seq_zoo.config import RunSpec
    folder = Path(folder)
    path = _file(folder, CONFIG_FILE, MAX_CONFIG_BYTES)
    config = _json(path, "export config")
    if not isinstance(config, dict):
        raise BadExport(f"{path}: a JSON {type(config).__name__}, expected an object with format and spec")
    fmt = config.get("format")
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1:
        raise BadExport(f"{path}: 'format' is {fmt!r}, expected the export format (a positive integer); not a "
                        "folder written by `zoo export`")
    if fmt > FORMAT:
        raise BadExport(f"{path}: exported by a newer seq2seq-zoo (format {fmt}, this one reads {FORMAT}); upgrade "
                        "to load it")
    spec_d = config.get("spec")
    if not isinstance(spec_d, dict) or not isinstance(spec_d.get("model_options", {}), dict):
        raise BadExport(f"{path}: 'spec' is not an object of run settings (with model_options an object)")
    try:
        spec = RunSpec.from_dict(spec_d)
    except UserError as e:
        raise BadExport(f"{path}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BadExport(f"{path}: not a readable export config ({type(e).__name__}: {e})") from None
    from seq2seq_zoo.names import name_problem
    if not isinstance(spec.model, str) or name_problem(spec.model):
        raise BadExport(f"{path}: 'spec.model' is {spec.model!r}, not a model name")
    return config, spec


def read_vocab(folder: str | Path):
    """The vocabulary of an exported folder: a list of distinct words that starts with the special tokens."""
    from seq2seq_zoo.data.vocab import Vocab
    path = _file(Path(folder), VOCAB_FILE, MAX_VOCAB_BYTES)
    _json(path, "vocabulary")      # damaged JSON named with its line; the shape is checked below
    try:
        vocab = Vocab.load(path)
    except UserError as e:
        raise BadExport(str(e)) from None
    if len(vocab.itos) > MAX_VOCAB_WORDS:
        raise BadExport(f"{path}: {len(vocab.itos):,} words, more than {MAX_VOCAB_WORDS:,}")
    if len(vocab.stoi) != len(vocab.itos):
        seen: set[str] = set()
        dup = next(w for w in vocab.itos if w in seen or seen.add(w))
        raise BadExport(f"{path}: the word {dup!r} appears twice; each word must have one id (export the run "
                        "again)")
    return vocab


def safetensors_header(path: str | Path) -> dict[str, dict]:
    """{tensor name: {"dtype", "shape", "data_offsets"}} of a safetensors file, checked against the file's
    size (every byte range inside the data, of the size its shape and dtype need); reads the header only."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise BadExport(f"{path}: {size} bytes, too short for a safetensors file (cut short?)")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise BadExport(f"{path}: not a safetensors file (its first 8 bytes give a header of {n:,} bytes in a "
                            f"file of {size:,}: a pickle, another format, or a file cut short)")
        raw = f.read(n)
    try:
        from seq2seq_zoo.utils.io import loads_finite
        header = loads_finite(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadExport(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise BadExport(f"{path}: not a safetensors file (its header is not a JSON object)")
    data = size - 8 - n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        ok = (isinstance(t, dict) and t.get("dtype") in _DTYPE_BYTES and isinstance(t.get("shape"), list)
              and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in t["shape"])
              and isinstance(t.get("data_offsets"), list) and len(t["data_offsets"]) == 2
              and all(isinstance(o, int) and not isinstance(o, bool) for o in t["data_offsets"]))
        if not ok:
            raise BadExport(f"{path}: tensor {name!r} is described wrongly in the header (dtype, shape, offsets)")
        lo, hi = t["data_offsets"]
        need = math.prod(t["shape"]) * _DTYPE_BYTES[t["dtype"]]
        if not 0 <= lo <= hi <= data:
            raise BadExport(f"{path}: tensor {name!r} lies at bytes {lo}-{hi} of {data:,} data bytes: the file is "
                            "cut short or damaged; export the run again")
        if hi - lo != need:
            raise BadExport(f"{path}: tensor {name!r} has {hi - lo:,} bytes, its shape {tuple(t['shape'])} "
                            f"{t['dtype']} needs {need:,}; damaged")
        out[name] = t
    return out


def _expected(spec, n_words: int, options: dict, where: Path):
    """{name: (shape, dtype code)} of the model's state and the bytes of every tensor it holds, from the
    model built on the meta device (no memory)."""
    from seq2seq_zoo.models.base import build_on_meta, model_context
    try:
        model = build_on_meta(spec.model, model_context(n_words, spec.data), options)
    except UserError as e:
        raise BadExport(f"{where}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a model option of the wrong type fails anywhere in a constructor
        raise BadExport(f"{where}: the model it describes cannot be built ({type(e).__name__}: "
                        f"{(str(e).splitlines() or [''])[0][:200]})") from None
    state, tied = {}, {}
    for k, v in model.state_dict(keep_vars=True).items():   # tied weights: one tensor under several names
        state[k] = (tuple(v.shape), _TORCH_DTYPE.get(str(v.dtype).removeprefix("torch."), "?"))
        tied.setdefault(id(v), []).append(k)
    total = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    return state, list(tied.values()), total


def check_exported(folder: str | Path):
    """Every check of the module docstring, nothing allocated: -> (config, spec, vocab, model options)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BadExport(f"{folder}: not a folder (a folder written by `zoo export` was expected)")
    weights = _file(folder, WEIGHTS_FILE, None)
    config, spec = read_config(folder)
    vocab = read_vocab(folder)
    header = safetensors_header(weights)
    options = dict(spec.model_options)     # resolved by `zoo export`, legacy defaults included
    state, groups, total = _expected(spec, len(vocab), options, folder / CONFIG_FILE)
    # safetensors stores a tied tensor once, under one of its names
    missing = [names[0] for names in groups if not any(k in header for k in names)]
    extra = [k for k in header if k not in state]
    if missing or extra:
        raise BadExport(f"{weights}: does not fit the model in {CONFIG_FILE} (missing {', '.join(missing[:3]) or 'none'}"
                        f"; unexpected {', '.join(extra[:3]) or 'none'})")
    for k, (shape, dtype) in state.items():
        if k not in header:
            continue
        got = (tuple(header[k]["shape"]), header[k]["dtype"])
        if got != (shape, dtype):
            hint = (f"; {VOCAB_FILE} holds {len(vocab):,} words" if len(vocab) in shape or len(vocab) in got[0]
                    else "")
            raise BadExport(f"{weights}: tensor {k} is {got[0]} {got[1]}, the model in {CONFIG_FILE} needs "
                            f"{shape} {dtype}{hint}; the files are not of one export")
    if total > weights.stat().st_size + MAX_EXTRA_BYTES:
        raise BadExport(f"{folder / CONFIG_FILE}: the model it describes would take {total:,} bytes, far more than "
                        f"its weights file ({weights.stat().st_size:,}); refused")
    return config, spec, vocab, options


def load_exported(folder: str | Path):
    """(model in eval mode on the CPU, vocabulary, RunSpec) of an exported folder; ``BadExport`` (one line,
    naming the file) for anything that is not a whole, consistent export, before any tensor is allocated."""
    from safetensors.torch import load_model

    from seq2seq_zoo.models.base import build_model, model_context
    folder = Path(folder)
    _, spec, vocab, options = check_exported(folder)
    model = build_model(spec.model, model_context(len(vocab), spec.data), options)
    try:
        missing, unexpected = load_model(model, str(folder / WEIGHTS_FILE), strict=False)
    except Exception as e:  # noqa: BLE001 - the file changed since it was checked, or safetensors refused it
        raise BadExport(f"{folder / WEIGHTS_FILE}: not readable as safetensors ({type(e).__name__}: "
                        f"{(str(e).splitlines() or [''])[0][:200]})") from None
    if missing or unexpected:
        raise BadExport(f"{folder / WEIGHTS_FILE}: does not fit the model in {CONFIG_FILE} (missing "
                        f"{', '.join(missing[:3]) or 'none'}; unexpected {', '.join(unexpected[:3]) or 'none'})")
    return model.eval(), vocab, spec


def is_export(folder: str | Path) -> bool:
    """Whether ``folder`` holds an earlier export and nothing else: only the files `zoo export` writes, and a
    config.json that reads as one (an integer format and the run it came from)."""
    folder = Path(folder)
    names = {p.name for p in folder.iterdir()}
    if not names <= set(FILES) or CONFIG_FILE not in names:
        return False
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(config, dict) and isinstance(config.get("format"), int)
            and not isinstance(config.get("format"), bool) and "source_run" in config and "spec" in config)
