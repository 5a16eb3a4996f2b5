"""The recurrent family's fast implementation (``impl = "fast"``, the default) against the previous,
step-by-step one (``impl = "reference"``): the same loss, gradients and decodes up to float rounding,
and gradient checks of its hand-written backward passes."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq_zoo.config import DecodeConfig
from seq2seq_zoo.data.batching import Batch
from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.decode import beam_search, greedy
from seq2seq_zoo.models.base import build_model
from seq2seq_zoo.models.fast import rnn_kernels
from seq2seq_zoo.models.fast.rnn_kernels import DeferredContext, _energy_in_blocks, _energy_whole, additive_energy, run_encoder
from seq2seq_zoo.precision import cpu_bf16_kernels
from seq2seq_zoo.utils import cpu_has_fast_bf16

V, OOVS = 40, 2

CASES = [("gru", {}), ("gru", {"layers": 2}), ("gru", {"output_layers": 2}), ("bahdanau", {}),
         ("bahdanau", {"coverage": True}), ("bahdanau", {"layers": 2}), ("bahdanau", {"output_layers": 2}),
         ("bilstm", {}), ("bilstm", {"coverage": True}), ("bilstm", {"layers": 2}),
         ("bilstm", {"output_layers": 2}), ("pointer_generator", {}), ("pointer_generator", {"coverage": True}),
         ("pointer_generator", {"variant": "bahdanau"}), ("pointer_generator", {"layers": 2}),
         ("pointer_generator", {"output_layers": 2})]


def batch_with_padding(seed=0, B=3, S=9, T=6) -> Batch:
    """Random sources with repeated words, source OOV words (extended ids) that targets copy, and
    sources and targets of different lengths (padding at the end)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 12, (B, S), generator=g)       # a small range: words repeat within a source
    src_ext = src.clone()
    src[:, 1], src_ext[:, 1] = 1, V                       # an OOV word at position 1
    src[0, 4], src_ext[0, 4] = 1, V + 1                   # and a second one in the first source
    src_len = torch.tensor([S, S - 3, S - 5])[:B]
    tgt = torch.randint(4, V, (B, T + 1), generator=g)
    tgt[:, 2] = V                                           # copy the OOV word
    tgt_len = torch.tensor([T + 1, T - 1, T - 2])[:B]
    for b in range(B):
        src[b, src_len[b]:] = PAD_ID
        src_ext[b, src_len[b]:] = PAD_ID
        tgt[b, tgt_len[b]:] = PAD_ID
    tgt_in = tgt[:, :-1].masked_fill(tgt[:, :-1] >= V, 1)
    return Batch(ids=[str(b) for b in range(B)], src=src, src_ext=src_ext, src_len=src_len, tgt_in=tgt_in,
                 tgt_out=tgt[:, 1:], oovs=[["x", "y"]] * B, references=[[""]] * B, sources=[""] * B, n_oov=OOVS)


def pair(name, opts, dtype=torch.float64, seed=0):
    out = []
    for impl in ("reference", "fast"):
        torch.manual_seed(seed)
        ctx = {"vocab_size": V, "max_src_len": 16, "max_tgt_len": 16}
        out.append(build_model(name, ctx, dict(emb_dim=6, hidden=8, impl=impl, **opts)).to(dtype))
    return out


def loss_and_grads(model, batch):
    model.zero_grad()
    out = model(batch)
    loss, _, _ = out.token_losses(batch.tgt_out, label_smoothing=0.1, smooth_width=V)
    loss = loss + sum(out.aux_losses.values(), torch.zeros((), dtype=loss.dtype))
    loss.backward()
    return out, loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name,opts", CASES)
