"""Mixed precision: which autocast dtype a run uses, and the autocast context for it. Shared by the
training loop, data-parallel training, decoding and evaluation."""
from __future__ import annotations

import contextlib
import weakref
import functools
import json
from pathlib import Path

import torch

from seq2seq_zoo.names import run_group
from seq2seq_zoo.utils import cpu_has_fast_bf16, seed_span


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """None = full fp32. 'auto' picks bf16 where the hardware runs it fast (AMX CPUs, Ampere+ GPUs)."""
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        return torch.float16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_has_fast_bf16() else None


def precision_name(dtype: torch.dtype | None) -> str:
    """How a record names a trained run's precision: 'fp32', 'bfloat16' or 'float16'."""
    return str(dtype).replace("torch.", "") if dtype else "fp32"


def seeds_by_precision(records) -> dict[str, list[int]]:
    """{training precision: seeds} over run records; an untrained baseline ('none (not trained)') is
    left out. Shared by the findings' *mixed precision* flag and the note below."""
    out: dict[str, list[int]] = {}
    for rec in records:
        prec, seed = (rec.get("train") or {}).get("precision"), rec.get("seed")
        if isinstance(prec, str) and not prec.startswith("none") and isinstance(seed, int):
            out.setdefault(prec, []).append(seed)
    return out


