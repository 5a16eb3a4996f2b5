"""Small shared helpers: atomic writes, seeding, hardware description."""
from __future__ import annotations

import functools
import json
import os
import platform
import random
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seq2seq_zoo.errors import DamagedFile, UnsafeCheckpoint, WriteFailed


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
        info["cudnn_attention"] = torch.backends.cuda.cudnn_sdp_enabled()
    return info


def code_version(package_dir: str | Path | None = None) -> dict[str, Any]:
    """Which code produced a result: the git commit of the checkout the package runs from and whether
    its tracked files differ from that commit (``dirty``); ``commit`` None outside a git checkout (an
    installed wheel) or without git. Runs differ by float rounding when a kernel changes between
    commits (README: Recurrent models: ``impl``), so records keep it."""
    root = Path(package_dir) if package_dir else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=20)
        if sha.returncode != 0:
            return {"commit": None, "dirty": None}
        st = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "."],
                            capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": sha.stdout.strip(), "dirty": bool(st.stdout.strip()) if st.returncode == 0 else None}


@functools.cache
def process_code_version() -> dict[str, Any]:
    """``code_version()`` of the code this process imported, taken once, at the first call (``zoo run``
    makes it at its start): a `zoo run` that trains several runs keeps the code it imported while the
    checkout moves on (a commit, a `git pull`), so taking the commit again at each run's start named code
    the run did not use (session #20: a run started after two commits recorded the newer one)."""
    return code_version()


def hardware_str(hw: dict[str, Any]) -> str:
    if hw.get("gpu"):
        return f"{hw['gpu']} (torch {hw.get('torch')})"
    return f"{hw.get('cpu')}, {hw.get('cpu_threads')} threads (torch {hw.get('torch')})"


def pick_device(name: str = "auto") -> torch.device:
    """The device of a run, an evaluation or a bench ("auto": the GPU if there is one). On a GPU it also
    takes cuDNN's attention kernels out of use (``no_cudnn_attention``)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else torch.device(name)
    if device.type == "cuda":
        no_cudnn_attention()
    return device


def no_cudnn_attention() -> bool:
    """Take cuDNN's kernels out of ``F.scaled_dot_product_attention``'s choice (flash, memory-efficient and
    math stay), process-wide; ``pick_device`` calls it for a GPU. cuDNN builds an execution graph for each
    new shape of q, k and v (several hundred ms of CPU, cached per shape), and training batches sentences
    of every length. On an H100 (session #17, py-spy) a DialogSum Transformer with head size 64, which
    cuDNN takes, kept one CPU core busy with 40% of its samples inside this call and the GPU 0-4% busy;
    its epochs fell from 105-113 s to 20-23 s over 12 epochs, as a per-shape cache would fill, while the
    suite's runs with head size 30, which cuDNN does not take, kept a steady epoch time (on H200s).
    ``ZOO_CUDNN_ATTENTION=1`` keeps cuDNN (e.g. for fixed shapes). Returns whether it applied."""
    if os.environ.get("ZOO_CUDNN_ATTENTION", "") == "1":
        return False
    torch.backends.cuda.enable_cudnn_sdp(False)
    return True


@functools.lru_cache(maxsize=None)
def cpu_has_fast_bf16() -> bool:
    """True where bf16 matmuls are native (AMX / AVX512-BF16): then bf16 autocast pays on CPU."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
        return "amx_bf16" in flags or "avx512_bf16" in flags
    except OSError:
        return False


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


def load_checkpoint(path, map_location="cpu", required: tuple[str, ...] = ("model",)) -> dict:
    """Load a checkpoint with ``weights_only=True``: tensors and plain containers only. Anything that
    would need arbitrary code to unpickle is refused with a clear message, never executed; a truncated,
    empty or foreign file, or one without the ``required`` entries, is refused as unreadable."""
    import pickle
    try:
        ck = torch.load(path, map_location=map_location, weights_only=True)
        if not isinstance(ck, dict) or any(k not in ck for k in required):
            have = sorted(map(str, ck))[:6] if isinstance(ck, dict) else type(ck).__name__
            raise UnsafeCheckpoint(f"{path}: not a seq2seq-zoo checkpoint (needs {', '.join(required)}; has {have}); "
                                   "delete it and re-run (without --resume if it was last.pt)")
        return ck
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise UnsafeCheckpoint(
            f"{path}: refused to load: the file holds objects other than tensors and plain data (a pickled "
            f"code payload?). Only load checkpoints written by seq2seq-zoo from a source you trust. ({first})"
        ) from None
    except IsADirectoryError:
        raise UnsafeCheckpoint(f"{path}: is a folder, expected a checkpoint file") from None
    except UnsafeCheckpoint:
        raise
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        first = (str(e).strip().splitlines() or [""])[0].split(". ")[0]
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            first = "the file is empty"
        raise UnsafeCheckpoint(f"{path}: not a readable checkpoint (truncated or damaged? {type(e).__name__}: "
                               f"{first}); delete it and "
                               "re-run (without --resume if it was last.pt)") from None


def load_weights(model, state, path) -> None:
    """``model.load_state_dict(state)``; weights that do not fit the model (a checkpoint edited by hand, or
    from another run than its spec.json) raise ``UnsafeCheckpoint`` naming the file."""
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as e:
        first = str(e).strip().splitlines()
        raise UnsafeCheckpoint(f"{path}: the weights do not fit the run's model ({first[0] if first else type(e).__name__}"
                               f"{' ...' if len(first) > 1 else ''}); delete it and re-run (without --resume if it "
                               "was last.pt)") from None