def test_fast_and_reference_give_the_same_loss_log_probs_and_gradients(name, opts):
    batch = batch_with_padding()
    ref, fast = pair(name, opts)
    assert fast.state_dict().keys() == ref.state_dict().keys()   # checkpoints load into either
    out_r, loss_r, g_r = loss_and_grads(ref, batch)
    out_f, loss_f, g_f = loss_and_grads(fast, batch)
    # the reference's energies pass through fp32 (``e.float()``): agreement is to fp32 rounding
    torch.testing.assert_close(loss_f, loss_r, rtol=1e-6, atol=1e-6, check_dtype=False)
    # columns the source cannot reach carry log-probs near -1e4 in both (see pointer.copy_mixture)
    torch.testing.assert_close(out_f.log_probs.clamp_min(-1000), out_r.log_probs.clamp_min(-1000),
                               rtol=1e-6, atol=1e-6)
    assert g_f.keys() == g_r.keys()
    for k in g_r:
        torch.testing.assert_close(g_f[k], g_r[k], rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.parametrize("name,opts", CASES)
def test_fast_and_reference_decode_the_same_greedy_and_beam_4(name, opts):
    batch = batch_with_padding(seed=3)
    ref, fast = (m.eval() for m in pair(name, opts, dtype=torch.float32, seed=1))
    for cfg in (DecodeConfig(method="greedy", max_len=7),
                DecodeConfig(method="beam", beam_size=4, max_len=7, min_len=2, coverage_penalty=0.2,
                             repetition_penalty=1.2)):
        with torch.no_grad():
            run = greedy if cfg.method == "greedy" else beam_search
            assert run(fast, batch, cfg) == run(ref, batch, cfg)


@pytest.mark.parametrize("name", ["bahdanau", "bilstm", "pointer_generator"])
def test_decode_step_with_hypotheses_grouped_per_source_equals_copied_rows(name):
    """The fast state keeps one encoder row per source; indexing it with arbitrary rows (``group`` 0)
    and with K consecutive hypotheses per source gives the reference's log-probs."""
    batch = batch_with_padding(seed=5)
    ref, fast = (m.eval() for m in pair(name, {"coverage": True}, dtype=torch.float64))
    with torch.no_grad():
        for index in (torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([2, 0, 1, 2])):
            sr, sf = ref.reorder(ref.encode(batch), index), fast.reorder(fast.encode(batch), index)
            prev = torch.full((index.numel(),), 2)
            for _ in range(3):
                lr, sr = ref.decode_step(sr, prev)
                lf, sf = fast.decode_step(sf, prev)
                sr.pop("logits", None)
                sf.pop("logits", None)
                torch.testing.assert_close(lf.clamp_min(-1000), lr.clamp_min(-1000), rtol=1e-6, atol=1e-6, check_dtype=False)
                prev = lr.argmax(-1)
            assert sf["group"] == (2 if index.numel() == 6 else 0)
            cov_r, mask_r = ref.attention_coverage(sr)
            cov_f, mask_f = fast.attention_coverage(sf)
            torch.testing.assert_close(cov_f, cov_r, rtol=1e-6, atol=1e-7, check_dtype=False)
            assert torch.equal(mask_f, mask_r)


def packed_reference(rnn, x, mask):
    """The oracle for the encoder tests: torch's packed run over the real tokens of ``mask``, outputs
    padded back with zeros, final states as a tuple (GRU: one element, LSTM: (h, c))."""
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, mask.sum(1), batch_first=True, enforce_sorted=False)
    out, final = rnn(packed)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=mask.size(1))
    return out, final if isinstance(final, tuple) else (final,)


def test_padded_gru_encoder_equals_the_packed_run():
    torch.manual_seed(0)
    rnn = torch.nn.GRU(5, 7, batch_first=True).double()
    x = torch.randn(3, 6, 5, dtype=torch.float64)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] + [0] * 5], dtype=torch.bool)
    x = x * mask.unsqueeze(-1)
    out, final = run_encoder(rnn, x, mask)
    ref_out, (ref_final,) = packed_reference(rnn, x, mask)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(final, ref_final)


