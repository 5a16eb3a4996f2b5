"""Files the suite writes and reads back: atomic writes (a kill never leaves half a file), JSON and JSON
Lines read with a one-line error naming the damaged file and line. Stored numbers must be finite: a
``NaN``/``Infinity`` (not standard JSON; Python's ``json`` reads it by default) is refused on read, naming
the file and line, so it never reaches a table as ``nan``."""
from __future__ import annotations

import contextlib
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
    """``obj`` as standard JSON (a non-finite number is written as null: JSON has no NaN or Infinity, and
    readers such as ``jq`` or a browser refuse them), replacing ``path`` atomically."""
    atomic_write_text(path, dumps_json(obj, indent=2) + "\n")


def dumps_json(obj: Any, indent: int | None = 2, ensure_ascii: bool = False) -> str:
    """``json.dumps`` that writes standard JSON: NaN and +-Infinity become null (the writer says why beside
    the value where a reader needs to know); numpy numbers, paths and tensors as plain values."""
    return json.dumps(finite(obj), indent=indent, ensure_ascii=ensure_ascii, default=_json_default, allow_nan=False)


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, +-Infinity, numpy's too) replaced by None."""
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return finite(obj.tolist())
    return obj


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


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str):
    raise _NonFinite(name)


def _finite_float(text: str) -> float:
    x = float(text)
    if x != x or x in (float("inf"), float("-inf")):   # e.g. 1e999, which float() reads as inf
        raise _NonFinite(text)
    return x


def loads_finite(text: str):
    """``json.loads`` that refuses ``NaN``, ``Infinity``, ``-Infinity`` and numbers too large for a float
    such as ``1e999`` (raises ``_NonFinite``)."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


def _line_of(text: str, name: str) -> int:
    """The 1-based line of the first bare ``name`` (NaN, Infinity, -Infinity) outside strings, best effort."""
    import re
    for n, line in enumerate(text.splitlines(), 1):
        if re.search(rf'(?<![\w"]){re.escape(name.lstrip("-"))}(?![\w"])', re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)):
            return n
    return 1


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
        return loads_finite(text)
    except _NonFinite as e:
        n = _line_of(text, str(e))
        raise DamagedFile(f"{path}:{n}: damaged {what} (a non-finite number, {e}, where JSON allows only finite "
                          f"numbers or null); {fix}") from None
    except json.JSONDecodeError as e:
        raise DamagedFile(f"{path}:{e.lineno}: damaged {what} (truncated or edited by hand: {e.msg}, line {e.lineno} "
                          f"column {e.colno}); {fix}") from None


def read_jsonl(path, what: str, required: tuple[str, ...] = (), fix: str = "delete it and re-run the command "
               "that wrote it", data: bytes | None = None) -> list[dict]:
    """A JSON Lines file the suite wrote: one object per line, each with the ``required`` keys; a bad line
    raises ``DamagedFile`` naming ``file:line``. ``data``: the file's bytes when already read."""
    path = Path(path)
    rows = []
    try:
        raw = path.read_bytes() if data is None else data
    except IsADirectoryError:
        raise DamagedFile(f"{path}: is a folder, expected a {what} file") from None
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            obj = loads_finite(line.decode("utf-8"))
        except _NonFinite as e:
            raise DamagedFile(f"{path}:{n}: damaged {what} line (a non-finite number, {e}, where JSON allows only "
                              f"finite numbers or null); {fix}") from None
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


def run_folder_of(path: str | os.PathLike) -> Path | None:
    """The run folder that ``path`` is or lies in (symbolic links resolved): the nearest folder, ``path``
    itself or above it, holding a ``record.json`` or a ``checkpoints/`` with a run's ``spec.json`` or
    ``vocab.json``; None when there is none."""
    real = Path(path).resolve()
    for d in (real, *real.parents):
        if (d / "record.json").is_file() or (d / "checkpoints" / "spec.json").is_file() \
                or (d / "checkpoints" / "vocab.json").is_file():
            return d
    return None


