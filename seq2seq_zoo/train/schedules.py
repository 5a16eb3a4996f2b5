"""Learning-rate schedules as pure functions of the step (annotated-transformer style).

Each registered schedule is ``f(step, **cfg) -> learning rate``, step counting optimizer updates from 1.
"""
from __future__ import annotations

from seq2seq_zoo.registry import register_schedule


def rate(step: int, d_model: int, factor: float = 1.0, warmup: int = 4000) -> float:
    """Noam (eq. 3 of Vaswani et al.): lrate = factor * d^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@register_schedule("noam")
def noam(step: int, *, d_model: int, lr_factor: float = 1.0, warmup: int = 4000, **_) -> float:
    """Linear warm-up then inverse square root decay (Vaswani et al. 2017, eq. 3)."""
    return rate(step, d_model, lr_factor, warmup)


@register_schedule("constant")
def constant(step: int, *, lr: float, **_) -> float:
    """A constant learning rate (Adam lr 1e-3 in the seed paper)."""
    return lr


@register_schedule("warmup_constant")
def warmup_constant(step: int, *, lr: float, warmup: int = 4000, **_) -> float:
    """Linear warm-up to ``lr`` over ``warmup`` steps, then constant."""
    return lr * min(1.0, max(step, 1) / max(warmup, 1))