@pytest.mark.parametrize("cls,bidirectional", [(torch.nn.LSTM, True), (torch.nn.LSTM, False), (torch.nn.GRU, True)])
def test_held_encoder_equals_the_packed_run_with_gradients(cls, bidirectional):
    """A one-layer encoder with padding runs unpacked, its gates held at padding by the flag column
    (``_run_held``): outputs, final states and every gradient as the packed run gives them."""
    torch.manual_seed(0)
    rnn = cls(5, 7, batch_first=True, bidirectional=bidirectional).double()
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] + [0] * 5, [1] * 3 + [0] * 3], dtype=torch.bool)
    x = torch.randn(4, 6, 5, dtype=torch.float64, requires_grad=True)
    params = [x] + list(rnn.parameters())

    def losses(out, final):
        finals = final if isinstance(final, tuple) else (final,)
        g = torch.Generator().manual_seed(1)
        return (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum() + sum(
            (f * torch.randn(f.shape, generator=g, dtype=f.dtype)).sum() for f in finals), finals

    out, final = run_encoder(rnn, x, mask)
    loss, finals = losses(out, final)
    grads = torch.autograd.grad(loss, params)
    ref_out, ref_final = packed_reference(rnn, x, mask)
    ref_loss, ref_finals = losses(ref_out, ref_final)
    ref_grads = torch.autograd.grad(ref_loss, params)
    torch.testing.assert_close(out, ref_out)
    assert len(finals) == len(ref_finals)
    for a, b in zip(finals, ref_finals):
        torch.testing.assert_close(a, b)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)
    assert not any(p.grad is not None for p in rnn.parameters())   # the flag column is not a parameter


def test_held_gates_saturate_exactly():
    """The hold column drives the gate pre-activations at padding to +-1e4: sigmoid gives exactly 1 and 0
    there in fp32 (an inexact 1 - 1e-8 would leak the padding into the cell state)."""
    from seq2seq_zoo.models.fast.rnn_kernels import HOLD, _hold_column
    a = torch.linspace(-500, 500, 101)
    assert torch.equal(torch.sigmoid(HOLD + a), torch.ones_like(a))
    assert torch.equal(torch.sigmoid(-HOLD + a), torch.zeros_like(a))
    col = _hold_column(torch.nn.LSTM(3, 2)).flatten().tolist()
    assert col == [-HOLD, -HOLD, HOLD, HOLD, 0.0, 0.0, 0.0, 0.0]
    assert _hold_column(torch.nn.GRU(3, 2)).flatten().tolist() == [0.0, 0.0, HOLD, HOLD, 0.0, 0.0]


def test_additive_energy_by_hand_and_gradcheck():
    torch.manual_seed(0)
    B, T, S, n = 2, 3, 4, 5
    keys = torch.randn(B, S, n, dtype=torch.float64, requires_grad=True)
    q = torch.randn(B, T, n, dtype=torch.float64, requires_grad=True)
    v = torch.randn(n, dtype=torch.float64, requires_grad=True)
    cov = torch.rand(B, T, S, dtype=torch.float64, requires_grad=True)
    w_c = torch.randn(n, dtype=torch.float64, requires_grad=True)
    e = additive_energy(2 * keys, q, v, cov, w_c)
    by_hand = torch.tanh(keys[:, None] + q[:, :, None] + cov[..., None] * w_c) @ v
    torch.testing.assert_close(e, by_hand)
    with torch.no_grad():   # decoding: reused buffers over blocks of source positions (here 1-2 per block)
        torch.testing.assert_close(_energy_in_blocks(2 * keys, 2 * q, v, cov, w_c, block=2 * T * n - 1), by_hand)
        torch.testing.assert_close(additive_energy(2 * keys, q, v, cov, w_c), by_hand)
        torch.testing.assert_close(_energy_whole(2 * keys, 2 * q, v, cov, w_c)[0], by_hand)   # the GPU form
        torch.testing.assert_close(_energy_whole(2 * keys, 2 * q, v, None, None)[0],
                                   torch.tanh(keys[:, None] + q[:, :, None]) @ v)
    assert torch.autograd.gradcheck(lambda k, q, v, c, w: additive_energy(2 * k, q, v, c, w), (keys, q, v, cov, w_c))
    assert torch.autograd.gradcheck(lambda k, q, v: additive_energy(2 * k, q, v), (keys, q[:, :1], v))


def test_decoding_energy_takes_the_whole_form_off_the_cpu(monkeypatch):
    """The blocked loop is for CPU caches; on any other device (here 'meta', shapes only) one broadcast."""
    B, T, S, n = 3, 4, 7, 5
    keys2, q = torch.randn(B, S, n), torch.randn(B, T, n)
    v, cov, w_c = torch.randn(n), torch.rand(B, T, S), torch.randn(n)
    calls = []
    monkeypatch.setattr(rnn_kernels, "_energy_in_blocks", lambda *a: calls.append("blocks") or _energy_in_blocks(*a))
    monkeypatch.setattr(rnn_kernels, "_energy_whole", lambda *a: calls.append("whole") or _energy_whole(*a))
    with torch.no_grad():
        on_cpu = additive_energy(keys2, q, v, cov, w_c)
        off_cpu = additive_energy(*(t.to("meta") for t in (keys2, q, v, cov, w_c)))
    assert calls == ["blocks", "whole"]
    assert on_cpu.shape == off_cpu.shape == (B, T, S) and off_cpu.device.type == "meta"


