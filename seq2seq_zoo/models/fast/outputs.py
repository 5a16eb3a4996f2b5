"""Model outputs whose log-probabilities are made only when read, so that the cross-entropy objective
takes the fused losses of ``models.losses`` and the (B, T, V) log-probabilities are never held."""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from seq2seq_zoo.models.base import StepOutput
from seq2seq_zoo.models.copying import copy_mixture, upcast
from seq2seq_zoo.models.fast.kernels import log_softmax_fp32
from seq2seq_zoo.models.losses import copy_losses, fused_token_losses


class DeferredOutput(StepOutput):
    """A StepOutput whose ``log_probs`` are made only when read, in the precision and grad mode of the
    forward pass that made it; the cross-entropy objective asks it for ``token_losses`` instead, which a
    subclass fuses with the output layer (``_losses``) so that the (B, T, V) log-probabilities are never
    held. Subclasses: ``LazyOutput`` (one output layer), ``CopyOutput`` (the copy mixture)."""

    def __init__(self, like: torch.Tensor, attention: dict, aux_losses: dict | None = None,
                 extras: dict | None = None):
        dev = like.device.type
        self._autocast = (dev, torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        self._grad = torch.is_grad_enabled()
        self._log_probs = None
        super().__init__(log_probs=None, attention=attention, aux_losses=aux_losses or {}, extras=extras or {})

    def _as_in_forward(self):
        dev, enabled, dtype = self._autocast
        stack = contextlib.ExitStack()
        stack.enter_context(torch.set_grad_enabled(self._grad))
        stack.enter_context(torch.autocast(dev, dtype=dtype, enabled=enabled))
        return stack

    def _make_log_probs(self) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _losses(self, target, label_smoothing, smooth_width):  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def log_probs(self) -> torch.Tensor:
        if self._log_probs is None:
            with self._as_in_forward():
                self._log_probs = self._make_log_probs()
        return self._log_probs

    @log_probs.setter
    def log_probs(self, value):
        if value is not None:
            self._log_probs = value

    def token_losses(self, target: torch.Tensor, label_smoothing: float = 0.0, smooth_width: int | None = None):
        """(sum of training loss, sum of NLL, tokens), as ``losses.token_losses(self.log_probs, ...)``."""
        with self._as_in_forward():
            return self._losses(target, label_smoothing, smooth_width)


class LazyOutput(DeferredOutput):
    """A StepOutput whose ``log_probs`` are computed only when read (in the precision and grad mode of
    the forward pass). The cross-entropy objective asks it for ``token_losses`` instead, which fuses
    the output projection, log-softmax and label-smoothed loss and never holds (B, T, V) log-probs."""

    def __init__(self, hidden: torch.Tensor, generator: nn.Linear, attention: dict, aux_losses: dict | None = None):
        self._hidden, self._generator = hidden, generator
        super().__init__(hidden, attention, aux_losses)

    def _make_log_probs(self):
        return log_softmax_fp32(self._generator(self._hidden))

    def _losses(self, target, label_smoothing, smooth_width):
        return fused_token_losses(self._hidden, self._generator.weight, self._generator.bias, target,
                                  label_smoothing, smooth_width)


class CopyOutput(DeferredOutput):
    """A copy model's output whose (B, T, V + n_oov) log-probabilities are made only when read (the
    unfused ``copy_mixture``, in the forward's precision and grad mode); the cross-entropy objective asks
    for ``token_losses`` instead, which ``copy_losses`` takes without them."""

    def __init__(self, h, generator, z, a, src_ext, n_oov, src_same, src_first, attention, aux_losses=None):
        self._args = (h, generator, z, a, src_ext, int(n_oov), src_same, src_first)
        super().__init__(h, attention, aux_losses, extras={"p_gen": torch.sigmoid(z)})

    def _make_log_probs(self):
        h, generator, z, a, src_ext, n_oov, same, first = self._args
        return copy_mixture(torch.log_softmax(upcast(generator(h)), -1), z, a, src_ext, n_oov, same, first)

    def _losses(self, target, label_smoothing, smooth_width):
        return copy_losses(*self._args, target, label_smoothing, smooth_width)
