"""The CUDA code paths' decisions, checked on CPU (no GPU is needed): which attention kernel a device
gets, which autocast precision, that the fast recurrent kernels keep a GPU's autocast, and that
``zoo bench --device cuda`` says clearly when there is no GPU."""
from __future__ import annotations

import pytest
import torch

from seq2seq_zoo import bench
from seq2seq_zoo.models.fast.kernels import prefer_math_attention
from seq2seq_zoo.models.fast.rnn_kernels import fp32_on_cpu
from seq2seq_zoo.precision import autocast_dtype
from seq2seq_zoo.utils import pick_device


def test_gpus_take_the_fused_sdpa_kernels_cpus_the_math_path_in_bf16():
    q = torch.empty(2, 4, 16, 8, device="meta", dtype=torch.bfloat16)
    assert not prefer_math_attention(q, q)          # not a CPU: F.scaled_dot_product_attention (flash)
    qc = torch.zeros(2, 4, 16, 8, dtype=torch.bfloat16)
    assert prefer_math_attention(qc, qc)             # CPU bf16: batched matmuls
    assert not prefer_math_attention(qc.float(), qc.float())   # CPU fp32, many queries: the fused kernel


@pytest.fixture
def cudnn_attention_on():
    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    yield
    torch.backends.cuda.enable_cudnn_sdp(was)


def test_a_gpu_device_takes_cudnn_attention_out_of_sdpa_unless_asked_to_keep_it(monkeypatch, cudnn_attention_on):
    monkeypatch.delenv("ZOO_CUDNN_ATTENTION", raising=False)
    assert pick_device("cpu").type == "cpu"
    assert torch.backends.cuda.cudnn_sdp_enabled()        # a CPU run leaves the setting alone
    assert pick_device("cuda").type == "cuda"             # a device object: no GPU is needed for this
    assert not torch.backends.cuda.cudnn_sdp_enabled()    # cuDNN's per-shape graph builds are out
    assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    monkeypatch.setenv("ZOO_CUDNN_ATTENTION", "1")
    pick_device("cuda:0")
    assert torch.backends.cuda.cudnn_sdp_enabled()        # kept where the user asks


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


def test_gpu_shape_stage_times_token_batches_and_reports_mfu_against_the_peak():
    """The GPU-sized stage's logic at a tiny shape on CPU: token batches as the loop builds them (no
    example cap, each under max_tokens, shapes that differ), FLOP/s per update from that update's own
    tokens, MFU against the peak of the precision trained in, and a target row."""
    shape = bench.Shape(vocab=50, d_model=16, d_ff=32, heads=2, layers=1, batch=0, src_len=24, tgt_len=10,
                        dropout=0.0)
    batches = bench.token_batches(shape, max_tokens=200, n=40)
    # the loop's rule: the longest source + target (words) in the batch x examples <= max_tokens
    padded = [int((b.src_len + (b.tgt_out != 0).sum(1) - 1).max()) * len(b.ids) for b in batches]
    assert sum(len(b.ids) for b in batches) == 40
    assert all(p <= 200 or len(b.ids) == 1 for p, b in zip(padded, batches))
    assert len({tuple(b.src.shape) for b in batches}) > 1              # varied lengths, varied shapes
    plan = bench.Plan(warmup=1, iters=3)
    peaks = {"bf16": None, "fp32": 1.0}                                  # 1 GFLOP/s: MFU = the GFLOP/s
    out = bench.measure_gpu_shape(shape, torch.device("cpu"), plan, peaks, None, max_tokens=200,
                                  progress=lambda s: None)
    assert out["peak_kind"] == "fp32" and out["precision"] == "fp32"
    assert len(out["model_gflops_all"]) == 3 and out["model_gflops"] == sorted(out["model_gflops_all"])[1]
    assert out["mfu"] == pytest.approx(out["model_gflops"])
    assert max(out["batch_examples"]) > 1
    rows = bench.targets({"gpu_shape": out})
    assert rows and rows[0]["goal"] == bench.TARGET_GPU_MFU and rows[0]["value"] == out["mfu"]
    md = "\n".join(bench.gpu_shape_markdown(out))
    assert "### Training at a GPU-sized shape (fp32)" in md and "`train.max_tokens = 200`" in md
    assert f"| {100 * out['mfu']:.0f}% |" in md


