"""One seed for Python, numpy and torch; a list of seeds written short."""
from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def seed_span(seeds: list[int], word: bool = False) -> str:
    """1, 2, 3, 5 -> '1-3, 5'; with ``word``, 'seeds 1-3, 5' (and 'seed 4' for one seed)."""
    parts, seeds = [], sorted(seeds)
    start = prev = seeds[0]
    for s in seeds[1:] + [None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = s
    text = ", ".join(parts)
    return (f"seed {text}" if len(seeds) == 1 else f"seeds {text}") if word else text
