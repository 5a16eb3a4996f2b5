"""Files the suite writes and reads back: atomic writes (a kill never leaves half a file), JSON and JSON
Lines read with a one-line error naming the damaged file and line."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seq2seq_zoo.errors import DamagedFile, WriteFailed

_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename: a kill never leaves half a file.
    A failed write (ENOSPC, EIO, ...) leaves the old file and no temporary file, and raises ``WriteFailed``
    naming ``path``. The temporary name is unique (mkstemp), so two processes writing the same file at
    once (two ``zoo report``s) never share one; the last rename wins and each file is whole."""
    path = Path(path)
    try:
        _atomic_write_bytes(path, data)
    except WriteFailed:
        raise
    except OSError as e:
        raise WriteFailed(path, e) from e


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default) + "\n")


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, torch.Tensor):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_json(path, what: str, fix: str = "delete it and re-run the command that wrote it"):
    """A JSON file the suite wrote; a truncated, empty or hand-edited one raises ``DamagedFile`` naming it
    (and the line of a syntax error)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DamagedFile(f"{path}: damaged {what} (bytes that are not UTF-8 at offset {e.start}); {fix}") from None
    except IsADirectoryError:
        raise DamagedFile(f"{path}: is a folder, expected a {what} file") from None
    if not text.strip():
        raise DamagedFile(f"{path}: empty {what} (a write that never finished?); {fix}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DamagedFile(f"{path}:{e.lineno}: damaged {what} (truncated or edited by hand: {e.msg}, line {e.lineno} "
                          f"column {e.colno}); {fix}") from None


def read_jsonl(path, what: str, required: tuple[str, ...] = (), fix: str = "delete it and re-run the command "
               "that wrote it") -> list[dict]:
    """A JSON Lines file the suite wrote: one object per line, each with the ``required`` keys; a bad line
    raises ``DamagedFile`` naming ``file:line``."""
    path = Path(path)
    rows = []
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise DamagedFile(f"{path}: is a folder, expected a {what} file") from None
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            why = e.msg if isinstance(e, json.JSONDecodeError) else "bytes that are not UTF-8"
            raise DamagedFile(f"{path}:{n}: damaged {what} line (truncated or edited by hand: {why}); {fix}") from None
        if not isinstance(obj, dict):
            raise DamagedFile(f"{path}:{n}: damaged {what} line (a JSON {type(obj).__name__}, expected an object); "
                              f"{fix}")
        missing = [k for k in required if k not in obj]
        if missing:
            raise DamagedFile(f"{path}:{n}: damaged {what} line (no {', '.join(missing)}); {fix}")
        rows.append(obj)
    return rows