def test_deferred_context_gradient_equals_the_per_step_one():
    torch.manual_seed(0)
    memory = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    weights = [torch.rand(2, 5, dtype=torch.float64, requires_grad=True) for _ in range(4)]
    w = torch.randn(3, dtype=torch.float64)

    def loss(deferred: bool):
        ctx = DeferredContext(memory * 1.0) if deferred else None
        total = 0
        h = torch.zeros(2, 3, dtype=torch.float64)
        for a in weights:   # each context feeds the next step, as in the attention decoder
            c = ctx(a) if deferred else torch.bmm(a.unsqueeze(1), memory * 1.0).squeeze(1)
            h = torch.tanh(h + c)
            total = total + (h * w).sum()
        return total

    grads = [torch.autograd.grad(loss(d), [memory, *weights]) for d in (False, True)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(lambda m: DeferredContext(m)(weights[0].detach()).sum() * 1.0, (memory,))


def test_impl_option_is_checked():
    with pytest.raises(ValueError, match="impl"):
        build_model("bilstm", {"vocab_size": V}, {"impl": "fastest"})


def test_create_builds_the_class_that_runs_impl():
    """``create`` (what build_model and the registry call) builds the paper class for "reference" and its
    fast variant, a subclass with the same name and parameter names, for "fast" (the default); calling
    the class itself builds the reference only and says so for "fast"."""
    from seq2seq_zoo.models.fast.rnn import FastPointer
    from seq2seq_zoo.models.pointer import PointerGenerator
    from seq2seq_zoo.registry import MODELS
    fast, ref = MODELS.create("pointer_generator", vocab_size=V), PointerGenerator.create(vocab_size=V, impl="reference")
    assert type(ref) is PointerGenerator and ref.impl == "reference"
    assert type(fast) is PointerGenerator.fast_variant() and isinstance(fast, FastPointer) and fast.impl == "fast"
    assert type(fast).__name__ == "PointerGenerator" and type(fast).paper_class() is PointerGenerator
    assert fast.state_dict().keys() == ref.state_dict().keys()
    assert type(fast).create(vocab_size=V, impl="reference").__class__ is PointerGenerator
    assert type(PointerGenerator(vocab_size=V, impl="reference")) is PointerGenerator
    with pytest.raises(ValueError, match=r"PointerGenerator\.create"):
        PointerGenerator(vocab_size=V)


@pytest.mark.parametrize("name,opts", [("bahdanau", {}), ("bilstm", {"coverage": True}),
                                       ("pointer_generator", {"coverage": True})])
def test_fast_kernels_train_under_a_gpus_autocast(monkeypatch, name, opts):
    """On a GPU the fast kernels keep the caller's bf16 autocast (``fp32_on_cpu`` is a no-op there), so
    the attention energies and contexts leave the forward as bf16 matmul outputs, while the custom
    backward passes run without the forward's autocast. CPU bf16 autocast with ``fp32_on_cpu`` made a
    no-op stands in for the GPU: the step must run (it failed on an H200 with 'expected scalar type
    BFloat16 but found Float/Half' before the backward passes converted their operands) and give the
    fp32 loss and gradients to bf16 rounding."""
    import contextlib

    import seq2seq_zoo.models.fast.rnn as rnn_mod
    import seq2seq_zoo.models.fast.rnn_kernels as kernels_mod
    _, fast = pair(name, opts, dtype=torch.float32)
    batch = batch_with_padding()
    _, loss32, grads32 = loss_and_grads(fast, batch)
    for mod in (rnn_mod, kernels_mod):
        monkeypatch.setattr(mod, "fp32_on_cpu", lambda device: contextlib.nullcontext())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss16, grads16 = loss_and_grads(fast, batch)
    assert torch.isfinite(loss16) and float(loss16) == pytest.approx(float(loss32), rel=0.03)
    assert grads16.keys() == grads32.keys()
    for k, g in grads32.items():
        assert grads16[k].dtype == g.dtype and bool(torch.isfinite(grads16[k]).all()), k
    # the whole gradient to bf16 rounding (the attention parameters' own gradients are ~1e-3 of the
    # others', differences of softmax terms: in bf16 the step-by-step reference misses them by ~30% too)
    flat32 = torch.cat([g.flatten() for g in grads32.values()])
    flat16 = torch.cat([grads16[k].flatten() for k in grads32])
    assert float((flat16 - flat32).norm()) <= 0.05 * float(flat32.norm())


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=5), st.sampled_from(["lstm", "gru"]), st.booleans(),
       st.integers(0, 2**16), st.floats(0.1, 30.0))
