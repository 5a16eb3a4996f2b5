"""Checkpoints: saved atomically, loaded with ``weights_only=True`` (tensors and plain data only)."""
from __future__ import annotations

import os
from typing import Any

import torch

from seq2seq_zoo.errors import UnsafeCheckpoint
from seq2seq_zoo.utils.io import atomic_write_bytes


def atomic_torch_save(obj: Any, path) -> None:
    import io
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


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
    except Exception as e:  # noqa: BLE001 - a foreign file (a text file, a tar) fails in torch's reader with
        # anything from IndexError to KeyError; whichever it is, the file is not a checkpoint
        first = (str(e).strip().splitlines() or [""])[0].split(". ")[0][:200]
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            first = "the file is empty"
        elif os.path.isfile(path) and not _looks_like_zip(path):
            raise UnsafeCheckpoint(f"{path}: not a checkpoint (torch.save writes a zip archive; this file is not "
                                   f"one: {type(e).__name__}); name a checkpoint the suite wrote") from None
        raise UnsafeCheckpoint(f"{path}: not a readable checkpoint (truncated or damaged? {type(e).__name__}: "
                               f"{first}); delete it and "
                               "re-run (without --resume if it was last.pt)") from None


def _looks_like_zip(path) -> bool:
    """Whether ``path`` starts as a zip archive does (a whole or a cut-short torch checkpoint)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:
        return False


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
