"""Mixed precision: which autocast dtype a run uses, and the autocast context for it. Shared by the
training loop, data-parallel training, decoding and evaluation."""
from __future__ import annotations

import contextlib
import functools

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


@functools.cache   # the CPU does not change; autocast() is entered at every training step
def cpu_bf16_kernels() -> bool:
    """Whether oneDNN has bf16 kernels on this CPU (AVX512-BF16/AMX or AVX512 emulation). Without them
    its LSTM cannot be built for bf16 ("could not create a primitive descriptor"), e.g. on AVX2-only CPUs."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@contextlib.contextmanager
def _onednn_off():
    # not torch.backends.mkldnn.flags(enabled=False): it also resets oneDNN's TF32 setting and warns on CPU
    prev = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = prev


def autocast(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` for ``dtype`` on ``device``; a no-op context for full fp32 (dtype None).

    bf16 on a CPU without oneDNN bf16 kernels (only where asked for: 'auto' picks fp32 there) runs with
    oneDNN off, so that LSTMs take PyTorch's own kernels instead of failing; slow, but it runs."""
    if dtype is None:
        return contextlib.nullcontext()
    if device.type == "cpu" and dtype == torch.bfloat16 and not cpu_bf16_kernels():
        stack = contextlib.ExitStack()
        stack.enter_context(_onednn_off())
        stack.enter_context(torch.autocast(device_type="cpu", dtype=dtype))
        return stack
    return torch.autocast(device_type=device.type, dtype=dtype)
