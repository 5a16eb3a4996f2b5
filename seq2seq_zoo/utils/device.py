"""The device of a run, an evaluation or a bench, and the GPU settings that go with it."""
from __future__ import annotations

import os

import torch


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
    of every length. On an H100 (profiled with py-spy) a DialogSum Transformer with head size 64, which
    cuDNN takes, kept one CPU core busy with 40% of its samples inside this call and the GPU 0-4% busy;
    its epochs fell from 105-113 s to 20-23 s over 12 epochs, as a per-shape cache would fill, while the
    suite's runs with head size 30, which cuDNN does not take, kept a steady epoch time (on H200s).
    ``ZOO_CUDNN_ATTENTION=1`` keeps cuDNN (e.g. for fixed shapes). Returns whether it applied."""
    if os.environ.get("ZOO_CUDNN_ATTENTION", "") == "1":
        return False
    torch.backends.cuda.enable_cudnn_sdp(False)
    return True
