"""One seed for Python, numpy and torch; a list of seeds written short."""
from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def seed_span(seeds: list[int]) -> str:
    """1, 2, 3, 5 -> '1-3, 5'."""
    parts, seeds = [], sorted(seeds)
    start = prev = seeds[0]
    for s in seeds[1:] + [None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = s
    return ", ".join(parts)
