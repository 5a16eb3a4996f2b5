"""Mixed precision: which autocast dtype a run uses, and the autocast context for it. Shared by the
training loop, data-parallel training, decoding and evaluation."""
from __future__ import annotations

import contextlib

import torch

from seq2seq_zoo.utils import cpu_has_fast_bf16


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """None = full fp32. 'auto' picks bf16 where the hardware runs it fast (AMX CPUs, Ampere+ GPUs)."""
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        return torch.float16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_has_fast_bf16() else None


def autocast(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` for ``dtype`` on ``device``; a no-op context for full fp32 (dtype None)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
