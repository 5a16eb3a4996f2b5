"""What the numbers were measured on, and whether bf16 pays on this CPU."""
from __future__ import annotations

import functools
import os
import platform
from typing import Any

import torch


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


def hardware_str(hw: dict[str, Any]) -> str:
    if hw.get("gpu"):
        return f"{hw['gpu']} (torch {hw.get('torch')})"
    return f"{hw.get('cpu')}, {hw.get('cpu_threads')} threads (torch {hw.get('torch')})"


@functools.lru_cache(maxsize=None)
def cpu_has_fast_bf16() -> bool:
    """True where bf16 matmuls are native (AMX / AVX512-BF16): then bf16 autocast pays on CPU."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
        return "amx_bf16" in flags or "avx512_bf16" in flags
    except OSError:
        return False