def check_output(out: str | os.PathLike, inputs=(), what: str = "--output") -> Path:
    """The guard of a file or folder a command writes at a path the user chose (``zoo summarize --output``,
    ``zoo export OUT``): after resolving symbolic links, it may not be one of the command's ``inputs`` nor
    lie inside an input folder, and it may not be, or lie inside, a run folder (whose files only ``zoo run``
    and ``zoo eval`` write). Refused with ``UnsafePath`` before anything is read or written; returns ``out``."""
    from seq2seq_zoo.errors import UnsafePath
    out = Path(out)
    real = out.resolve()
    for i in inputs:
        if i is None or str(i) == "-":
            continue
        real_in = Path(i).resolve()
        if real == real_in:
            raise UnsafePath(f"{out}: {what} is also an input of this command ({i}); writing it would replace what "
                             "is being read: choose another path")
        if real_in.is_dir() and real.is_relative_to(real_in):
            raise UnsafePath(f"{out}: {what} lies inside {i}, an input of this command; choose a path outside it")
    run = run_folder_of(out)
    if run is not None:
        raise UnsafePath(f"{out}: {what} lies inside the run folder {run} (a run's files are written by `zoo run` "
                         "and `zoo eval` only); choose a path outside it")
    return out


def _fsync_folder(folder: Path) -> None:
    """Every file of ``folder`` and the folder itself flushed to disk, so that a power loss after the swap
    cannot leave the new names with empty contents."""
    for p in folder.iterdir():
        if p.is_file() and not p.is_symlink():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_RENAME_EXCHANGE = 2   # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 with RENAME_EXCHANGE); False where the system or
    the filesystem does not offer it."""
    import ctypes
    import sys
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    import errno
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def swap_in(stage: Path, target: Path) -> None:
    """Put the folder ``stage`` at ``target`` in one step; the folder that was at ``target`` (if any) ends at
    ``stage`` (the caller removes it). A new ``target`` is a plain rename; an existing one is exchanged
    atomically (renameat2), or, where the filesystem cannot, renamed aside first and the new one renamed in
    (a kill between the two leaves the old folder whole, as ``STAGE.old``, beside the stage)."""
    try:
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(stage, target)
            stage.mkdir()           # so that the caller's cleanup has its folder, now empty
            return
        if _exchange(stage, target):
            return
        aside = stage.with_suffix(".old")
        os.rename(target, aside)
        os.rename(stage, target)
        os.rename(aside, stage)
    except OSError as e:
        raise WriteFailed(target, e) from e


def new_stage(target: str | os.PathLike, what: str, stage_dir: str | os.PathLike | None = None) -> Path:
    """A new hidden folder ``.TARGET.WHAT-*.staging`` in ``stage_dir`` (default: beside ``target``; on the same
    filesystem) to write a folder's files into before ``commit_stage`` swaps them in; stages of the same
    target left by a kill are removed first."""
    import shutil
    target = Path(target)
    parent = Path(stage_dir) if stage_dir is not None else target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for old in parent.glob(f".{target.name}.{what}-*.staging"):
            shutil.rmtree(old, ignore_errors=True)
        stage = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.{what}-", suffix=".staging"))
        os.chmod(stage, 0o777 & ~_UMASK)
    except OSError as e:
        raise WriteFailed(target, e) from e
    return stage


def commit_stage(stage: Path, target: str | os.PathLike) -> None:
    """The files of ``stage`` flushed to disk, the folder swapped in at ``target`` whole (``swap_in``) and the
    old folder removed: a kill at any moment leaves the old folder or the new one."""
    import shutil
    target = Path(target)
    try:
        _fsync_folder(stage)
    except OSError as e:
        raise WriteFailed(target, e) from e
    swap_in(stage, target)
    shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike, what: str, stage_dir: str | os.PathLike | None = None):
    """``with staged_folder(target, "export") as stage:`` write every file of a folder into ``stage``
    (``new_stage``); when the block ends the folder is swapped in whole (``commit_stage``). An exception or
    a signal in the block leaves ``target`` as it was and removes the stage."""
    import shutil
    stage = new_stage(target, what, stage_dir)
    try:
        yield stage
        commit_stage(stage, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
