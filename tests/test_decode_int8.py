"""int8 decoding (``decode.precision = "int8"``): the linear layers run PyTorch's dynamic-quantisation
kernels for the call and are restored after; the key is checked and recorded like a decoding rule's; the
bench's int8 stage times it per model and reads the ROUGE-1 change from trained runs' records."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import random_batch, tiny_transformer
from seq2seq_zoo.config import DecodeConfig, decode_dict, decode_with, parse_decode_overrides
from seq2seq_zoo.decode import generate, is_int8
from seq2seq_zoo.errors import ConfigError
from seq2seq_zoo.precision import int8_linears
from seq2seq_zoo.registry import MODELS
from seq2seq_zoo.report.tables import decode_label

pytestmark = pytest.mark.skipif("fbgemm" not in torch.backends.quantized.supported_engines,
                                reason="no fbgemm quantised kernels in this torch build")


def test_int8_linear_is_close_to_fp32_and_restores_the_layer():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 200)
    x = torch.randn(5, 3, 64)
    with torch.no_grad():
        ref = lin(x)
        with int8_linears(lin):
            assert "forward" in lin.__dict__ and lin.weight.dtype == torch.float32   # fp32 weights kept
            q = lin(x)
        again = lin(x)
    assert "forward" not in lin.__dict__ and torch.equal(again, ref)
    assert q.shape == ref.shape and not torch.equal(q, ref)
    # int8 weights per channel and 7-bit activations: about 1% of the output's scale
    assert (q - ref).abs().max() < 0.03 * ref.abs().max()
    with torch.no_grad(), int8_linears(lin, enabled=False):
        assert "forward" not in lin.__dict__


def test_int8_weights_are_packed_once_and_again_after_an_update():
    from seq2seq_zoo import precision
    lin = torch.nn.Linear(8, 4)
    with torch.no_grad():
        with int8_linears(lin):
            first = precision._INT8[lin][1]
        with int8_linears(lin):
            assert precision._INT8[lin][1] is first          # a split decoded batch by batch quantises once
        lin.weight.mul_(2.0)
        with int8_linears(lin):
            assert precision._INT8[lin][1] is not first      # a changed weight is quantised again
        x = torch.randn(2, 8)
        with int8_linears(lin):
            y = lin(x)
    assert torch.allclose(y, torch.nn.functional.linear(x, lin.weight, lin.bias), atol=0.05)


def test_with_grad_enabled_nothing_is_quantised():
    lin = torch.nn.Linear(8, 4)
    with int8_linears(lin):
        assert "forward" not in lin.__dict__


def test_precision_is_a_checked_decode_key_recorded_only_where_given():
    assert parse_decode_overrides("precision=int8") == {"precision": "int8"}
    with pytest.raises(ConfigError) as e:
        parse_decode_overrides("precision=int4")
    assert "decode.precision" in str(e.value) and "auto, int8" in str(e.value)
    cfg = decode_with(DecodeConfig(), {"precision": "int8"})
    assert is_int8(cfg) and not is_int8(DecodeConfig())
    assert decode_dict(cfg)["precision"] == "int8" and "precision" not in decode_dict(DecodeConfig())
    assert decode_label(decode_dict(cfg)).endswith(", int8")


def _peaky(model):
    """Scale the output layer so every step has a clear winner (int8 rounding cannot flip it)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m.out_features >= 40:
                m.weight.mul_(8.0)
    return model


@pytest.mark.parametrize("name,opts", [
    ("transformer", dict(d_model=16, d_ff=32, heads=2, layers=1)),
    ("transformer_pointer", dict(d_model=16, d_ff=32, heads=2, layers=1)),
    ("bahdanau", dict(emb_dim=8, hidden=16)),
    ("pointer_generator", dict(emb_dim=8, hidden=16, coverage=True)),
])
def test_every_family_decodes_in_int8_and_is_left_as_it_was(name, opts):
    torch.manual_seed(0)
    model = _peaky(MODELS.create(name, vocab_size=48, **opts).eval())
    batch = random_batch(48, [6, 9, 4], [1] * 3, seed=5)
    cfg = DecodeConfig(beam_size=3, max_len=8, min_len=8)
    plain = generate(model, batch, cfg)
    quant = generate(model, batch, decode_with(cfg, {"precision": "int8"}))
    assert [len(x) for x in quant] == [8, 8, 8]
    assert sum(a == b for a, b in zip(plain, quant)) >= 2          # a clear winner stays the winner
    assert all("forward" not in m.__dict__ for m in model.modules())
    assert generate(model, batch, cfg) == plain