TINY_GPU_SHAPE = bench.Shape(vocab=50, d_model=16, d_ff=32, heads=2, layers=1, batch=0, src_len=24, tgt_len=10,
                             dropout=0.0)


def test_gpu_shape_variants_run_the_same_model_and_batches_with_one_change(monkeypatch):
    """cuDNN attention on and torch.compile, beside the runs' setting: the same seed's weights, the same
    batches in the same order, each variant's own FLOP/s, MFU, ratio and first pass; a variant that fails
    (no compiler) is reported and the default still stands."""
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda m, **kw: compiled.append((type(m).__name__, kw)) or m)
    plan = bench.Plan(warmup=1, iters=3)
    out = bench.measure_gpu_shape(TINY_GPU_SHAPE, torch.device("cpu"), plan, {"bf16": None, "fp32": 1.0}, None,
                                  max_tokens=200, progress=lambda s: None, variants=("cudnn_attention", "compiled"))
    assert compiled == [("Encoder", {"dynamic": True}), ("Decoder", {"dynamic": True})]
    assert set(out["variants"]) == {"cudnn_attention", "compiled"}
    for v in out["variants"].values():
        assert len(v["model_gflops_all"]) == 3 and v["mfu"] == pytest.approx(v["model_gflops"])
        assert v["vs_default"] == pytest.approx(v["model_gflops"] / out["model_gflops"])
        assert v["first_pass_s"] > 0
    assert out["first_pass_s"] > 0
    md = "\n".join(bench.gpu_shape_markdown(out))
    assert "| the runs' setting |" in md and "torch.compile(dynamic=True)" in md and "ZOO_CUDNN_ATTENTION=1" in md

    def no_compiler(m, **kw):
        raise RuntimeError("no C++ compiler here")
    monkeypatch.setattr(torch, "compile", no_compiler)
    out = bench.measure_gpu_shape(TINY_GPU_SHAPE, torch.device("cpu"), plan, {"bf16": None, "fp32": 1.0}, None,
                                  max_tokens=200, progress=lambda s: None, variants=("compiled",))
    assert "no C++ compiler" in out["variants"]["compiled"]["error"] and out["model_gflops"] > 0
    assert "not measured: RuntimeError: no C++ compiler here" in "\n".join(bench.gpu_shape_markdown(out))
    with pytest.raises(ValueError, match="unknown variant"):
        bench.measure_gpu_shape(TINY_GPU_SHAPE, torch.device("cpu"), plan, {}, None, max_tokens=200,
                                progress=lambda s: None, variants=("fp8",))


def test_the_cudnn_variant_turns_cudnn_attention_on_for_its_own_calls_only():
    seen = []
    was = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(False)
        call = bench.WithCudnnAttention(lambda: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))
        call()
        assert seen == [True] and not torch.backends.cuda.cudnn_sdp_enabled()

        def boom():
            raise RuntimeError("step failed")
        with pytest.raises(RuntimeError):
            bench.WithCudnnAttention(boom)()
        assert not torch.backends.cuda.cudnn_sdp_enabled()     # restored after a failure too
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)


def test_a_gpus_matmul_peak_is_measured_on_a_gpu_sized_product():
    """On an H200 a 2048³ bf16 product reached 386 TFLOP/s, half of what 8192³ products reach: a GPU's
    MFU is taken against a peak measured at least at GPU_MATMUL_N; a CPU keeps the plan's size."""
    plan = bench.Plan(matmul_n=2048)
    assert bench.peak_matmul_n(torch.device("cpu"), plan) == 2048
    assert bench.peak_matmul_n(torch.device("cuda"), plan) == bench.GPU_MATMUL_N == 8192
    assert bench.peak_matmul_n(torch.device("cuda"), bench.Plan(matmul_n=16384)) == 16384
