"""Positional encodings against their formulas (Vaswani et al. section 3.5; T_max variant)."""
from __future__ import annotations

import math

import pytest
import torch

from seq2seq_zoo.models.layers import PositionalEncoding, sinusoidal_table


def formula(max_len: int, d: int, base: float) -> list[list[float]]:
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(pos / base^(2i/d)), written out."""
    rows = []
    for pos in range(max_len):
        row = []
        for j in range(d):
            two_i = j - (j % 2)
            angle = pos / base ** (two_i / d)
            row.append(math.sin(angle) if j % 2 == 0 else math.cos(angle))
        rows.append(row)
    return rows


@pytest.mark.parametrize("d", [8, 7, 1, 2])
def test_sinusoidal_base_10000(d):
    pe = PositionalEncoding("sinusoidal", d, max_len=30)
    assert pe.table.shape == (30, d)
    torch.testing.assert_close(pe.table, torch.tensor(formula(30, d, 10000.0)), atol=1e-6, rtol=0)


def test_sinusoidal_known_values():
    t = sinusoidal_table(3, 4)
    # pos 1: dims 0,1 use angle 1; dims 2,3 use angle 1/10000^(2/4) = 0.01
    assert t[0].tolist() == pytest.approx([0.0, 1.0, 0.0, 1.0], abs=1e-7)
    assert t[1].tolist() == pytest.approx([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)], abs=1e-7)


@pytest.mark.parametrize("d", [6, 5])
def test_sinusoidal_tmax_uses_max_length_as_base(d):
    pe = PositionalEncoding("sinusoidal_tmax", d, max_len=20)
    torch.testing.assert_close(pe.table, torch.tensor(formula(20, d, 20.0)), atol=1e-6, rtol=0)
    pe2 = PositionalEncoding("sinusoidal_tmax", d, max_len=20, tmax=50)
    torch.testing.assert_close(pe2.table, torch.tensor(formula(20, d, 50.0)), atol=1e-6, rtol=0)
    fixed = PositionalEncoding("sinusoidal", d, max_len=20)
    assert not torch.allclose(pe.table, fixed.table)  # the bases really differ


def test_fixed_tables_are_not_parameters_and_forward_adds_offset_rows():
    pe = PositionalEncoding("sinusoidal", 4, max_len=10)
    assert list(pe.parameters()) == []
    x = torch.zeros(2, 3, 4)
    torch.testing.assert_close(pe(x, offset=2), pe.table[2:5].expand(2, 3, 4))
    with pytest.raises(ValueError, match="exceeds"):
        pe(torch.zeros(1, 9, 4), offset=2)


def test_learned_pe_is_trainable():
    torch.manual_seed(0)
    pe = PositionalEncoding("learned", 4, max_len=10)
    params = list(pe.parameters())
    assert len(params) == 1 and params[0] is pe.table and pe.table.requires_grad
    assert pe.table.shape == (10, 4)
    x = torch.zeros(1, 3, 4)
    pe(x).pow(2).sum().backward()
    g = pe.table.grad
    assert torch.all(g[3:] == 0) and torch.count_nonzero(g[:3]) > 0
    torch.testing.assert_close(g[:3], 2 * pe.table.detach()[:3])  # d/dT sum(T^2) = 2T


def test_learned_pe_in_transformer_gets_gradients():
    from conftest import random_batch, tiny_transformer
    model = tiny_transformer(vocab_size=20, pe="learned").train()
    names = [n for n, _ in model.named_parameters()]
    assert "encoder.pe.table" in names and "decoder.pe.table" in names
    batch = random_batch(20, [5, 3], [4, 4])
    model(batch).log_probs.sum().backward()
    assert model.encoder.pe.table.grad.abs().sum() > 0
    assert model.decoder.pe.table.grad.abs().sum() > 0


def test_unknown_pe_kind_is_rejected():
    with pytest.raises(ValueError, match="sinusoidal"):
        PositionalEncoding("sinusodal", 4, 10)