def test_bench_int8_stage_times_each_family_and_reads_the_rouge_change(tmp_path):
    from seq2seq_zoo.bench import TINY
    from seq2seq_zoo.bench.int8 import int8_markdown, int8_rouge, measure_int8
    from seq2seq_zoo.bench.targets import int8_targets
    from seq2seq_zoo.bench.shapes import Plan
    # a results folder: one run decoded in its own precision (ROUGE-1 30.0) and in int8 (29.9), one
    # decoding that differs in more than the precision (not counted)
    run = tmp_path / "exp" / "r1"
    base = {"method": "beam", "beam_size": 4, "max_len": 50}
    (run / "decodes" / "int8").mkdir(parents=True)
    (run / "decodes" / "b8").mkdir(parents=True)
    ev = {"split": "test", "n_examples": 250, "decode": base, "scores": {"rouge1": 30.0}}
    (run / "record.json").write_text(json.dumps({"run": "r1", "model": "transformer", "eval": ev}))
    (run / "decodes" / "int8" / "record.json").write_text(json.dumps(
        {"eval": {**ev, "decode": {**base, "precision": "int8"}, "scores": {"rouge1": 29.9}}}))
    (run / "decodes" / "b8" / "record.json").write_text(json.dumps(
        {"eval": {**ev, "decode": {**base, "beam_size": 8, "precision": "int8"}, "scores": {"rouge1": 31.0}}}))
    q = int8_rouge(tmp_path)
    assert list(q) == ["exp/r1"] and q["exp/r1"]["delta"] == pytest.approx(-0.1)
    res = measure_int8(TINY, torch.device("cpu"), Plan(decode_iters=1), None, tmp_path)
    assert set(res) == {"transformer", "transformer_pointer", "bahdanau", "pointer_generator"}
    for name, row in res.items():
        assert row["int8"]["precision"] == "int8" and row["int8"]["tokens_per_s"] > 0
        assert row["speedup"] == pytest.approx(row["default"]["seconds"] / row["int8"]["seconds"])
    assert res["transformer"]["rouge1"]["delta"] == pytest.approx(-0.1)
    dec = {"decoding": {"ours_int8": {"tokens_per_s": 50.0}}, "int8": res, "beams": 2}
    (t,) = int8_targets(dec, 10.0)
    assert t["value"] == pytest.approx(5.0) and t["met"] and "transformer -0.10" in t["status"]
    md = "\n".join(int8_markdown(res, {"beams": 2, "dec_sources": 2, "dec_len": 4}))
    assert "| transformer |" in md and "30.00 -> 29.90 (-0.10; 250 test)" in md


def test_summarize_int8_decodes_through_the_int8_layers(tmp_path, monkeypatch, capsys):
    import contextlib

    from conftest import run_cli, tiny_experiment, write_dialogsum
    from seq2seq_zoo import decode
    data = write_dialogsum(tmp_path / "data", n_train=8, n_dev=2, n_test=2)
    toml = tmp_path / "i8.toml"
    toml.write_text(tiny_experiment("i8", '[[runs]]\nname = "a"\n', seeds=1, data_dir=data, epochs=1,
                                    decode_max_len=8), encoding="utf-8")
    results = tmp_path / "results"
    assert run_cli(["run", str(toml), "--results", str(results), "--no-progress"]) == 0
    calls = []

    @contextlib.contextmanager
    def counting(model, enabled=True):
        calls.append(enabled)
        with int8_linears(model, enabled):
            yield model
    monkeypatch.setattr(decode, "int8_linears", counting)
    text = tmp_path / "in.txt"
    text.write_text("#Person1#: hello there , how are you ?\n#Person2#: fine , thanks .\n", encoding="utf-8")
    run = results / "i8" / "a"
    assert run_cli(["summarize", str(run), "--file", str(text)]) == 0
    assert run_cli(["summarize", str(run), "--file", str(text), "--int8"]) == 0
    assert calls == [False, True]
    plain, quant = capsys.readouterr().out.strip().splitlines()[-2:]
    assert plain and quant
