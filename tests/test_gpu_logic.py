"""The CUDA code paths' decisions, checked on CPU (no GPU is needed): which attention kernel a device
gets, which autocast precision, that the fast recurrent kernels keep a GPU's autocast, and that
``zoo bench --device cuda`` says clearly when there is no GPU."""
from __future__ import annotations

import pytest
import torch

from seq2seq_zoo import bench
from seq2seq_zoo.models.kernels import prefer_math_attention
from seq2seq_zoo.models.rnn_kernels import fp32_on_cpu
from seq2seq_zoo.precision import autocast_dtype


def test_gpus_take_the_fused_sdpa_kernels_cpus_the_math_path_in_bf16():
    q = torch.empty(2, 4, 16, 8, device="meta", dtype=torch.bfloat16)
    assert not prefer_math_attention(q, q)          # not a CPU: F.scaled_dot_product_attention (flash)
    qc = torch.zeros(2, 4, 16, 8, dtype=torch.bfloat16)
    assert prefer_math_attention(qc, qc)             # CPU bf16: batched matmuls
    assert not prefer_math_attention(qc.float(), qc.float())   # CPU fp32, many queries: the fused kernel


@pytest.mark.parametrize("bf16_ok,want", [(True, torch.bfloat16), (False, torch.float16)])
def test_cuda_auto_precision_is_bf16_where_supported_else_fp16(monkeypatch, bf16_ok, want):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16_ok)
    assert autocast_dtype("auto", torch.device("cuda")) == want
    assert autocast_dtype("fp32", torch.device("cuda")) is None


def test_recurrent_kernels_turn_autocast_off_on_cpu_only():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with fp32_on_cpu(torch.device("cpu")):
            assert not torch.is_autocast_enabled("cpu")
        with fp32_on_cpu(torch.device("cuda")):   # a GPU keeps the caller's autocast
            assert torch.is_autocast_enabled("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the bench runs there")
def test_bench_on_cuda_without_a_gpu_says_so(tmp_path):
    with pytest.raises(RuntimeError, match="no CUDA device"):
        bench.run_bench(tmp_path, devices=["cuda"], shape=bench.TINY, plan=bench.QUICK_PLAN, scaling=False,
                        threads=1, progress=lambda s: None)


def test_gpu_flop_rate_is_reported_against_the_devices_bf16_peak():
    """MFU = model FLOP/s over the bf16 matmul peak measured on the same device in the run."""
    fp = {"encoder": 10, "decoder": 20, "output": 30}
    flops = bench.train_flops(fp, src_tokens=100, tgt_tokens=50)
    assert flops == 6.0 * (10 * 100 + (20 + 30) * 50)

    class T:
        dtype, src_tokens, tgt_tokens = torch.bfloat16, 100, 50
    fig = bench.train_figures(T(), [0.5, 1.0, 2.0], fp, {"bf16": 2e-6, "fp32": 1e-6}, None)
    assert fig["step_s"] == 1.0 and fig["model_gflops"] == pytest.approx(flops / 1e9)
    assert fig["mfu_bf16"] == pytest.approx(flops / 1e9 / 2e-6)