def test_held_encoder_fuzzed_against_the_packed_run(lengths, kind, bidirectional, seed, scale):
    """Random source lengths (padding anywhere from none to all but one token), cell kinds, directions and
    input scales (large inputs push the gates' other terms up, where HOLD must still saturate them):
    the unpacked held run gives the packed run's outputs and final states."""
    from seq2seq_zoo.models.fast.rnn_kernels import _run_held
    torch.manual_seed(seed)
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    rnn = cls(4, 5, batch_first=True, bidirectional=bidirectional).double()
    S = max(lengths)
    lens = torch.tensor(lengths)
    mask = torch.arange(S) < lens.unsqueeze(1)
    x = torch.randn(len(lengths), S, 4, dtype=torch.float64) * scale
    out, final = _run_held(rnn, x, mask, lens)
    ref_out, ref_finals = packed_reference(rnn, x, mask)
    torch.testing.assert_close(out, ref_out)
    finals = final if isinstance(final, tuple) else (final,)
    assert len(finals) == len(ref_finals)
    for a, b in zip(finals, ref_finals):
        torch.testing.assert_close(a, b)


@pytest.mark.skipif(not (cpu_has_fast_bf16() and cpu_bf16_kernels()),
                    reason="no native bf16 on this CPU: the encoder stays in fp32 there")
@pytest.mark.parametrize("cls,bidirectional", [(torch.nn.LSTM, True), (torch.nn.LSTM, False), (torch.nn.GRU, False)])
def test_encoder_runs_in_bf16_under_cpu_autocast(cls, bidirectional):
    """Under CPU bf16 autocast with native bf16 a one-layer encoder runs as the reference's autocast run
    does: an LSTM held in bf16 (bf16 outputs), a unidirectional GRU padded under the autocast (fp32
    outputs); exactly zero at padding, fp32 final states, all within bf16 rounding of the fp32 packed
    run, with gradients to match and none at padded positions."""
    torch.manual_seed(0)
    rnn = cls(8, 16, batch_first=True, bidirectional=bidirectional)
    mask = torch.arange(12) < torch.tensor([12, 9, 1, 5]).unsqueeze(1)
    x = torch.randn(4, 12, 8, requires_grad=True)
    params = [x] + list(rnn.parameters())

    def loss_of(out, finals):
        g = torch.Generator().manual_seed(1)
        return (out.float() * torch.randn(out.shape, generator=g)).sum() + sum(
            (f * torch.randn(f.shape, generator=g)).sum() for f in finals)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, final = run_encoder(rnn, x, mask)
    finals = final if isinstance(final, tuple) else (final,)
    assert out.dtype == (torch.bfloat16 if cls is torch.nn.LSTM else torch.float32)
    assert all(f.dtype == torch.float32 for f in finals)
    assert bool((out[~mask] == 0).all())
    grads = torch.autograd.grad(loss_of(out, finals), params)
    ref_out, ref_finals = packed_reference(rnn, x, mask)
    ref_grads = torch.autograd.grad(loss_of(ref_out, ref_finals), params)
    torch.testing.assert_close(out.float(), ref_out, atol=3e-2, rtol=3e-2)
    for a, b in zip(finals, ref_finals):
        torch.testing.assert_close(a, b, atol=3e-2, rtol=3e-2)
    for a, b in zip(grads, ref_grads):
        assert float((a.float() - b).norm()) <= 0.03 * float(b.norm())
    assert bool((grads[0][~mask] == 0).all())   # held gates pass no gradient into padding


