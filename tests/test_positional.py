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


# ------------------------------------------------- one T_max rule, recorded; learned scale
def _tf(pe, **kw):
    from seq2seq_zoo.models.transformer import Transformer
    torch.manual_seed(0)
    return Transformer(vocab_size=30, d_model=8, d_ff=16, heads=2, layers=1, pe=pe, max_src_len=40,
                       max_tgt_len=12, **kw)


def test_tmax_encoding_uses_one_base_for_both_sides_by_default():
    """Without pe_tmax both tables use T_max = the longest position either side can hold (the source's
    40 here), not 40 for the encoder and 13 for the decoder."""
    m = _tf("sinusoidal_tmax")
    torch.testing.assert_close(m.encoder.pe.table, torch.tensor(formula(40, 8, 40.0)), atol=1e-6, rtol=0)
    torch.testing.assert_close(m.decoder.pe.table, torch.tensor(formula(13, 8, 40.0)), atol=1e-6, rtol=0)
    assert m.model_rules()["pe_base"] == {"encoder": 40.0, "decoder": 40.0}
    assert "T_max" in m.model_rules()["pe_rule"]


def test_tmax_per_side_and_explicit_tmax():
    m = _tf("sinusoidal_tmax", pe_tmax_rule="per_side")
    torch.testing.assert_close(m.decoder.pe.table, torch.tensor(formula(13, 8, 13.0)), atol=1e-6, rtol=0)
    torch.testing.assert_close(m.encoder.pe.table, torch.tensor(formula(40, 8, 40.0)), atol=1e-6, rtol=0)
    assert m.model_rules()["pe_base"] == {"encoder": 40.0, "decoder": 13.0}
    e = _tf("sinusoidal_tmax", pe_tmax=100)
    assert e.model_rules()["pe_base"] == {"encoder": 100.0, "decoder": 100.0}
    torch.testing.assert_close(e.decoder.pe.table, torch.tensor(formula(13, 8, 100.0)), atol=1e-6, rtol=0)
    assert _tf("sinusoidal").model_rules()["pe_base"] == {"encoder": 10000.0, "decoder": 10000.0}
    with pytest.raises(ValueError, match="pe_tmax_rule"):
        _tf("sinusoidal_tmax", pe_tmax_rule="both")


def test_learned_table_starts_on_the_scale_of_the_scaled_token_embeddings():
    """The scaled token embeddings have std 1 at initialisation (std d^-0.5 times sqrt(d)); the learned
    position table starts with the same std, not 0.02 (50x weaker)."""
    from seq2seq_zoo.models.transformer import Transformer
    torch.manual_seed(0)
    m = Transformer(vocab_size=2000, d_model=64, d_ff=32, heads=2, layers=1, pe="learned", max_src_len=400,
                    max_tgt_len=64)
    tok = m.encoder.embed(torch.arange(4, 2000)).std().item()
    assert tok == pytest.approx(1.0, abs=0.03)
    assert m.encoder.pe.table.std().item() == pytest.approx(tok, rel=0.05)
    assert m.decoder.pe.table.std().item() == pytest.approx(tok, rel=0.05)
    assert m.model_rules()["pe_init_std"] == 1.0
    half = Transformer(vocab_size=50, d_model=64, d_ff=32, heads=2, layers=1, pe="learned", pe_init_std=0.5)
    assert half.encoder.pe.table.std().item() == pytest.approx(0.5, rel=0.05)