def sibling_precision_note(out: Path, run: str, seed, mine: str, setting: str) -> str | None:
    """A line for the log when the other seeds of this run, already in ``out``'s experiment folder, were
    trained in another precision than ``mine``, else None. ``precision = "auto"`` resolves per machine,
    so a seed added on another machine can differ from the first ones unless the file pins it."""
    group = run_group(run, seed)
    siblings = []
    for rec_path in out.parent.glob(f"{group}-seed*/record.json"):
        if rec_path.parent == out:
            continue
        try:
            rec = json.loads(rec_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue   # a damaged sibling is the report's business, not this run's
        if isinstance(rec, dict) and rec.get("run") == f"{group}-seed{rec.get('seed')}":
            siblings.append(rec)
    other = {p: s for p, s in seeds_by_precision(siblings).items() if p != mine}
    if not other:
        return None
    theirs = "; ".join(f"{seed_span(s, word=True)} in {p}" for p, s in sorted(other.items()))
    return (f"[{run}] note: this seed trains in {mine} (train.precision = \"{setting}\" here); {group} "
            f"trained {theirs}. Findings that compare these seeds are flagged 'mixed precision' and tested "
            f"again with the precision as a factor; pin train.precision in the profile to keep a run's seeds "
            f"alike.")


@functools.cache   # the CPU does not change; autocast() is entered at every training step
def cpu_bf16_kernels() -> bool:
    """Whether oneDNN has bf16 kernels on this CPU (AVX512-BF16/AMX or AVX512 emulation). Without them
    its LSTM cannot be built for bf16 ("could not create a primitive descriptor"), e.g. on AVX2-only CPUs."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@contextlib.contextmanager
def _onednn_off():
    # not torch.backends.mkldnn.flags(enabled=False): it also resets oneDNN's TF32 setting and warns on CPU
    prev = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = prev


def autocast(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` for ``dtype`` on ``device``; a no-op context for full fp32 (dtype None).

    bf16 on a CPU without oneDNN bf16 kernels (only where asked for: 'auto' picks fp32 there) runs with
    oneDNN off, so that LSTMs take PyTorch's own kernels instead of failing; slow, but it runs."""
    if dtype is None:
        return contextlib.nullcontext()
    if device.type == "cpu" and dtype == torch.bfloat16 and not cpu_bf16_kernels():
        stack = contextlib.ExitStack()
        stack.enter_context(_onednn_off())
        stack.enter_context(torch.autocast(device_type="cpu", dtype=dtype))
        return stack
    return torch.autocast(device_type=device.type, dtype=dtype)


DECODE_PRECISIONS = ("auto", "int8")   # decode.precision: the run's own precision, or int8 linear layers


_INT8: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # nn.Linear -> (weight stamp, packed int8)


def _int8_packed(m: torch.nn.Linear):
    """``m``'s weight quantised to int8 per output channel (symmetric: scale = max |w| / 127.5, as
    torch.ao's per-channel weight observer) and packed for fbgemm, cached until the weight changes."""
    stamp = (m.weight.data_ptr(), m.weight._version, None if m.bias is None else m.bias._version)
    hit = _INT8.get(m)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    import warnings
    w = m.weight.detach().float()
    scale = (w.abs().amax(1) / 127.5).clamp(min=1e-8).double()
    bias = None if m.bias is None else m.bias.detach().float()
    with warnings.catch_warnings():   # quantised tensors are deprecated in favour of torchao's, same kernels
        warnings.simplefilter("ignore")
        qw = torch.quantize_per_channel(w, scale, torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(qw, bias)
    _INT8[m] = (stamp, packed)
    return packed


@functools.cache
def _int8_reduce_range() -> bool:
    """Whether inputs are quantised to 7 bits instead of 8: needed where int8 products are summed in pairs
    into 16 bits and can saturate (AVX2's vpmaddubsw), not with VNNI (AVX512-VNNI, AVX-VNNI, AMX), which
    sums into 32 bits. torch.ao's default is 7 bits everywhere; 8 bits halves the rounding of the inputs."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return True
    return not any(f in flags for f in ("avx512_vnni", "avx_vnni", "amx_int8"))


@contextlib.contextmanager
def int8_linears(model: torch.nn.Module, enabled: bool = True):
    """Inference with every ``nn.Linear`` of ``model`` in int8 (``decode.precision = "int8"``): PyTorch's
    dynamic quantisation kernels (``quantized::linear_dynamic``: int8 weights per output channel,
    activations quantised per call to 8 bits where the CPU has VNNI, else 7 (``_int8_reduce_range``);
    fbgemm's kernels on x86), the arithmetic of ``torch.ao.quantization.quantize_dynamic`` with a
    per-channel weight observer. Done by giving each
    layer an instance ``forward`` for the duration (the fp32 weights stay where they are), not by
    swapping modules as ``quantize_dynamic`` does: code that reads a layer's ``weight`` itself (the
    recurrent models' fused attention and output kernels) keeps working, in fp32 there. Embeddings,
    recurrent cells, attention products, layer norms and the softmax stay in fp32. The packed weights are
    cached per layer until its weight changes, so a split decoded batch by batch quantises once. A no-op
    when ``enabled`` is false, with grad enabled, on CUDA (no such kernels) or without fbgemm."""
    if not enabled or torch.is_grad_enabled() or "fbgemm" not in torch.backends.quantized.supported_engines:
        yield model
        return

    def int8_forward(m: torch.nn.Linear):
        packed = _int8_packed(m)

        def forward(x, packed=packed, reduce=_int8_reduce_range()):
            y = torch.ops.quantized.linear_dynamic(x.float().contiguous(), packed, reduce)
            return y if x.dtype == torch.float32 else y.to(x.dtype)
        return forward
    with cpu_linear_forwards(model, int8_forward):
        yield model


@contextlib.contextmanager
def cpu_linear_forwards(model: torch.nn.Module, make):
    """Each plain ``nn.Linear`` of ``model`` on the CPU that has no instance ``forward`` of its own runs
    ``make(layer)`` as its forward for the duration; the layers are restored after. The layers
    ``int8_linears`` runs in int8, and those the bench's int8 bound (``bench.measure.linears_free``) takes
    out: both choose them here, so they are the same layers."""
    patched = []
    try:
        for m in model.modules():
            if type(m) is not torch.nn.Linear or m.weight.device.type != "cpu" or "forward" in m.__dict__:
                continue
            m.forward = make(m)
            patched.append(m)
        yield model
    finally:
        for m in patched:
            del m.forward