@pytest.mark.parametrize("name,opts", [("gru", {}), ("bahdanau", {}), ("bilstm", {"coverage": True}),
                                       ("pointer_generator", {"coverage": True})])
def test_fast_models_train_under_cpu_bf16_autocast(name, opts):
    """A CPU bf16 training step of the fast implementation (the encoder in bf16 where oneDNN has bf16
    kernels, the decoder cell and energies in fp32) gives the fp32 step's loss and gradients to bf16
    rounding, and a bf16 greedy decode runs."""
    _, fast = pair(name, opts, dtype=torch.float32)
    batch = batch_with_padding()
    _, loss32, grads32 = loss_and_grads(fast, batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss16, grads16 = loss_and_grads(fast, batch)
    assert torch.isfinite(loss16) and float(loss16) == pytest.approx(float(loss32), rel=0.03)
    assert grads16.keys() == grads32.keys()
    flat32 = torch.cat([g.flatten() for g in grads32.values()])
    flat16 = torch.cat([grads16[k].flatten().float() for k in grads32])
    assert float((flat16 - flat32).norm()) <= 0.05 * float(flat32.norm())
    fast.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        hyps = greedy(fast, batch, DecodeConfig(method="greedy", max_len=5, min_len=1))
    assert len(hyps) == batch.size


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_stacked_cell_products_in_bf16_keep_fp32_states_and_weight_gradients(cls):
    """``StackedCell(low=bf16)`` (CPU bf16 autocast with native bf16 products): the products run in bf16,
    the states and gates in fp32; one step of a two-layer cell stays within bf16 rounding of the fp32
    step, and the fp32 parameters get fp32 gradients close to the fp32 step's."""
    from seq2seq_zoo.models.fast.rnn_kernels import StackedCell, cpu_bf16_matmuls
    torch.manual_seed(0)
    rnn = cls(6 + 5, 8, num_layers=2)
    x, side = torch.randn(4, 6), torch.randn(4, 5)
    hid = (torch.randn(2, 4, 8),) + ((torch.randn(2, 4, 8),) if cls is torch.nn.LSTM else ())
    outs = {}
    for low in (None, torch.bfloat16):
        rnn.zero_grad()
        cell = StackedCell(rnn, 6, False, low)
        h, new = cell(cell.project_steps(x), side, hid)
        assert h.dtype == torch.float32 and all(t.dtype == torch.float32 for t in new)
        (h.sum() + sum(t.sum() for t in new)).backward()
        outs[low] = (h.detach(), [p.grad.clone() for p in rnn.parameters()])
    torch.testing.assert_close(outs[torch.bfloat16][0], outs[None][0], atol=3e-2, rtol=3e-2)
    for a, b in zip(outs[torch.bfloat16][1], outs[None][1]):
        assert a.dtype == torch.float32 and float((a - b).norm()) <= 0.03 * float(b.norm()) + 1e-6
    assert cpu_bf16_matmuls(x) is None     # outside bf16 autocast the cell stays in fp32


@pytest.mark.parametrize("name", ["gru", "bahdanau", "bilstm", "pointer_generator"])
@pytest.mark.parametrize("output_layers", [1, 2])
def test_fast_training_loss_fuses_the_last_output_layer(name, output_layers, monkeypatch):
    """The fast path's training loss takes P_vocab's last linear layer's weights into the fused loss and
    never runs that layer on the (B, T) features (no (B, T, V) logits), with See et al.'s two-layer
    P_vocab too; reading ``log_probs`` still runs it."""
    _, fast = pair(name, {"output_layers": output_layers}, dtype=torch.float32)
    last = fast.output[-1] if output_layers == 2 else fast.output
    calls = []
    monkeypatch.setattr(last, "forward", lambda x: calls.append(x.shape) or torch.nn.functional.linear(
        x, last.weight, last.bias))
    batch = batch_with_padding()
    out = fast(batch)
    loss, _, _ = out.token_losses(batch.tgt_out, label_smoothing=0.1, smooth_width=V)
    loss.backward()
    assert calls == []
    assert out.log_probs.shape[:2] == batch.tgt_out.shape and len(calls) == 1
