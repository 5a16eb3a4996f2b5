"""The compiled coverage-attention loops (``models.fast.native``) against the eager step loop they replace,
in the pointer-generator's fast path against the reference implementation, and the full-size
pointer-generator bench stage at tiny sizes."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from seq2seq_zoo.models.fast import native
from seq2seq_zoo.models.fast.rnn_kernels import additive_energy
from seq2seq_zoo.models.layers import masked_softmax

pytestmark = pytest.mark.skipif(not native.available(), reason="no C compiler: the eager path is used")


def _inputs(B=3, S=11, n=16, T=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    keys2 = torch.randn(B, S, n, generator=g)
    q, v = torch.randn(B, T, n, generator=g), torch.randn(n, generator=g)
    w_c, cov0 = 0.5 * torch.randn(n, generator=g), torch.rand(B, S, generator=g)
    mask = torch.ones(B, S, dtype=torch.bool)
    mask[1, 7:] = False                                    # padding at the end of a source
    return [t.requires_grad_() for t in (keys2, q, v, w_c, cov0)], mask, torch.randn(B, T, S, generator=g)


def _step_loop(keys2, q, v, w_c, cov0, mask):
    """The eager path: one step at a time, cov_t = cov0 + sum_{t'<t} a_t'."""
    cov, out = cov0, []
    for t in range(q.size(1)):
        a = masked_softmax(additive_energy(keys2, q[:, t:t + 1], v, cov.unsqueeze(1), w_c)[:, 0], mask)
        cov = cov + a
        out.append(a)
    return torch.stack(out, 1)


def _loops(keys2, q, v, w_c, cov0, mask):
    return native.coverage_attention(keys2, q, v, w_c, mask, cov0)


def _values_and_grads(f, params, mask, dA):
    for p in params:
        p.grad = None
    A = f(*params, mask)
    (A * dA).sum().backward()
    return [A.detach()] + [p.grad.clone() for p in params]


@pytest.mark.parametrize("threads", [1, 2])
def test_coverage_attention_equals_the_step_loop_with_gradients(threads):
    params, mask, dA = _inputs()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)        # two threads: the sources in two chunks
        got = _values_and_grads(_loops, params, mask, dA)
    finally:
        torch.set_num_threads(before)
    want = _values_and_grads(_step_loop, params, mask, dA)
    assert got[0][1, :, 7:].eq(0).all() and torch.allclose(got[0].sum(-1), torch.ones(3, 5))
    for name, g, w in zip(["A", "keys2", "q", "v", "w_c", "cov0"], got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, msg=name)


def test_coverage_attention_saturates_far_from_zero():
    """Pre-activations beyond +-80 (where the loops clamp the sigmoid's argument) give the eager values."""
    params, mask, dA = _inputs(seed=1)
    with torch.no_grad():
        params[0].mul_(60.0)
    got = _values_and_grads(_loops, params, mask, dA)
    want = _values_and_grads(_step_loop, params, mask, dA)
    for g, w in zip(got, want):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_usable_only_for_fp32_on_the_cpu():
    x = torch.zeros(2)
    assert native.usable(x, x) and not native.usable(x, x.double())


def test_pointer_coverage_fp32_takes_the_loops_and_matches_the_reference(monkeypatch):
    from tests.test_rnn_fast import batch_with_padding, loss_and_grads, pair
    calls = []
    real = native.coverage_attention
    monkeypatch.setattr(native, "coverage_attention", lambda *a: calls.append(1) or real(*a))
    batch = batch_with_padding()
    ref, fast = pair("pointer_generator", {"coverage": True}, dtype=torch.float32)
    _, loss_r, g_r = loss_and_grads(ref, batch)
    _, loss_f, g_f = loss_and_grads(fast, batch)
    assert calls == [1]
    torch.testing.assert_close(loss_f, loss_r, rtol=1e-5, atol=1e-6)
    assert g_f.keys() == g_r.keys()
    for k in g_r:
        torch.testing.assert_close(g_f[k], g_r[k], rtol=1e-4, atol=1e-5, msg=k)


@pytest.mark.slow
def test_pointer_full_stage_against_a_baseline_checkout_at_tiny_sizes():
    from seq2seq_zoo import bench
    tiny = dict(bench.PG_FULL, vocab=60, src_len=12, tgt_len=6, batch=2, emb_dim=8, hidden=16)
    root = str(Path(__file__).resolve().parents[1])
    res = bench.measure_pointer_full(root, rounds=2, progress=lambda s: None, config=tiny)
    ours, base = res["ours"], res["baseline"]
    assert len(ours["cpu_s_all"]) == len(base["cpu_s_all"]) == 2 and ours["loss"] == pytest.approx(base["loss"])
    assert res["speedup_cpu"] == pytest.approx(base["cpu_s"] / ours["cpu_s"])
    w = res["shared_work"]
    assert w["floor_s"] == pytest.approx(w["encoder_lstm_s"] + w["output_products_s"]) and w["floor_s"] > 0
    assert res["ceiling"] == pytest.approx(base["cpu_s"] / w["floor_s"])
    assert res["epoch"]["updates"] == -(-bench.pointer_full.TRAIN_STORIES // 2)
    md = "\n".join(bench.pointer_full_markdown(res))
    assert "| ours (" in md and "| baseline (" in md and "at most" in md
    with pytest.raises(bench.pointer_full.UserError if hasattr(bench.pointer_full, "UserError") else Exception,
                       match="not a checkout"):
        bench.check_baseline(str(Path(root) / "docs"))
    # in bf16 (what precision = "auto" trains in on CPUs with bf16 instructions): both sides under autocast.
    # The bench runs this stage only on such CPUs: elsewhere oneDNN has no bf16 LSTM primitive.
    from seq2seq_zoo.utils.hardware import cpu_has_fast_bf16
    if cpu_has_fast_bf16():
        bf = bench.measure_pointer_full(None, rounds=1, progress=lambda s: None, config=tiny, precision="bf16")
        assert bf["precision"] == "bf16" and bf["shape"]["precision"] == "bf16" and bf["ours"]["cpu_s"] > 0
        assert bf["ours"]["loss"] != pytest.approx(ours["loss"], abs=1e-6)   # bf16 rounding moves the loss
        assert "one thread, bf16 (batch 2" in "\n".join(bench.pointer_full_markdown(bf))


def test_loading_the_library_leaves_the_process_float_state_alone():
    """The compiled loops must not switch the process to flush-to-zero (as a library linked with -ffast-math
    does when it loads): numpy and every other float computation would change."""
    import numpy as np
    from seq2seq_zoo.models.fast import native
    native.library()
    tiny = np.float32(1e-40)   # a subnormal float32
    assert tiny * np.float32(1.0) != 0.0 and np.float64(1e-310) * 1.0 != 0.0
