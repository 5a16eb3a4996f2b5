"""Small shared helpers: atomic writes, seeding, hardware description."""
from __future__ import annotations

import functools
import json
import os
import platform
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seq2seq_zoo.errors import UnsafeCheckpoint


_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename: a kill never leaves half a file."""
    path = Path(path)
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


def atomic_torch_save(obj: Any, path) -> None:
    import io
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def hardware() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "cpu_threads": torch.get_num_threads(),
        "logical_cpus": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def hardware_str(hw: dict[str, Any]) -> str:
    if hw.get("gpu"):
        return f"{hw['gpu']} (torch {hw.get('torch')})"
    return f"{hw.get('cpu')}, {hw.get('cpu_threads')} threads (torch {hw.get('torch')})"


def pick_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@functools.lru_cache(maxsize=None)
def cpu_has_fast_bf16() -> bool:
    """True where bf16 matmuls are native (AMX / AVX512-BF16): then bf16 autocast pays on CPU."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
        return "amx_bf16" in flags or "avx512_bf16" in flags
    except OSError:
        return False


def load_checkpoint(path, map_location="cpu") -> dict:
    """Load a checkpoint with ``weights_only=True``: tensors and plain containers only. Anything that
    would need arbitrary code to unpickle is refused with a clear message, never executed."""
    import pickle
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise UnsafeCheckpoint(
            f"{path}: refused to load: the file holds objects other than tensors and plain data (a pickled "
            f"code payload?). Only load checkpoints written by seq2seq-zoo from a source you trust. ({first})"
        ) from None
    except (RuntimeError, EOFError, OSError) as e:
        raise UnsafeCheckpoint(f"{path}: not a readable checkpoint ({type(e).__name__}: {e}); delete it and "
                               "re-run (without --resume if it was last.pt)") from None
