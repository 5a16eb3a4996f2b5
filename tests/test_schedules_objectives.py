"""Noam and the other LR schedules; the label-smoothed token loss."""
from __future__ import annotations

import math

import pytest
import torch

from seq2seq_zoo.config import TrainConfig
from seq2seq_zoo.data.vocab import PAD_ID, UNK_ID
from seq2seq_zoo.train.loop import lr_at
from seq2seq_zoo.train.objectives import targets_for, token_losses
from seq2seq_zoo.train.schedules import constant, noam, rate, warmup_constant


# ------------------------------------------------------------------------------------------------ noam
def test_noam_hand_computed_values():
    # lrate = d^-0.5 * min(step^-0.5, step * warmup^-1.5), d = 512, warmup = 4000
    # 512^-0.5 = 0.04419417;  4000^-1.5 = 3.95285e-6;  4000^-0.5 = 0.01581139;  16000^-0.5 = 0.00790569
    assert rate(1, 512, 1.0, 4000) == pytest.approx(0.04419417 * 3.95285e-6, rel=1e-5)   # 1.7469e-7
    assert rate(4000, 512, 1.0, 4000) == pytest.approx(6.98771e-4, rel=1e-5)
    assert rate(16000, 512, 1.0, 4000) == pytest.approx(3.49386e-4, rel=1e-5)
    assert rate(16000, 512) == pytest.approx(rate(4000, 512) / 2, rel=1e-12)  # 1/sqrt(4) after the peak
    assert rate(2000, 512) == pytest.approx(rate(4000, 512) / 2, rel=1e-12)   # linear warm-up
    assert rate(4000, 512, factor=2.0) == pytest.approx(2 * 6.98771e-4, rel=1e-5)


def test_noam_peaks_at_warmup():
    vals = [rate(s, 300, 1.0, 100) for s in range(1, 1000)]
    assert max(range(len(vals)), key=vals.__getitem__) + 1 == 100
    assert all(a < b for a, b in zip(vals[:99], vals[1:100]))      # increasing up to the peak
    assert all(a > b for a, b in zip(vals[99:], vals[100:]))      # decreasing after


def test_registered_noam_and_lr_at():
    assert noam(4000, d_model=512, lr_factor=1.0, warmup=4000) == pytest.approx(512 ** -0.5 * 4000 ** -0.5)
    cfg = TrainConfig(schedule="noam", warmup=10, lr_factor=2.0)
    assert lr_at(cfg, 10, 64) == pytest.approx(2.0 * 64 ** -0.5 * 10 ** -0.5)
    assert lr_at(cfg, 40, 64) == pytest.approx(2.0 * 64 ** -0.5 * 40 ** -0.5)


def test_constant_and_warmup_constant():
    assert constant(1, lr=3e-4) == constant(10 ** 6, lr=3e-4) == 3e-4
    assert warmup_constant(1, lr=1e-3, warmup=10) == pytest.approx(1e-4)
    assert warmup_constant(5, lr=1e-3, warmup=10) == pytest.approx(5e-4)
    assert warmup_constant(10, lr=1e-3, warmup=10) == pytest.approx(1e-3)
    assert warmup_constant(500, lr=1e-3, warmup=10) == pytest.approx(1e-3)


# ------------------------------------------------------------------------------------------------ loss
def _lp():
    """Two examples, three positions, four classes; probabilities chosen for easy logs."""
    p = torch.tensor([
        [[0.5, 0.25, 0.125, 0.125], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]],
        [[0.7, 0.1, 0.1, 0.1], [0.4, 0.3, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]],
    ])
    return p.log()


def test_token_loss_without_smoothing():
    lp = _lp()
    target = torch.tensor([[1, 3, 0], [2, 0, 0]])  # 0 = padding
    loss, nll, n = token_losses(lp, target)
    expected = -(math.log(0.25) + math.log(0.4) + math.log(0.1))
    assert n == 3
    assert float(nll) == pytest.approx(expected, rel=1e-6)
    assert float(loss) == pytest.approx(expected, rel=1e-6)


def test_label_smoothed_loss_by_hand():
    lp = _lp()
    target = torch.tensor([[1, 3, 0], [2, 0, 0]])
    eps = 0.1
    rows = [([0.5, 0.25, 0.125, 0.125], 1), ([0.1, 0.2, 0.3, 0.4], 3), ([0.7, 0.1, 0.1, 0.1], 2)]
    expected = 0.0
    for probs, y in rows:
        nll = -math.log(probs[y])
        uniform = -sum(math.log(q) for q in probs) / 4
        expected += (1 - eps) * nll + eps * uniform
    loss, nll, n = token_losses(lp, target, label_smoothing=eps)
    assert n == 3
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(nll) == pytest.approx(-(math.log(0.25) + math.log(0.4) + math.log(0.1)), rel=1e-6)
    # smoothing over the first 2 columns only (the base vocabulary of a copy model)
    expected2 = sum((1 - eps) * -math.log(p[y]) + eps * -(math.log(p[0]) + math.log(p[1])) / 2 for p, y in rows)
    loss2, _, _ = token_losses(lp, target, label_smoothing=eps, smooth_width=2)
    assert float(loss2) == pytest.approx(expected2, rel=1e-6)


def test_extended_targets_beyond_output_width_become_unk():
    lp = _lp()
    target = torch.tensor([[7, 4, 0], [5, 2, 0]])  # 4, 5, 7 do not exist in a 4-wide output
    assert targets_for(lp, target).tolist() == [[UNK_ID, UNK_ID, PAD_ID], [UNK_ID, 2, PAD_ID]]
    _, nll, n = token_losses(lp, target)
    assert n == 4
    expected = -(math.log(0.25) + math.log(0.2) + math.log(0.1) + math.log(0.2))
    assert float(nll) == pytest.approx(expected, rel=1e-6)


def test_loss_gradient_only_flows_from_real_tokens():
    logits = torch.randn(1, 3, 5, requires_grad=True)
    target = torch.tensor([[2, 0, 0]])
    loss, _, _ = token_losses(logits.log_softmax(-1), target, label_smoothing=0.2)
    loss.backward()
    assert torch.all(logits.grad[0, 1:] == 0)
    assert logits.grad[0, 0].abs().sum() > 0
