"""`zoo bench`: training and decoding throughput of our models against a Hugging Face BART peer of the
same shape, measured in one process, against the suite's speed targets (TARGET_* below).

Every figure comes from random token batches of fixed shapes (no data needed), except the epoch-time
scaling, which runs the pe_ablation CPU profile on the real DialogSum training set. The machines these
numbers come from are shared and noisy, so the headline is always a ratio measured in the same process:
the timed iterations of the models being compared are interleaved (ours, peer, ours, peer, ...) and the
median of each is taken, so a burst of load from a neighbour hits both alike.

Definitions (also written into the output):
  training tokens/s  non-pad target tokens per second of a full update (forward, loss, backward,
                     gradient clipping, optimizer step)
  decoding tokens/s  generated tokens per second (beam search, forced to exactly ``dec_len`` tokens)
  model FLOP/s       estimated with the 6 * params * tokens rule applied per stack:
                     6 * (encoder matmul params * source tokens + (decoder + output projection) matmul
                     params * target tokens); embedding lookups and attention-score matmuls not counted
  MFU                model FLOP/s divided by a bf16 (and an fp32) 2048x2048 matmul peak measured in the run
  decoding bound     the least matmul FLOPs of a beam call (beam_decode_flops) at the rate of a square
                     product timed among the decoders (median, same load): the shortest time any
                     implementation could take; the peer's time over it is the highest ratio it allows
  peak memory        CPU: peak resident memory above the stage's starting point, sampled every 5 ms
                     (and the process high-water mark from getrusage); CUDA: torch.cuda.max_memory_allocated
"""
from __future__ import annotations

import os
import resource
import statistics
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from seq2seq_zoo.config import DecodeConfig, TrainConfig
from seq2seq_zoo.data.batching import Batch, Encoded, bucket_batches, collate
from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.models.base import build_model, count_parameters
from seq2seq_zoo.registry import MODELS, OBJECTIVES
from seq2seq_zoo.precision import autocast, autocast_dtype
from seq2seq_zoo.train.loop import TrainStep, build_optimizer

RNN_MODELS = ("gru", "bahdanau", "bilstm", "pointer_generator")

# The suite's speed targets; the bench prints whether each is met and by how much.
TARGET_TRAIN_VS_PEER = 1.5     # our default precision vs the peer's best precision (aim: 2.0)
TARGET_TRAIN_AIM = 2.0
TARGET_FP32_PARITY = 1.0       # our fp32 vs the peer's fp32
TARGET_DECODE_VS_PEER = 3.0    # beam-4 decoding
TARGET_EPOCH_S = 300.0         # one epoch of the pe_ablation CPU profile on DialogSum
TARGET_BENCH_S = 300.0         # `zoo bench` on CPU


@dataclass
class Shape:
    """The sizes measured. PAPER is the seed paper's Transformer (pe_ablation defaults) at the speed targets'
    batch shape; the recurrent models use rnn_progression's defaults (emb 128, hidden 256)."""
    vocab: int = 15000
    d_model: int = 300
    d_ff: int = 600
    heads: int = 10
    layers: int = 3
    dropout: float = 0.1
    batch: int = 32
    src_len: int = 256
    tgt_len: int = 64          # decoder positions per example: 63 words + <eos>
    dec_sources: int = 8
    dec_len: int = 48
    beams: int = 4
    rnn_emb: int = 128
    rnn_hidden: int = 256
    oovs: int = 2              # source words outside the vocabulary per example (copy models use them)


PAPER = Shape()
# A Transformer that fills a GPU (run on CUDA only): head size 64, so the causal self-attention takes SDPA's
# flash kernel; trained on token batches (train.batch_size = 0, train.max_tokens = GPU_MAX_TOKENS) of
# sources 256-512 and targets 64-128 tokens, as the training loop builds them.
GPU_SHAPE = Shape(vocab=32000, d_model=1024, d_ff=4096, heads=16, layers=6, batch=0, src_len=512, tgt_len=128)
GPU_MAX_TOKENS = 65536         # padded source + target tokens per batch
TARGET_GPU_MFU = 0.40          # model FLOP/s / measured bf16 matmul peak, at GPU_SHAPE
# A GPU's peak is measured on a larger product than a CPU's: on an H200 a 2048³ bf16 product ran at
# 386 TFLOP/s (results/bench_gpu, 2026-11-26), half of the ~790 that 8192³ products reach there
GPU_MATMUL_N = 8192
TINY = Shape(vocab=60, d_model=16, d_ff=32, heads=2, layers=1, batch=2, src_len=12, tgt_len=6, dec_sources=2,
             dec_len=4, beams=2, rnn_emb=8, rnn_hidden=16)


@dataclass
class Plan:
    """How long to measure: warm-up and timed iterations per figure."""
    warmup: int = 1
    iters: int = 4
    decode_iters: int = 3
    matmul_n: int = 2048
    matmul_iters: int = 8
    scaling_steps: int = 16       # sampled updates per dataset fraction
    beam_sizes: tuple[int, ...] = (1, 2, 4, 8)
    compile: bool = False         # also time our Transformer's training step under torch.compile
    rnn_iters: int = 2            # timed rounds per recurrent model, implementation and precision
    eval_examples: int = 1000     # examples scored in the evaluation-cost stage (0: skip the stage)


FULL_PLAN = Plan()
QUICK_PLAN = Plan(warmup=1, iters=2, decode_iters=2, matmul_iters=4, scaling_steps=6, rnn_iters=1, eval_examples=200)


# ------------------------------------------------------------------------------------------- helpers
def log(msg: str) -> None:
    print(msg, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release_free_memory() -> None:
    """Give memory freed by earlier stages back to the OS (gc, then glibc's malloc_trim), so that the
    resident set size at a stage's start is what is live and its growth is the stage's own."""
    import ctypes
    import gc
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the baseline then includes freed memory
        pass


class PeakMemory:
    """Peak memory of a block. CPU: resident set size sampled every 5 ms by a thread, minus the RSS at
    entry (the working memory the block adds), plus the process high-water mark; CUDA: the allocator's
    peak."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak_mb = 0.0
        self.process_max_rss_mb = 0.0

    @staticmethod
    def rss_mb() -> float:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except (OSError, ValueError):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            return self
        release_free_memory()
        self._base = self.rss_mb()
        self._max = self._base
        self._stop = threading.Event()

        def sample():
            while not self._stop.wait(0.005):
                self._max = max(self._max, self.rss_mb())

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = (torch.cuda.max_memory_allocated(self.device) - self._base) / 2**20
            self.process_max_rss_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
            return False
        self._stop.set()
        self._thread.join()
        self._max = max(self._max, self.rss_mb())
        self.peak_mb = self._max - self._base
        self.process_max_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return False


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, device: torch.device,
                probe: MatmulProbe | None = None) -> dict[str, list[float]]:
    """Seconds per call of each function, timed in turn (a, b, a, b, ...) so noise hits all alike.
    ``probe``, if given, is timed in every round among them; its times land in ``probe.times``."""
    calls = {**fns, **({"_probe": probe} if probe else {})}
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    if probe:
        probe.times = times.pop("_probe")
    return times


def error_line(e: BaseException) -> str:
    """An exception as one line for a report: its type and the first line of its message."""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def precision_name(dtype: torch.dtype | None) -> str:
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


# ------------------------------------------------------------------------------------------ batches
def random_examples(shape: Shape, n: int, seed: int = 0, src_len: int | None = None,
                    tgt_len: int | None = None) -> list[Encoded]:
    """``n`` examples of random in-vocabulary words (ids >= 4: no specials): sources of exactly
    ``src_len`` tokens, targets of ``tgt_len - 1`` words (+ <eos> = ``tgt_len`` decoder positions). Each
    source has ``shape.oovs`` out-of-vocabulary words (extended ids |V|+k) that its target repeats once."""
    g = np.random.default_rng(seed)
    S = src_len or shape.src_len
    T = (tgt_len or shape.tgt_len) - 1
    V = shape.vocab
    out = []
    for i in range(n):
        src = g.integers(4, V, S)
        tgt = g.integers(4, V, T)
        src_ext, tgt_ext = src.copy(), tgt.copy()
        k = min(shape.oovs, S, T)
        oovs = [f"oov{j}" for j in range(k)]
        for j in range(k):
            src[j] = 1                          # <unk> in the in-vocabulary view
            src_ext[j] = V + j
            tgt[j] = 1
            tgt_ext[j] = V + j
        out.append(Encoded(id=f"b{i}", src=src, src_ext=src_ext, oovs=oovs, tgt=tgt, tgt_ext=tgt_ext,
                           references=[""], source_text=""))
    return out


def shaped_batch(shape: Shape, n: int | None = None, seed: int = 0) -> Batch:
    return collate(random_examples(shape, n or shape.batch, seed))


def target_tokens(batch: Batch) -> int:
    return int((batch.tgt_out != PAD_ID).sum())


def source_tokens(batch: Batch) -> int:
    return int((batch.src != PAD_ID).sum())


# ------------------------------------------------------------------------------------------- models
def context(shape: Shape) -> dict[str, Any]:
    return {"vocab_size": shape.vocab, "max_src_len": shape.src_len, "max_tgt_len": shape.tgt_len,
            "vocab_size_ext": shape.vocab + shape.oovs}


def our_transformer(shape: Shape, device: torch.device, seed: int = 0):
    torch.manual_seed(seed)
    opts = dict(d_model=shape.d_model, d_ff=shape.d_ff, heads=shape.heads, layers=shape.layers,
                dropout=shape.dropout)
    return build_model("transformer", context(shape), opts).to(device), opts


def our_model(name: str, shape: Shape, device: torch.device, seed: int = 0, **extra):
    """A registered model at the bench shape: the Transformer with the paper's sizes, the recurrent
    models with rnn_progression's (emb_dim, hidden, dropout); options a model does not take are left
    out. ``extra``: further options (e.g. ``impl``)."""
    if name == "transformer":
        return our_transformer(shape, device, seed)
    from seq2seq_zoo.registry import model_options
    known = model_options(name)
    want = dict(emb_dim=shape.rnn_emb, hidden=shape.rnn_hidden, dropout=shape.dropout, **extra)
    opts = {k: v for k, v in want.items() if k in known}
    torch.manual_seed(seed)
    return build_model(name, context(shape), opts).to(device), opts


def peer_config(shape: Shape) -> dict[str, Any]:
    """Hugging Face BART of our Transformer's shape; defaults otherwise (dropout 0.1, attention and
    activation dropout 0, SDPA attention), except ReLU in the feed-forward layers as in ours."""
    return dict(vocab_size=shape.vocab, d_model=shape.d_model, encoder_layers=shape.layers,
                decoder_layers=shape.layers, encoder_attention_heads=shape.heads,
                decoder_attention_heads=shape.heads, encoder_ffn_dim=shape.d_ff, decoder_ffn_dim=shape.d_ff,
                max_position_embeddings=max(shape.src_len, shape.tgt_len + 2), dropout=shape.dropout,
                activation_function="relu", pad_token_id=PAD_ID, bos_token_id=2, eos_token_id=3,
                decoder_start_token_id=2, forced_bos_token_id=None, forced_eos_token_id=None)


def peer_available() -> str | None:
    """None if the HF peer can be built, else why not."""
    try:
        import transformers  # noqa: F401
        from transformers import BartConfig, BartForConditionalGeneration  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means: no peer
        return f"transformers not importable ({type(e).__name__}: {e})"
    return None


def peer_model(shape: Shape, device: torch.device, seed: int = 0):
    from transformers import BartConfig, BartForConditionalGeneration
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    torch.manual_seed(seed)
    return BartForConditionalGeneration(BartConfig(**peer_config(shape))).to(device)


def flop_params(model) -> dict[str, int]:
    """Parameters that take part in a matmul per token, per stack: {encoder, decoder, output}.

    Ours: the model's components() (embedding tables skipped, a tied output projection counted as
    output). HF BART: its encoder/decoder linear layers and lm_head; eole: its encoder, decoder and
    generator. Only weights and biases of linear
    and recurrent layers count (embedding lookups and positional tables are not matmuls)."""
    matmul_mods = (torch.nn.Linear, torch.nn.RNNBase, torch.nn.RNNCellBase)
    owner: dict[int, bool] = {}
    for m in model.modules():
        if isinstance(m, matmul_mods):
            for p in m.parameters(recurse=False):
                owner[id(p)] = True
    if hasattr(model, "components"):
        out = {"encoder": 0, "decoder": 0, "output": 0}
        for comp, params in model.components().items():
            if comp == "embedding":
                continue
            key = comp if comp in out else "decoder"
            out[key] += sum(p.numel() for p in params if owner.get(id(p)))
        return out
    def count(mod):
        return sum(p.numel() for m in mod.modules() if isinstance(m, matmul_mods) for p in m.parameters(recurse=False))

    if not hasattr(model, "model"):   # eole: encoder, decoder, generator
        return {"encoder": count(model.encoder), "decoder": count(model.decoder), "output": count(model.generator)}
    inner = model.model  # HF BART

    return {"encoder": count(inner.encoder), "decoder": count(inner.decoder), "output": count(model.lm_head)}


def train_flops(fp: dict[str, int], src_tokens: int, tgt_tokens: int) -> float:
    """6 * params * tokens per stack (forward 2, backward 4 FLOPs per parameter and token)."""
    return 6.0 * (fp["encoder"] * src_tokens + (fp["decoder"] + fp["output"]) * tgt_tokens)


def beam_decode_flops(shape: Shape, beams: int, *, per_hypothesis: bool = False, attention: bool = True) -> float:
    """Matmul FLOPs of a beam search of the Transformer at ``shape`` forced to ``shape.dec_len`` tokens,
    counted from the shape alone (2 FLOPs a multiply-add; biases, norms, softmax and top-k not counted).

    The least any implementation must do (``per_hypothesis=False``): the encoder once per source (its
    linear layers and, with ``attention``, the score and value products), the cross-attention keys and
    values once per source, then at every step, for every live hypothesis (one per source at the first
    step, ``beams`` after), the decoder's query/output/feed-forward layers, the self- and cross-attention
    products and the output projection. ``per_hypothesis=True`` counts what HF ``generate`` does: every
    beam from the first step, and the cross-attention keys and values computed for every beam."""
    d, f, L, S, V = shape.d_model, shape.d_ff, shape.layers, shape.src_len, shape.vocab
    n, T = shape.dec_sources, shape.dec_len
    att = 1 if attention else 0
    encoder = n * L * (S * (4 * d * d + 2 * d * f) + att * 2 * S * S * d)
    cross_kv = n * (beams if per_hypothesis else 1) * L * S * 2 * d * d
    steps = 0
    for t in range(T):
        rows = n * beams if (per_hypothesis or t > 0) else n
        steps += rows * (L * (6 * d * d + 2 * d * f + att * 2 * ((t + 1) * d + S * d)) + d * V)
    return 2.0 * (encoder + cross_kv + steps)


def decode_bound(shape: Shape, decoding: dict[str, dict], peak_gflops: float | None,
                 precision: str) -> dict[str, Any] | None:
    """What the matmul rate allows beam decoding: the least matmul work of a call (beam_decode_flops) at
    ``peak_gflops`` (the ``precision`` product's rate, timed among the decoders: MatmulProbe) is the
    shortest time any implementation could take, so the peer's best time over it is the highest ratio
    against the peer this machine can show. Each of our timings in that precision is also given as the
    share of that rate it reached."""
    ours = {k: v for k, v in decoding.items() if k.startswith("ours_") and v["precision"] == precision}
    if not peak_gflops or not ours:
        return None
    gflop = beam_decode_flops(shape, shape.beams) / 1e9
    min_s = gflop / peak_gflops
    out = {"min_gflop": gflop, "peer_gflop": beam_decode_flops(shape, shape.beams, per_hypothesis=True) / 1e9,
           "precision": precision, "peak_gflops": peak_gflops, "min_s": min_s,
           "ours": {k: {"seconds": v["seconds"], "share_of_peak": min_s / v["seconds"]} for k, v in ours.items()}}
    peers = {k: v for k, v in decoding.items() if k.startswith("peer_")}
    if peers:
        best = min(peers, key=lambda k: peers[k]["seconds"])
        out["peer_best"] = best
        out["ceiling_vs_peer"] = peers[best]["seconds"] / min_s
    return out


# --------------------------------------------------------------------------------------- measurements
def peak_matmul_n(device: torch.device, plan: Plan) -> int:
    """Side of the square product that measures a device's matmul peak: the plan's on a CPU, at least
    GPU_MATMUL_N on a GPU (smaller products leave much of a large GPU idle)."""
    return plan.matmul_n if device.type == "cpu" else max(plan.matmul_n, GPU_MATMUL_N)


class MatmulProbe:
    """An n x n x n product timed among the compared calls (interleaved with them), so that a bound taken
    against its rate sees the same load as they do: on a shared machine the best-of-n peak measured at the
    start can come from a quiet moment the later timings never had. ``gflops`` is the median rate."""

    def __init__(self, device: torch.device, dtype: torch.dtype | None, n: int = 1024):
        g = torch.Generator(device="cpu").manual_seed(0)
        self.device, self.flops = device, 2 * n ** 3
        self.a, self.b = (torch.randn(n, n, generator=g).to(device=device, dtype=dtype or torch.float32)
                          for _ in range(2))
        self.times: list[float] = []

    def __call__(self):
        return self.a @ self.b

    @property
    def gflops(self) -> float | None:
        return self.flops / median(self.times) / 1e9 if self.times else None


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int = 2048, iters: int = 8) -> float:
    """GFLOP/s of an n x n x n matmul, best of ``iters`` (the hardware's attainable rate)."""
    probe = MatmulProbe(device, dtype, n)
    for _ in range(2):
        probe()
    return probe.flops / min(interleaved({"peak": probe}, iters, device)["peak"]) / 1e9


class Trainer:
    """One full update of a model on a fixed batch: autocast forward + loss, backward, gradient clipping,
    optimizer step. ``kind`` 'ours' is the training loop's own step (``train.loop.TrainStep``: the
    registered objective with label smoothing 0.1 as in pe_ablation, loss scaling, the loop's
    optimizer); 'peer' the same update written for the HF model (its own loss, no smoothing, AdamW)."""

    def __init__(self, model, batch: Batch, device: torch.device, dtype: torch.dtype | None, kind: str = "ours",
                 label_smoothing: float = 0.1, clip_norm: float = 1.0):
        self.model, self.batch, self.device, self.dtype, self.kind = model, batch.to(device), device, dtype, kind
        self.clip = clip_norm
        model.train()
        cfg = TrainConfig(betas=[0.9, 0.98], eps=1e-9, lr=1e-4, label_smoothing=label_smoothing, clip_norm=clip_norm)
        if kind == "ours":
            self.step = TrainStep(model, OBJECTIVES.get("ce")(label_smoothing=label_smoothing, cfg=cfg), cfg,
                                  device, dtype, lr=cfg.lr)
        else:
            self.params = list(model.parameters())
            self.opt = build_optimizer(self.params, replace(cfg, optimizer="adamw"))
            self.labels = self.batch.tgt_out.masked_fill(self.batch.tgt_out == PAD_ID, -100)
            self.labels = self.labels.masked_fill(self.labels >= model.config.vocab_size, 1)
        self.src_tokens, self.tgt_tokens = source_tokens(batch), target_tokens(batch)

    def __call__(self) -> float:
        if self.kind == "ours":
            return self.step(self.batch)
        with autocast(self.device, self.dtype):
            b = self.batch
            loss = self.model(input_ids=b.src, attention_mask=b.src != PAD_ID, decoder_input_ids=b.tgt_in,
                              labels=self.labels).loss
        return peer_update(loss, self.params, self.opt, self.clip)


def peer_update(loss: torch.Tensor, params, opt, clip: float) -> torch.Tensor:
    """A peer's update after its forward: backward, gradient clipping, optimizer step."""
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def train_figures(trainer: Trainer, times: list[float], fp: dict[str, int], peaks: dict[str, float],
                  mem: PeakMemory | None) -> dict[str, Any]:
    s = median(times)
    flops = train_flops(fp, trainer.src_tokens, trainer.tgt_tokens) / s
    out = {"precision": precision_name(trainer.dtype), "step_s": s, "step_s_all": times,
           "tokens_per_s": trainer.tgt_tokens / s,
           "src_tgt_tokens_per_s": (trainer.src_tokens + trainer.tgt_tokens) / s,
           "model_gflops": flops / 1e9, "flop_params": fp,
           "mfu_bf16": flops / 1e9 / peaks["bf16"] if peaks.get("bf16") else None,
           "mfu_fp32": flops / 1e9 / peaks["fp32"] if peaks.get("fp32") else None}
    if mem is not None:
        out["peak_mem_mb"] = mem.peak_mb
        out["process_max_rss_mb"] = mem.process_max_rss_mb
    return out


def measure_training(trainers: dict[str, Trainer], plan: Plan, fps: dict[str, dict[str, int]],
                     peaks: dict[str, float], progress: Callable[[str], None] = log,
                     probe: MatmulProbe | None = None) -> dict[str, dict]:
    """Warm each trainer up alone (its peak memory is taken there), then time them interleaved (with
    ``probe``, if given, timed in every round among them: its times land in ``probe.times``)."""
    mems = {}
    for name, tr in trainers.items():
        progress(f"    warm-up {name}")
        with PeakMemory(tr.device) as mem:
            for _ in range(plan.warmup):
                tr()
            sync(tr.device)
        mems[name] = mem
    progress(f"    timing {', '.join(trainers)}: {plan.iters} interleaved rounds")
    times = interleaved(trainers, plan.iters, next(iter(trainers.values())).device, probe)
    return {name: train_figures(tr, times[name], fps[name], peaks, mems[name]) for name, tr in trainers.items()}


class OurDecoder:
    """Beam search of a registered model, forced to exactly ``length`` tokens (min_len = max_len), no
    length penalty or n-gram blocking, in the given autocast precision."""

    def __init__(self, model, batch: Batch, device, dtype, beams: int, length: int):
        from seq2seq_zoo.decode import generate
        self._generate = generate
        self.model, self.batch, self.device, self.dtype = model.eval(), batch.to(device), device, dtype
        self.cfg = DecodeConfig(method="beam", beam_size=beams, min_len=length, max_len=length,
                                length_penalty=0.0, length_penalty_style="none", batch_size=batch.size)
        self.tokens = batch.size * length

    def __call__(self):
        with torch.no_grad(), autocast(self.device, self.dtype):
            return self._generate(self.model, self.batch, self.cfg)


class PeerDecoder:
    """HF ``generate`` with the same settings: ``beams`` beams, exactly ``length`` new tokens."""

    def __init__(self, model, batch: Batch, device, dtype, beams: int, length: int):
        from transformers import GenerationConfig
        self.model, self.device, self.dtype = model.eval(), device, dtype
        self.src = batch.src.to(device)
        self.mask = self.src != PAD_ID
        self.gen = GenerationConfig(num_beams=beams, max_new_tokens=length, min_new_tokens=length, do_sample=False,
                                    length_penalty=0.0, no_repeat_ngram_size=0, early_stopping=False,
                                    use_cache=True, pad_token_id=PAD_ID, bos_token_id=2, eos_token_id=3,
                                    decoder_start_token_id=2, forced_bos_token_id=None, forced_eos_token_id=None)
        self.tokens = batch.size * length

    def __call__(self):
        with torch.no_grad(), autocast(self.device, self.dtype):
            return self.model.generate(input_ids=self.src, attention_mask=self.mask, generation_config=self.gen)


def measure_decoding(decoders: dict[str, Any], plan: Plan, progress: Callable[[str], None] = log,
                     probe: MatmulProbe | None = None) -> dict[str, dict]:
    """Warm each decoder up alone (peak memory), then time them interleaved (``probe`` as in
    measure_training)."""
    mems = {}
    device = None
    for name, dec in decoders.items():
        device = dec.device
        progress(f"    warm-up {name}")
        with PeakMemory(dec.device) as mem:
            dec()
        mems[name] = mem
    progress(f"    timing {', '.join(decoders)}: {plan.decode_iters} interleaved rounds")
    times = interleaved(decoders, plan.decode_iters, device, probe)
    out = {}
    for name, dec in decoders.items():
        s = median(times[name])
        out[name] = {"precision": precision_name(dec.dtype), "seconds": s, "seconds_all": times[name],
                     "tokens": dec.tokens, "tokens_per_s": dec.tokens / s, "peak_mem_mb": mems[name].peak_mb}
    return out


# ----------------------------------------------------------------------------------- epoch scaling
def epoch_scaling(device: torch.device, plan: Plan, fractions=(0.25, 0.5, 1.0), data_dir: str | None = None,
                  experiment: str | Path | None = None, profile: str = "cpu", full_epoch: bool = False,
                  progress: Callable[[str], None] = log, prepared=None) -> dict[str, Any]:
    """Epoch time of the pe_ablation CPU profile at fractions of the DialogSum training set.

    Batching and collation of the whole epoch are timed in full. Updates: with ``full_epoch`` every batch
    of the epoch is run; otherwise ``plan.scaling_steps`` batches drawn at random from the epoch are run
    and the epoch's update time is extrapolated as (time per padded token of the sample) x (padded tokens
    of the epoch), which corrects for the sample's lengths. The result says which was done."""
    from seq2seq_zoo.config import load_experiment
    from seq2seq_zoo.models.base import model_context
    from seq2seq_zoo.runner import prepare_data
    t_start = time.perf_counter()
    if prepared is None:
        path = Path(experiment) if experiment else _experiment_file("pe_ablation.toml")
        exp = load_experiment(path, profile=profile)
        spec = exp.runs[0]
        progress(f"    reading {spec.data.dataset} and building the vocabulary ({path.name}, profile {profile}, "
                 f"run {spec.name})")
        vocab, data, _ = prepare_data(spec, data_dir, log=lambda s: None)
    else:
        spec, vocab, data = prepared
    train = data["train"]
    cfg = spec.train
    dtype = autocast_dtype(cfg.precision, device)
    torch.manual_seed(spec.seed)
    model = build_model(spec.model, model_context(len(vocab), spec.data), spec.model_options).to(device).train()
    train_step = TrainStep(model, OBJECTIVES.get(cfg.objective)(label_smoothing=cfg.label_smoothing, cfg=cfg,
                                                                vocab=vocab), cfg, device, dtype, lr=cfg.lr)

    def step(batch):  # the loop's own update: objective, loss scaling, clipping, optimizer
        train_step(batch.to(device))

    prep_s = time.perf_counter() - t_start
    rng = np.random.default_rng(0)
    epochs = []
    for frac in fractions:
        subset = train[: max(1, int(round(frac * len(train))))]
        t0 = time.perf_counter()
        batches = bucket_batches(subset, cfg.batch_size, max_tokens=cfg.max_tokens, seed=spec.seed, epoch=0)
        collated = [collate([subset[i] for i in b]) for b in batches]
        data_s = time.perf_counter() - t0
        padded = np.array([b.src.numel() + b.tgt_out.numel() for b in collated], dtype=np.float64)
        pick = (np.arange(len(collated)) if full_epoch else
                rng.choice(len(collated), size=min(plan.scaling_steps, len(collated)), replace=False))
        epochs.append({"frac": frac, "subset": subset, "batches": collated, "data_s": data_s, "padded": padded,
                       "pick": pick, "times": []})
    for i in rng.choice(len(epochs[-1]["batches"]), size=min(max(plan.warmup, 3), len(epochs[-1]["batches"])),
                        replace=False):
        step(epochs[-1]["batches"][i])        # warm-up on batches of the full set
    # the fractions' timed updates interleaved (a, b, c, a, b, c, ...) so that load changes hit all alike
    for k in range(max(len(e["pick"]) for e in epochs)):
        for e in epochs:
            if k < len(e["pick"]):
                b = e["batches"][e["pick"][k]]
                sync(device)
                t0 = time.perf_counter()
                step(b)
                sync(device)
                e["times"].append(time.perf_counter() - t0)
    rows = []
    for e in epochs:
        times, pick, padded = e["times"], e["pick"], e["padded"]
        update_s = float(sum(times)) if full_epoch else float(sum(times) / padded[pick].sum() * padded.sum())
        epoch_s = e["data_s"] + update_s
        tgt_tok = sum(target_tokens(b) for b in e["batches"])
        rows.append({"fraction": e["frac"], "examples": len(e["subset"]), "batches": len(e["batches"]),
                     "target_tokens": tgt_tok, "data_s": e["data_s"], "update_s": update_s, "epoch_s": epoch_s,
                     "timed_updates": len(pick), "extrapolated": not full_epoch,
                     "data_share": e["data_s"] / epoch_s, "tokens_per_s": tgt_tok / epoch_s,
                     "update_s_per_padded_token": float(sum(times) / padded[pick].sum())})
        progress(f"    {int(e['frac'] * 100)}% ({len(e['subset'])} dialogues, {len(e['batches'])} batches): epoch "
                 f"{'measured' if full_epoch else 'estimated'} {epoch_s:.0f}s (batching + collation {e['data_s']:.1f}s)")
    base = rows[0]
    for r in rows:
        r["relative_time"] = r["epoch_s"] / base["epoch_s"]
        r["relative_size"] = r["examples"] / base["examples"]
        r["linearity"] = r["relative_time"] / r["relative_size"]  # 1.0 = exactly linear
    return {"experiment": spec.experiment, "run": spec.name, "profile": profile, "dataset": spec.data.dataset,
            "model": spec.model, "model_options": spec.model_options, "batch_size": cfg.batch_size,
            "precision": precision_name(dtype), "train_examples": len(train), "vocab_size": len(vocab),
            "method": ("full epochs timed" if full_epoch else
                       f"{plan.scaling_steps} randomly drawn updates per fraction timed, the epoch's update time "
                       "extrapolated by padded tokens; batching and collation of the whole epoch timed in full"),
            "setup_s": prep_s, "rows": rows}


def _experiment_file(name: str) -> Path:
    for root in (Path.cwd(), Path(__file__).resolve().parents[1]):
        p = root / "experiments" / name
        if p.is_file():
            return p
    raise FileNotFoundError(f"experiments/{name} not found (run `zoo bench` from the repository root)")


def decode_vs_beam(model, batch: Batch, device, dtype, beam_sizes, length: int, iters: int,
                   progress: Callable[[str], None] = log) -> list[dict]:
    rows = []
    for k in beam_sizes:
        dec = OurDecoder(model, batch, device, dtype, k, length)
        dec()
        times = interleaved({"d": dec}, iters, device)["d"]
        s = median(times)
        rows.append({"beam_size": k, "seconds": s, "tokens_per_s": dec.tokens / s})
        progress(f"    beam {k}: {s:.2f}s ({dec.tokens / s:.0f} tok/s)")
    return rows


def measure_compile(shape: Shape, device: torch.device, dtype, plan: Plan,
                    progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Our Transformer's training step with its encoder and decoder stacks under ``torch.compile``
    against the same step eager: compile time (the first step) and the steady step time of each,
    timed interleaved; ``pays_after_steps`` = compile time / time saved per step (None if it never
    pays)."""
    batch = shaped_batch(shape, shape.batch, seed=1)
    eager_model, _ = our_transformer(shape, device)
    comp_model, _ = our_transformer(shape, device)
    try:
        comp_model.encoder = torch.compile(comp_model.encoder)
        comp_model.decoder = torch.compile(comp_model.decoder)
        eager, comp = Trainer(eager_model, batch, device, dtype), Trainer(comp_model, batch, device, dtype)
        t0 = time.perf_counter()
        comp()
        sync(device)
        compile_s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - no compiler, unsupported op: report, do not stop the bench
        return {"error": error_line(e)}
    eager()
    times = interleaved({"eager": eager, "compiled": comp}, plan.iters, device)
    e, c = median(times["eager"]), median(times["compiled"])
    pays = compile_s / (e - c) if e > c else None
    progress(f"    compile (first step) {compile_s:.0f}s; step eager {e:.2f}s, compiled {c:.2f}s"
             + (f"; pays after {pays:.0f} steps" if pays else "; never pays"))
    return {"precision": precision_name(dtype), "compile_s": compile_s, "eager_step_s": e, "compiled_step_s": c,
            "speedup": e / c, "pays_after_steps": pays, "times": times}


def measure_recurrent(name: str, shape: Shape, device: torch.device, plan: Plan, peaks: dict[str, float],
                      batch: Batch, dbatch: Batch, precisions, default_dtype,
                      progress: Callable[[str], None] = log) -> dict[str, Any]:
    """One recurrent model, its fast implementation (the default) against ``impl = "reference"`` (the
    previous one), timed interleaved in the same process: training in each precision, then beam
    decoding in the default precision. A reference that cannot run a precision here (CPU autocast sends
    the LSTM to oneDNN's bf16 RNN primitive, which CPUs without AMX lack) is reported as such."""
    fast, opts = our_model(name, shape, device)
    ref, _ = our_model(name, shape, device, impl="reference")
    out: dict[str, Any] = {"options": opts, "params": count_parameters(fast)["total"], "training": {}}
    rplan = replace(plan, iters=plan.rnn_iters)
    fp = flop_params(fast)
    for dt in precisions:
        p = precision_name(dt)
        trainers = {"fast": Trainer(fast, batch, device, dt), "reference": Trainer(ref, batch, device, dt)}
        row: dict[str, Any] = {}
        probe = MatmulProbe(device, dt, peak_matmul_n(device, plan))
        try:
            figs = measure_training(trainers, rplan, {k: fp for k in trainers}, peaks, lambda s: None,
                                    probe=probe)
        except RuntimeError as e:
            row["reference_error"] = str(e).splitlines()[0][:200]
            del trainers["reference"]
            figs = measure_training(trainers, rplan, {k: fp for k in trainers}, peaks, lambda s: None)
        row.update(figs)
        if "reference" in figs:
            row["speedup"] = figs["reference"]["step_s"] / figs["fast"]["step_s"]
            row.update(output_bound(6.0 * fp["output"] * target_tokens(batch), probe.gflops,
                                    figs["reference"]["step_s"]))
        out["training"][p] = row
        progress(f"    {name} {p}: fast {figs['fast']['tokens_per_s']:.0f} tok/s"
                 + (f", reference {figs['reference']['tokens_per_s']:.0f} tok/s ({row['speedup']:.2f}x)"
                    if "speedup" in row else f"; reference failed: {row['reference_error'][:80]}"))
        del trainers
    decoders = {"fast": OurDecoder(fast, dbatch, device, default_dtype, shape.beams, shape.dec_len),
                "reference": OurDecoder(ref, dbatch, device, default_dtype, shape.beams, shape.dec_len)}
    try:
        probe = MatmulProbe(device, default_dtype, peak_matmul_n(device, plan))
        dec = measure_decoding(decoders, replace(plan, decode_iters=max(1, plan.rnn_iters)), lambda s: None,
                               probe=probe)
        dec["speedup"] = dec["reference"]["seconds"] / dec["fast"]["seconds"]
        dec.update(output_bound(2.0 * fp["output"] * decode_rows(shape, dbatch.size), probe.gflops,
                                dec["reference"]["seconds"]))
        dec["vocabulary_s"] = vocabulary_work(fast, dbatch.size, shape.beams, shape.dec_len, device, default_dtype,
                                              max(3, plan.rnn_iters))
        dec["vocabulary_ceiling"] = dec["reference"]["seconds"] / dec["vocabulary_s"]
        progress(f"    {name} beam-{shape.beams} decoding ({precision_name(default_dtype)}): fast "
                 f"{dec['fast']['tokens_per_s']:.0f} tok/s, reference {dec['reference']['tokens_per_s']:.0f} tok/s "
                 f"({dec['speedup']:.2f}x; the shared vocabulary work {dec['vocabulary_s']:.3g} s allows at most "
                 f"{dec['vocabulary_ceiling']:.2f}x)")
    except RuntimeError as e:
        dec = {"error": str(e).splitlines()[0][:200]}
    out["decoding"] = dec
    return out


def vocabulary_work(model, sources: int, beams: int, steps: int, device: torch.device, dtype,
                    iters: int = 3) -> float:
    """Seconds of the work over the vocabulary that every beam decoder of a recurrent ``model`` does, whichever
    its implementation (``decode.beam_search`` over either ``impl``): at each step the output layer
    (``model.output``, one or two layers, under ``generate``'s packed weights and the autocast) on the
    hypotheses' features, the fp32 log-softmax (``kernels.log_softmax_fp32``) and each row's top 2K; one
    hypothesis per source at the first step, ``beams`` after it (as ``decode_rows`` counts them). Median of
    ``iters`` timed passes after one untimed. Its share of the reference's decoding time bounds what any
    fast path can gain with this decoder: reference time / this time."""
    from seq2seq_zoo.models.kernels import log_softmax_fp32, packed_linear_weights
    out = model.output
    first = out[0] if isinstance(out, torch.nn.Sequential) else out
    g = torch.Generator().manual_seed(0)
    hs = [torch.randn(n, first.in_features, generator=g).to(device) for n in (sources, sources * beams)]
    was = model.training
    model.eval()

    def run():
        for t in range(steps):
            lp = log_softmax_fp32(out(hs[0 if t == 0 else 1]))
            lp.topk(min(2 * beams, lp.size(-1)), -1)

    try:
        with torch.no_grad(), packed_linear_weights(model, sources * beams), autocast(device, dtype):
            run()
            return median(interleaved({"vocabulary": run}, iters, device)["vocabulary"])
    finally:
        model.train(was)


def output_bound(flops: float, peak_gflops: float | None, reference_s: float) -> dict[str, float]:
    """Both recurrent implementations do the same output-layer matmuls (``flops``: in training the
    forward product and the two of its backward, 6 x output params x target tokens; in beam decoding
    2 x output params x hypotheses a step, summed over the steps); at ``peak_gflops`` (a product's rate
    timed among the two: MatmulProbe) these alone take ``output_s_at_peak``, so no fast path can beat
    the reference by more than ``ceiling`` = reference time / that time."""
    if not peak_gflops:
        return {}
    out_s = flops / (peak_gflops * 1e9)
    return {"output_s_at_peak": out_s, "ceiling": reference_s / out_s}


def decode_rows(shape: Shape, sources: int) -> int:
    """The fewest hypotheses the output layer must score over a beam call: one per source at the first
    step (all beams are the same empty hypothesis then), ``shape.beams`` per source after. Our beam search,
    as HF's, scores every beam from the first step: 1/dec_len more rows than this."""
    return sources + (shape.dec_len - 1) * sources * shape.beams


# ------------------------------------------------------------------------------------- the eole peer
EOLE_VERSION = "0.6.4"
# our model -> (eole architecture, what eole builds at the closest shape it can)
EOLE_PAIRS = {
    "transformer": ("transformer", "Transformer: the same d_model, d_ff, heads and layers, sinusoidal positions; "
                    "eole keeps separate source and target embeddings and output layer (ours share one table)"),
    "gru": ("gru_none", "GRU encoder + GRU decoder without attention or input feeding, hidden {n}, the encoder's "
            "last state starting the decoder and the output layer reading the {n}-wide state, as ours; eole keeps "
            "separate source and target embeddings and output layer (ours share one table)"),
    "bahdanau": ("gru_mlp", "GRU encoder + input-feeding GRU decoder with MLP (additive) attention, hidden {n}: "
                 "its decoder reads [E y; attentional h~] ({m} + {n}) where ours reads [E y; c], and its output "
                 "layer reads the {n}-wide attentional state where ours reads [s; E y; c] ({w_gru})"),
    "bilstm": ("brnn_lstm_mlp", "brnn encoder (2 x {half}: eole splits the hidden size over the directions; ours "
               "2 x {n}) + input-feeding LSTM decoder of our decoder width {n} with MLP attention; output layer "
               "from {n} (ours from [s; E y; c], {w_lstm})"),
}
# our models eole cannot build: why (printed and kept in bench.json, so the table names every family)
EOLE_NONE = {"pointer_generator": "no counterpart: eole 0.6.4 has no copy attention (OpenNMT-py's copy_attn "
                                  "was not carried over), so it cannot build a pointer-generator"}


def eole_available() -> str | None:
    """None if eole's models can be built here, else why not."""
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import eole  # noqa: F401
            import pyonmttok  # noqa: F401
            from eole.models.model import get_model_class  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means: no peer
        return f"eole not importable ({type(e).__name__}: {e}); pip install --no-deps eole=={EOLE_VERSION} pyonmttok"
    return None


def eole_model(kind: str, shape: Shape, device: torch.device, seed: int = 0):
    """eole's model of ``kind`` (see EOLE_PAIRS), randomly initialised, at the bench shape; eole's own
    vocabulary order puts <unk> at 0 and <pad> at 1 (``EoleTrainer`` swaps our two ids)."""
    import warnings
    from collections import Counter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pyonmttok
        from eole.config.data import Dataset
        from eole.config.models import RnnModelConfig, TransformerModelConfig
        from eole.config.run import TrainConfig
        from eole.constants import DefaultTokens
        from eole.models.model import get_model_class
        specials = [DefaultTokens.UNK, DefaultTokens.PAD, DefaultTokens.BOS, DefaultTokens.EOS]
        vocab = pyonmttok.build_vocab_from_tokens(Counter({f"w{i}": 1 for i in range(shape.vocab - 4)}),
                                                  maximum_size=0, minimum_frequency=1, special_tokens=specials)
        vocabs = {"src": vocab, "tgt": vocab, "specials": {"bos_token": DefaultTokens.BOS, "pad_token": DefaultTokens.PAD,
                                                           "eos_token": DefaultTokens.EOS,
                                                           "unk_token": DefaultTokens.UNK}}
        if kind == "transformer":
            mc = TransformerModelConfig(embeddings={"word_vec_size": shape.d_model,
                                                    "position_encoding_type": "SinusoidalInterleaved"},
                                        hidden_size=shape.d_model, transformer_ff=shape.d_ff, heads=shape.heads,
                                        layers=shape.layers)
        else:   # gru_none: no attention and input_feed 0 (eole's StdRNNDecoder), which is a plain GRU decoder
            attention = None if kind == "gru_none" else "mlp"
            mc = RnnModelConfig(embeddings={"word_vec_size": shape.rnn_emb}, hidden_size=shape.rnn_hidden, layers=1,
                                rnn_type="LSTM" if kind == "brnn_lstm_mlp" else "GRU",
                                input_feed=int(attention is not None), decoder={"global_attention": attention})
            if kind == "brnn_lstm_mlp":   # RnnModelConfig resets encoder_type to "rnn" when it validates
                mc.encoder.encoder_type = "brnn"
                mc.decoder.bidirectional_encoder = True
        cfg = TrainConfig(data={"bench": Dataset(path_src="-")}, src_vocab="bench", share_vocab=True, model=mc)
        cfg.training.self_attn_backend = "pytorch"
        cfg.training.dropout = [shape.dropout]
        torch.manual_seed(seed)
        model = get_model_class(cfg.model).build(cfg.model, vocabs, cfg.training)
        model.init_weights(cfg.training)     # as its training entry point does (``build`` leaves them empty)
    return model.to(device)


class EoleTrainer:
    """One full update of an eole model on the bench batch: its forward (``model(src, tgt, src_len)``)
    and generator under autocast, cross-entropy (label smoothing 0.1 as ours, padding ignored), backward,
    gradient clipping, Adam step."""

    def __init__(self, model, batch: Batch, device: torch.device, dtype, clip_norm: float = 1.0):
        self.model, self.device, self.dtype, self.kind, self.clip = model.train(), device, dtype, "eole", clip_norm
        b = batch.to(device)

        def swap(x):   # our <pad> 0 / <unk> 1 -> eole's <unk> 0 / <pad> 1
            return torch.where(x == 0, 1, torch.where(x == 1, 0, x))
        self.src = swap(b.src)
        self.tgt = swap(torch.cat([b.tgt_in, b.tgt_out[:, -1:]], 1))     # <bos> y_1 .. y_n <eos>
        self.labels = self.tgt[:, 1:].masked_fill(self.tgt[:, 1:] >= model.generator.out_features, 0)
        self.src_len = (b.src != PAD_ID).sum(1)
        self.params = list(model.parameters())
        self.opt = torch.optim.Adam(self.params, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        self.src_tokens, self.tgt_tokens = source_tokens(batch), target_tokens(batch)

    def __call__(self):
        import torch.nn.functional as F
        with autocast(self.device, self.dtype):
            out = self.model(self.src, self.tgt, self.src_len)
            dec_out = out.dec_out if hasattr(out, "dec_out") else out[0]
            logits = self.model.generator(dec_out)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), self.labels.reshape(-1),
                                   ignore_index=1, label_smoothing=0.1)
        return peer_update(loss, self.params, self.opt, self.clip)


def measure_eole(shape: Shape, device: torch.device, plan: Plan, peaks: dict[str, float], batch: Batch,
                 dtype, progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Training tokens/s of ours against eole's closest model, per pair of EOLE_PAIRS, interleaved in
    ``dtype``; parameter counts and the shape difference beside each ratio."""
    out: dict[str, Any] = {"version": None, "precision": precision_name(dtype), "pairs": {}}
    try:
        import importlib.metadata as md
        out["version"] = md.version("eole")
    except Exception:  # noqa: BLE001
        pass
    for ours_name, (kind, difference) in EOLE_PAIRS.items():
        try:
            ours, _ = our_model(ours_name, shape, device)
            peer = eole_model(kind, shape, device)
            trainers = {"ours": Trainer(ours, batch, device, dtype), "eole": EoleTrainer(peer, batch, device, dtype)}
            fps = {"ours": flop_params(ours), "eole": flop_params(peer)}
            it = plan.iters if ours_name == "transformer" else plan.rnn_iters
            figs = measure_training(trainers, replace(plan, iters=it), fps, peaks, lambda s: None)
        except Exception as e:  # noqa: BLE001 - a peer that cannot be built here must not stop the bench
            out["pairs"][ours_name] = {"eole_model": kind, "error": f"{type(e).__name__}: {str(e)[:200]}"}
            progress(f"    {ours_name} vs eole {kind}: not measured ({out['pairs'][ours_name]['error']})")
            continue
        ratio = figs["ours"]["tokens_per_s"] / figs["eole"]["tokens_per_s"]
        n, m = shape.rnn_hidden, shape.rnn_emb
        difference = difference.format(n=n, m=m, half=n // 2, w_gru=2 * n + m, w_lstm=3 * n + m)
        out["pairs"][ours_name] = {"eole_model": kind, "difference": difference, "ratio": ratio,
                                   "ours_params": count_parameters(ours)["total"],
                                   "eole_params": sum(p.numel() for p in peer.parameters() if p.requires_grad),
                                   "ours": figs["ours"], "eole": figs["eole"]}
        progress(f"    {ours_name} {figs['ours']['tokens_per_s']:.0f} tok/s vs eole {kind} "
                 f"{figs['eole']['tokens_per_s']:.0f} tok/s: {ratio:.2f}x")
        del trainers, ours, peer
    for ours_name, why in EOLE_NONE.items():
        out["pairs"][ours_name] = {"eole_model": None, "none": why}
        progress(f"    {ours_name}: {why}")
    return out


def synthetic_summaries(n: int, seed: int = 0) -> tuple[list[str], list[list[str]]]:
    """``n`` (prediction, [reference]) pairs of 20-40 English words, the length of a DialogSum summary."""
    words = ("the a person one two said asked would meeting tomorrow office friend dinner doctor phone "
             "because about after before with they we you he she will wants needs tells agrees plans "
             "house car work school money time help job party weekend").split()
    g = np.random.default_rng(seed)

    def sent():
        return " ".join(g.choice(words, size=int(g.integers(20, 41)))) + " ."
    preds = [sent() for _ in range(n)]
    return preds, [[sent()] for _ in range(n)]


def measure_eval_cost(n: int, device: torch.device, progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Seconds to score ``n`` summaries with each metric of the suite's reports (ROUGE 1/2/L/Lsum with
    the stemmer; BERTScore with its default backbone, all-MiniLM-L6-v2), and peak memory."""
    from seq2seq_zoo.registry import METRICS
    preds, refs = synthetic_summaries(n)
    out: dict[str, Any] = {"examples": n, "words_per_summary": "20-40"}
    for name, kw in (("rouge", {}), ("bertscore", {"device": device.type})):
        try:
            METRICS.get(name)(preds[:8], refs[:8], **kw)           # load the model / tokenizers once
            with PeakMemory(torch.device("cpu")) as mem:
                t0 = time.perf_counter()
                _, settings = METRICS.get(name)(preds, refs, **kw)
                sec = time.perf_counter() - t0
            out[name] = {"seconds": sec, "examples_per_s": n / sec, "peak_mem_mb": mem.peak_mb,
                         "backbone": settings.get("model") or settings.get("backbone")}
            progress(f"    {name}: {sec:.1f}s for {n} examples ({n / sec:.0f}/s)")
        except Exception as e:  # noqa: BLE001 - a missing backbone must not stop the bench
            out[name] = {"error": error_line(e)[:200]}
            progress(f"    {name}: not measured ({out[name]['error']})")
    return out


def _warm_process(device: torch.device) -> None:
    """One tiny update of each kind first, so that one-time library set-up (thread pools, kernel
    caches) is not charged to the first stage's time and memory."""
    for dt in (None, autocast_dtype("auto", device)):
        model, _ = our_transformer(TINY, device)
        Trainer(model, shaped_batch(TINY, 2), device, dt)()
        OurDecoder(model, shaped_batch(TINY, 2), device, dt, 2, 2)()
    if peer_available() is None:
        Trainer(peer_model(TINY, device), shaped_batch(TINY, 2), device, None, kind="peer")()


# ---------------------------------------------------------------------------------------- the bench
def token_batches(shape: Shape, max_tokens: int, n: int, seed: int = 0) -> list[Batch]:
    """``n`` random examples with sources of shape.src_len/2 .. shape.src_len tokens and targets of
    shape.tgt_len/2 .. shape.tgt_len positions, batched as the training loop does with train.batch_size = 0
    and train.max_tokens (``bucket_batches``): the batches of a GPU run."""
    g = np.random.default_rng(seed)
    ex = []
    for i in range(n):
        S = int(g.integers(max(1, shape.src_len // 2), shape.src_len + 1))
        T = int(g.integers(max(2, shape.tgt_len // 2), shape.tgt_len + 1))
        ex += random_examples(shape, 1, seed=seed * 100003 + i, src_len=S, tgt_len=T)
    return [collate([ex[i] for i in b]) for b in bucket_batches(ex, 0, max_tokens=max_tokens, seed=seed)]


class BatchCycle:
    """One trainer (one optimizer) over several batches, one per call in turn (their shapes differ, as in
    training); ``tokens`` lists each call's (source, target) non-pad tokens."""

    def __init__(self, model, batches: list[Batch], device: torch.device, dtype):
        self.batches = [b.to(device) for b in batches]
        self.trainer = Trainer(model, self.batches[0], device, dtype)
        self.tokens: list[tuple[int, int]] = []

    def __call__(self):
        b = self.batches[len(self.tokens) % len(self.batches)]
        self.tokens.append((source_tokens(b), target_tokens(b)))
        self.trainer.batch = b
        return self.trainer()


# the GPU-sized stage's variants beside the runs' own setting (``default``): what each would change
GPU_SHAPE_VARIANTS = {
    "cudnn_attention": "cuDNN's attention kernels on (`ZOO_CUDNN_ATTENTION=1`; runs have them off)",
    "compiled": "encoder and decoder stacks under `torch.compile(dynamic=True)` (`--compile`; runs are eager)",
}


class WithCudnnAttention:
    """A call with cuDNN's attention kernels enabled, the process's setting restored after it."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn

    def __call__(self):
        was = torch.backends.cuda.cudnn_sdp_enabled()
        torch.backends.cuda.enable_cudnn_sdp(True)
        try:
            return self.fn()
        finally:
            torch.backends.cuda.enable_cudnn_sdp(was)


def measure_gpu_shape(shape: Shape, device: torch.device, plan: Plan, peaks: dict[str, float],
                      dtype: torch.dtype | None, max_tokens: int = GPU_MAX_TOKENS,
                      progress: Callable[[str], None] = log, variants: tuple[str, ...] = ()) -> dict[str, Any]:
    """Our Transformer at ``shape`` on token batches: each timed update's model FLOP/s (6 x params x
    non-pad tokens) over the measured bf16 peak; the median over the updates is the figure. Runs on any
    device (the tests run it on CPU at a tiny shape); ``zoo bench`` runs it on CUDA at GPU_SHAPE.

    ``variants`` (names in GPU_SHAPE_VARIANTS): the same model, seed and batches with one thing changed,
    timed interleaved with the default; each also reports its first pass over the batches, where new
    shapes pay cuDNN's graph builds or compilation."""
    unknown = [v for v in variants if v not in GPU_SHAPE_VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)} (known: {', '.join(GPU_SHAPE_VARIANTS)})")
    torch.manual_seed(0)
    model, opts = our_transformer(shape, device)
    fp = flop_params(model)
    n_batches = max(plan.iters, 2)
    # enough examples for n_batches batches of the cap: about max_tokens / mean padded length each
    per_batch = max(1, max_tokens // ((3 * shape.src_len + 3 * shape.tgt_len) // 4))
    batches = token_batches(shape, max_tokens, per_batch * (n_batches + 1))[:n_batches]
    cycles = {"default": BatchCycle(model, batches, device, dtype)}
    calls: dict[str, Callable[[], Any]] = dict(cycles)
    first: dict[str, float] = {}

    def warm_up(name):
        t0 = time.perf_counter()
        for _ in range(len(batches)):       # first pass: every shape new
            calls[name]()
        sync(device)
        first[name] = time.perf_counter() - t0
        for _ in range((plan.warmup - 1) * len(batches)):
            calls[name]()
        sync(device)

    with PeakMemory(device) as mem:
        warm_up("default")
    errors: dict[str, str] = {}
    for v in variants:
        try:
            torch.manual_seed(0)
            m, _ = our_transformer(shape, device)
            if v == "compiled":
                m.encoder = torch.compile(m.encoder, dynamic=True)
                m.decoder = torch.compile(m.decoder, dynamic=True)
            cycles[v] = BatchCycle(m, batches, device, dtype)
            calls[v] = WithCudnnAttention(cycles[v]) if v == "cudnn_attention" else cycles[v]
            warm_up(v)
        except Exception as e:  # noqa: BLE001 - no compiler, out of memory: report it, keep the default
            errors[v] = error_line(e)[:300]
            calls.pop(v, None)
            cycles.pop(v, None)
            progress(f"    {v}: not measured ({errors[v]})")
    times = interleaved(calls, plan.iters, device)
    low = dtype in (torch.bfloat16, torch.float16)
    peak = peaks.get("bf16") if low else peaks.get("fp32")

    def figures(name):
        timed = cycles[name].tokens[-plan.iters:]
        rates = [train_flops(fp, src, tgt) / dt / 1e9 for (src, tgt), dt in zip(timed, times[name])]
        gflops = median(rates)
        return {"step_s_all": times[name], "model_gflops_all": rates, "model_gflops": gflops,
                "tokens_per_s": median([tgt / dt for (_, tgt), dt in zip(timed, times[name])]),
                "mfu": gflops / peak if peak else None, "first_pass_s": first[name]}

    out = {"options": opts, "params": count_parameters(model)["total"], "flop_params": fp,
           "max_tokens": max_tokens, "precision": precision_name(dtype),
           "batch_examples": [len(b.ids) for b in batches],
           "batch_padded_tokens": [int(b.src.numel() + b.tgt_out.numel()) for b in batches],
           **figures("default"), "peak_gflops": peak, "peak_kind": "bf16" if low else "fp32",
           "peak_mem_mb": mem.peak_mb,
           "cudnn_attention": torch.backends.cuda.cudnn_sdp_enabled() if device.type == "cuda" else None}
    gflops = out["model_gflops"]
    progress(f"    {out['params'] / 1e6:.0f}M parameters, batches of {min(out['batch_examples'])}-"
             f"{max(out['batch_examples'])} examples (max_tokens {max_tokens:,}): {gflops:,.0f} GFLOP/s, "
             + (f"{100 * out['mfu']:.0f}% of the {out['peak_kind']} peak, " if out["mfu"] else "")
             + f"peak +{mem.peak_mb:,.0f} MB; first pass {first['default']:.1f}s")
    if variants:
        out["variants"] = {}
        for v in variants:
            if v in errors:
                out["variants"][v] = {"error": errors[v]}
                continue
            f = out["variants"][v] = figures(v)
            f["vs_default"] = f["model_gflops"] / gflops if gflops else None
            progress(f"    {v}: {f['model_gflops']:,.0f} GFLOP/s"
                     + (f" ({100 * f['mfu']:.0f}%)" if f["mfu"] else "")
                     + f", {f['vs_default']:.2f}x the default; first pass {f['first_pass_s']:.1f}s")
    return out


def run_device(device: torch.device, shape: Shape, plan: Plan, *, scaling: bool, data_dir: str | None = None,
               full_epoch: bool = False, progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Every measurement on one device; returns the JSON-ready figures."""
    res: dict[str, Any] = {"device": str(device), "beams": shape.beams, "notes": []}
    default_dtype = autocast_dtype("auto", device)
    res["default_precision"] = precision_name(default_dtype)
    gpu_shape = device.type == "cuda"
    stages = 7 + bool(scaling) + bool(plan.compile) + bool(plan.eval_examples) + gpu_shape
    k = 0
    _warm_process(device)

    def stage(title):
        nonlocal k
        k += 1
        progress(f"[{device.type} {k}/{stages}] {title}")
        return time.perf_counter()

    mm_n = peak_matmul_n(device, plan)
    t = stage(f"matmul peak ({mm_n}x{mm_n})")
    from seq2seq_zoo.utils import cpu_has_fast_bf16
    native_bf16 = device.type != "cpu" or cpu_has_fast_bf16()
    # (emulated bf16 is no peak of this machine's: not measured, and MFU is taken against fp32 only)
    peaks = {"bf16": matmul_peak(device, torch.bfloat16, mm_n, plan.matmul_iters) if native_bf16 else None,
             "fp32": matmul_peak(device, torch.float32, mm_n, plan.matmul_iters)}
    res["matmul_peak_gflops"], res["matmul_n"] = peaks, mm_n
    progress(f"    bf16 {_fmt(peaks['bf16'])} GFLOP/s, fp32 {peaks['fp32']:.0f} GFLOP/s ({time.perf_counter() - t:.0f}s)")

    batch = shaped_batch(shape, shape.batch, seed=1)
    no_peer = peer_available()
    if no_peer:
        res["notes"].append(f"HF BART peer skipped: {no_peer}")
        progress(f"    note: {res['notes'][-1]}")

    # training: ours vs peer, fp32 and bf16
    train: dict[str, dict] = {}
    if device.type != "cpu":
        precisions = [None, default_dtype]
    elif native_bf16:
        precisions = [None, torch.bfloat16]
    else:   # emulated bf16 matmuls run ~10x slower than fp32 here: timing them says nothing about the models
        precisions = [None]
        res["notes"].append("training timed in fp32 only: this CPU has no bf16 matmul instructions (no "
                            "AVX512-BF16 or AMX), so bf16 runs emulated, ~10x slower than fp32")
    for dt in precisions:
        t = stage(f"training, {precision_name(dt)}: our Transformer vs HF BART "
                  f"(batch {shape.batch}, source {shape.src_len}, target {shape.tgt_len})")
        ours, _ = our_transformer(shape, device)
        trainers = {f"ours_{precision_name(dt)}": Trainer(ours, batch, device, dt)}
        fps = {f"ours_{precision_name(dt)}": flop_params(ours)}
        if not no_peer:
            peer = peer_model(shape, device)
            trainers[f"peer_{precision_name(dt)}"] = Trainer(peer, batch, device, dt, kind="peer")
            fps[f"peer_{precision_name(dt)}"] = flop_params(peer)
        figs = measure_training(trainers, plan, fps, peaks, progress)
        for name, f in figs.items():
            progress(f"    {name}: {f['tokens_per_s']:.0f} tok/s, {f['model_gflops']:.0f} GFLOP/s, "
                     f"peak +{f['peak_mem_mb']:.0f} MB")
        train.update(figs)
        del trainers
        progress(f"    ({time.perf_counter() - t:.0f}s)")
    res["training"] = train

    if gpu_shape:
        g = GPU_SHAPE
        t = stage(f"training at a GPU-sized shape, {precision_name(default_dtype)}: our Transformer d_model "
                  f"{g.d_model}, {g.layers}+{g.layers} layers, vocabulary {g.vocab:,}, token batches of "
                  f"{GPU_MAX_TOKENS:,} padded tokens")
        try:
            res["gpu_shape"] = measure_gpu_shape(g, device, plan, peaks, default_dtype, GPU_MAX_TOKENS, progress,
                                                 variants=("cudnn_attention",) + (("compiled",) if plan.compile else ()))
        except torch.cuda.OutOfMemoryError as e:
            res["notes"].append(f"GPU-sized shape not measured: out of memory ({e})")
            progress(f"    note: {res['notes'][-1]}")
        progress(f"    ({time.perf_counter() - t:.0f}s)")

    # decoding: beam 4 (fixed length), ours in its default precision, the peer in fp32 and bf16
    t = stage(f"beam-{shape.beams} decoding: {shape.dec_sources} sources x {shape.dec_len} tokens")
    ours, _ = our_transformer(shape, device)
    dbatch = shaped_batch(shape, shape.dec_sources, seed=2)
    decoders: dict[str, Any] = {f"ours_{precision_name(default_dtype)}":
                                OurDecoder(ours, dbatch, device, default_dtype, shape.beams, shape.dec_len)}
    if default_dtype is not None:
        decoders["ours_fp32"] = OurDecoder(ours, dbatch, device, None, shape.beams, shape.dec_len)
    if not no_peer:
        peer = peer_model(shape, device)
        decoders["peer_fp32"] = PeerDecoder(peer, dbatch, device, None, shape.beams, shape.dec_len)
        if default_dtype is not None:
            decoders[f"peer_{precision_name(default_dtype)}"] = PeerDecoder(peer, dbatch, device, default_dtype,
                                                                            shape.beams, shape.dec_len)
    probe = MatmulProbe(device, default_dtype, mm_n)
    dec = measure_decoding(decoders, plan, progress, probe=probe)
    for name, f in dec.items():
        progress(f"    {name}: {f['tokens_per_s']:.0f} tok/s ({f['seconds']:.2f}s)")
    res["decoding"] = dec
    bound = decode_bound(shape, dec, probe.gflops, res["default_precision"])
    if bound:
        res["decode_bound"] = bound
        ceiling = bound.get("ceiling_vs_peer")
        progress(f"    bound: {bound['min_gflop']:.1f} GFLOP of matmuls at least, {bound['min_s']:.2f}s at the "
                 f"{bound['peak_gflops']:.0f} GFLOP/s a {mm_n}³ product ran at between the timed calls"
                 + (f"; the peer's time allows at most {ceiling:.3g}x" if ceiling else ""))
    progress(f"    ({time.perf_counter() - t:.0f}s)")

    t = stage(f"decoding time against beam size {'/'.join(map(str, plan.beam_sizes))}")
    res["decode_vs_beam"] = decode_vs_beam(ours, dbatch, device, default_dtype, plan.beam_sizes, shape.dec_len,
                                           plan.decode_iters, progress)
    progress(f"    ({time.perf_counter() - t:.0f}s)")

    # the recurrent family: the fast implementation against the reference one, in the same run
    rnn_precisions = precisions
    t = stage("recurrent models: fast implementation against impl = \"reference\" (training "
              f"{'/'.join(precision_name(d) for d in rnn_precisions)}, beam-{shape.beams} decoding)")
    others: dict[str, dict] = {}
    recurrent: dict[str, dict] = {}
    for name in RNN_MODELS:
        if name not in MODELS:
            note = f"model '{name}' is not registered: skipped"
            res["notes"].append(note)
            progress(f"    note: {note}")
            continue
        try:
            rec = measure_recurrent(name, shape, device, plan, peaks, batch, dbatch, rnn_precisions, default_dtype,
                                    progress)
        except Exception as e:  # noqa: BLE001 - a model under construction must not stop the bench
            note = f"model '{name}' could not be measured at the bench shape ({type(e).__name__}: {e}): skipped"
            res["notes"].append(note)
            progress(f"    note: {note}")
            continue
        recurrent[name] = rec
        fig = dict(rec["training"][precision_name(default_dtype)]["fast"])
        fig["options"], fig["params"] = rec["options"], rec["params"]
        others[name] = fig
    res["other_models"] = others
    res["recurrent"] = recurrent
    progress(f"    ({time.perf_counter() - t:.0f}s)")

    t = stage(f"eole {EOLE_VERSION} as a second peer: training, {res['default_precision']}")
    no_eole = eole_available()
    if no_eole:
        res["notes"].append(f"eole peer skipped: {no_eole}")
        progress(f"    note: {res['notes'][-1]}")
    else:
        res["eole"] = measure_eole(shape, device, plan, peaks, batch, default_dtype, progress)
    progress(f"    ({time.perf_counter() - t:.0f}s)")

    if plan.eval_examples:
        t = stage(f"evaluation cost: scoring {plan.eval_examples:,} summaries (ROUGE, BERTScore)")
        res["eval_cost"] = measure_eval_cost(plan.eval_examples, device, progress)
        progress(f"    ({time.perf_counter() - t:.0f}s)")

    if scaling:
        t = stage("epoch time against training-set size (pe_ablation CPU profile, DialogSum)")
        try:
            res["scaling"] = epoch_scaling(device, plan, data_dir=data_dir, full_epoch=full_epoch, progress=progress)
        except Exception as e:  # noqa: BLE001 - no data on this machine: say so, keep the rest
            from seq2seq_zoo.data.corpora import DataError
            if not isinstance(e, (DataError, FileNotFoundError)):
                raise
            res["notes"].append(f"epoch scaling skipped: {e}")
            progress(f"    note: {res['notes'][-1]}")
        progress(f"    ({time.perf_counter() - t:.0f}s)")
    if plan.compile:
        t = stage("torch.compile: our Transformer's training step, compiled against eager")
        res["compile"] = measure_compile(shape, device, default_dtype, plan, progress)
        progress(f"    ({time.perf_counter() - t:.0f}s)")
    res["targets"] = targets(res)
    return res


def _ratio(a, b):
    return a / b if a and b else None


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Each speed target (TARGET_*) with the measured value, whether it is met, and by how much it is
    missed (or exceeded)."""
    out = []
    tr = res.get("training", {})
    dp = res.get("default_precision", "fp32")
    ours = tr.get(f"ours_{dp}", {}).get("tokens_per_s")
    peer_best_name = max((k for k in tr if k.startswith("peer_")), key=lambda k: tr[k]["tokens_per_s"], default=None)
    if ours and peer_best_name:
        r = ours / tr[peer_best_name]["tokens_per_s"]
        out.append(_target(f"training tokens/s, ours ({dp}, default) / peer's best ({peer_best_name[5:]})", r,
                           TARGET_TRAIN_VS_PEER, "x", aim=TARGET_TRAIN_AIM))
    if tr.get("ours_fp32") and tr.get("peer_fp32"):
        r = tr["ours_fp32"]["tokens_per_s"] / tr["peer_fp32"]["tokens_per_s"]
        out.append(_target("training tokens/s in fp32, ours / peer (parity floor)", r, TARGET_FP32_PARITY, "x"))
    dec = res.get("decoding", {})
    d_ours = dec.get(f"ours_{dp}", {}).get("tokens_per_s")
    d_peer = max((v["tokens_per_s"] for k, v in dec.items() if k.startswith("peer_")), default=None)
    if d_ours and d_peer:
        best = max((k for k in dec if k.startswith("peer_")), key=lambda k: dec[k]["tokens_per_s"])
        row = _target(f"beam-{res.get('beams', 4)} decoding tokens/s, ours ({dp}) / peer's best ({best[5:]})",
                      d_ours / d_peer, TARGET_DECODE_VS_PEER, "x")
        ceiling = res.get("decode_bound", {}).get("ceiling_vs_peer")
        if ceiling:
            row["ceiling"] = ceiling
            row["status"] += (f"; this machine's matmul rate allows at most {ceiling:.3g}x (the least matmul work "
                              "of the call at the rate of a product timed among the decoders, against the peer's time)")
        out.append(row)
    gs = res.get("gpu_shape")
    if gs and gs.get("mfu"):
        out.append(_target(f"Transformer at a GPU-sized shape ({gs['params'] / 1e6:.0f}M parameters, token batches "
                           f"of {gs['max_tokens']:,}), model FLOP/s / {gs['peak_kind']} matmul peak",
                           gs["mfu"], TARGET_GPU_MFU, ""))
    sc = res.get("scaling")
    if sc:
        full = [r for r in sc["rows"] if r["fraction"] == 1.0]
        if full:
            how = "estimated" if full[0]["extrapolated"] else "measured"
            out.append(_target(f"one epoch, pe_ablation CPU profile on DialogSum ({how}), seconds",
                               full[0]["epoch_s"], TARGET_EPOCH_S, "s", lower_is_better=True))
    return out


def _target(name, value, goal, unit, aim=None, lower_is_better=False) -> dict[str, Any]:
    met = value <= goal if lower_is_better else value >= goal
    if lower_is_better:
        by = (value - goal) / goal          # > 0: over the limit by this fraction
    else:
        by = (goal - value) / goal          # > 0: short of the goal by this fraction
    row = {"target": name, "value": value, "goal": goal, "unit": unit, "met": met,
           "lower_is_better": lower_is_better}
    if met:
        row["status"] = (f"met ({value:.2f}{unit} vs {'<=' if lower_is_better else '>='} {goal:g}{unit})")
    else:
        row["status"] = f"MISSED by {100 * by:.0f}% ({value:.2f}{unit} vs {goal:g}{unit})"
    if aim is not None:
        row["aim"] = aim
        row["status"] += f"; aim {aim:g}{unit} {'reached' if value >= aim else f'missed by {100 * (aim - value) / aim:.0f}%'}"
    return row


# ------------------------------------------------------------------------------------------- output
def _fmt(x, nd=0):
    if x is None:
        return "—"
    return f"{x:,.{nd}f}"


def markdown(report: dict[str, Any]) -> str:
    hw = report["hardware"]
    L = ["# zoo bench", ""]
    L.append(f"`{report['command']}` — {report['date']}, {report['wall_s']:.0f} s in all"
             + (" (quick: fewer iterations)" if report["quick"] else "") + ".")
    L.append("")
    L.append(f"Hardware: {hw.get('cpu')}, {hw.get('logical_cpus')} logical CPUs, bf16 matmul instructions: "
             f"{report.get('cpu_bf16_isa', 'unknown')}{', GPU ' + hw['gpu'] if hw.get('gpu') else ''}; "
             f"torch {hw.get('torch')}{', transformers ' + report['transformers'] if report.get('transformers') else ''}; "
             f"bf16 autocast by default on CPU: {'yes' if report['cpu_fast_bf16'] else 'no'}.")
    if report.get("load_before") is not None:
        L.append(f"torch threads: {report['threads']} — {report['threads_reason']}. Load average (1 min) before / after: "
                 f"{report['load_before']:.1f} / {report.get('load_after') or 0:.1f}"
                 + (f"; OMP_WAIT_POLICY={report['omp_wait_policy']}" if report.get("omp_wait_policy") else "") + ".")
    s = report["shape"]
    L.append(f"Shapes: Transformer d_model {s['d_model']}, d_ff {s['d_ff']}, {s['heads']} heads, {s['layers']}+"
             f"{s['layers']} layers, vocabulary {s['vocab']:,}, dropout {s['dropout']}; training batch "
             f"{s['batch']} x source {s['src_len']} x target {s['tgt_len']} (random tokens); decoding "
             f"{s['dec_sources']} sources x {s['dec_len']} generated tokens. Recurrent models: emb {s['rnn_emb']}, "
             f"hidden {s['rnn_hidden']}.")
    L.append("")
    L.append("These machines are shared and noisy: the timed iterations of compared models are interleaved "
             "and the median is taken; **ratios measured in the same run are the headline**, absolute "
             "figures vary from run to run.")
    for dev in report["devices"]:
        L += ["", f"## {dev['device']}", ""]
        if dev.get("targets"):
            L += ["### Targets", "", "| target | status |", "|---|---|"]
            L += [f"| {t['target']} | {'✅ ' if t['met'] else '❌ '}{t['status']} |" for t in dev["targets"]]
            L.append("")
        pk = dev["matmul_peak_gflops"]
        L += ["### Training (one full update: forward, loss, backward, clipping, optimizer step)", "",
              f"Matmul peak measured in this run ({dev['matmul_n']}³): bf16 "
              f"{_fmt(pk['bf16']) if pk.get('bf16') else '— (no bf16 matmul instructions)'} GFLOP/s, "
              f"fp32 {pk['fp32']:.0f} GFLOP/s. Model FLOP/s = 6 × params × tokens per stack: 6 × (encoder "
              "matmul params × source tokens + (decoder + output projection) matmul params × target tokens); "
              "embedding lookups and attention scores not counted. Tokens/s = non-pad target tokens.", "",
              "| model | precision | target tok/s | src+tgt tok/s | step (s) | model GFLOP/s | MFU vs bf16 peak "
              "| MFU vs fp32 peak | peak memory (MB) |", "|---|---|---|---|---|---|---|---|---|"]
        rows = [(k, v) for k, v in dev["training"].items()] + [(k, v) for k, v in dev.get("other_models", {}).items()]
        for name, f in rows:
            label = {"ours": "our Transformer", "peer": "HF BART (peer)"}.get(name.split("_")[0], name) \
                if name.startswith(("ours_", "peer_")) else name
            mfu_b = f"{100 * f['mfu_bf16']:.0f}%" if f.get("mfu_bf16") else "—"
            mfu_f = f"{100 * f['mfu_fp32']:.0f}%" if f.get("mfu_fp32") else "—"
            L.append(f"| {label} | {f['precision']} | {_fmt(f['tokens_per_s'])} | {_fmt(f['src_tgt_tokens_per_s'])} | "
                     f"{f['step_s']:.3f} | {_fmt(f['model_gflops'])} | {mfu_b} | {mfu_f} | {_fmt(f.get('peak_mem_mb'))} |")
        tr = dev["training"]
        ratios = []
        for p in ("fp32", "bf16", "fp16"):
            if f"ours_{p}" in tr and f"peer_{p}" in tr:
                ratios.append(f"{p} {tr[f'ours_{p}']['tokens_per_s'] / tr[f'peer_{p}']['tokens_per_s']:.2f}x")
        if ratios:
            L += ["", "Ours / peer at the same precision: " + ", ".join(ratios) + "."]
        L += gpu_shape_markdown(dev.get("gpu_shape"))
        L += ["", f"### Beam-{s['beams']} decoding ({s['dec_sources']} sources x {s['dec_len']} tokens, cached "
              "keys/values, all beams as one batch)", "",
              "| model | precision | generated tok/s | seconds | peak memory (MB) |", "|---|---|---|---|---|"]
        for name, f in dev["decoding"].items():
            label = "our Transformer" if name.startswith("ours_") else "HF BART `generate` (peer)"
            L.append(f"| {label} | {f['precision']} | {_fmt(f['tokens_per_s'])} | {f['seconds']:.2f} | "
                     f"{_fmt(f.get('peak_mem_mb'))} |")
        L += decode_bound_markdown(dev.get("decode_bound"))
        L += ["", f"### Decoding time against beam size (our Transformer, {dev['default_precision']})", "",
              "| beam | seconds | generated tok/s | time / beam-1 time |", "|---|---|---|---|"]
        b1 = dev["decode_vs_beam"][0]["seconds"]
        for r in dev["decode_vs_beam"]:
            L.append(f"| {r['beam_size']} | {r['seconds']:.2f} | {_fmt(r['tokens_per_s'])} | {r['seconds'] / b1:.2f} |")
        L += recurrent_markdown(dev, s)
        L += eole_markdown(dev.get("eole"))
        L += eval_cost_markdown(dev.get("eval_cost"))
        sc = dev.get("scaling")
        if sc:
            L += ["", f"### Epoch time against training-set size ({sc['experiment']} `{sc['profile']}` profile, run "
                  f"`{sc['run']}`, {sc['dataset']}, {sc['precision']})", "",
                  f"Method: {sc['method']}. Setup (reading, vocabulary, model) {sc['setup_s']:.0f} s, not counted.", "",
                  "| training set | dialogues | batches | epoch (s) | data (s) | data share | target tok/s "
                  "| time / 25% time | size / 25% size |", "|---|---|---|---|---|---|---|---|---|"]
            for r in sc["rows"]:
                L.append(f"| {int(100 * r['fraction'])}% | {r['examples']:,} | {r['batches']} | {r['epoch_s']:.0f} | "
                         f"{r['data_s']:.1f} | {100 * r['data_share']:.1f}% | {_fmt(r['tokens_per_s'])} | "
                         f"{r['relative_time']:.2f} | {r['relative_size']:.2f} |")
        cp = dev.get("compile")
        if cp:
            L += ["", "### torch.compile (our Transformer's encoder and decoder stacks, training step)", ""]
            if "error" in cp:
                L.append(f"Not measured: {cp['error']}.")
            else:
                L.append(f"Compile (first step) {cp['compile_s']:.0f} s; steady step eager {cp['eager_step_s']:.2f} s, "
                         f"compiled {cp['compiled_step_s']:.2f} s ({cp['speedup']:.2f}x): "
                         + (f"pays after {cp['pays_after_steps']:.0f} steps." if cp["pays_after_steps"]
                            else "never pays, so training does not use it."))
        if dev.get("notes"):
            L += ["", "Notes:"] + [f"- {n}" for n in dev["notes"]]
    L += ["", "Figures: `bench.json` beside this file (every timed iteration included). Re-run: `zoo bench`."]
    return "\n".join(L) + "\n"


def decode_bound_markdown(b: dict[str, Any] | None) -> list[str]:
    """The decoding bound (decode_bound): the least matmul work of a call at the rate of a product timed
    among the decoders."""
    if not b:
        return []

    def pct(x):
        return f"{100 * x:.0f}%" if x >= 0.01 else f"{100 * x:.2g}%"

    ours = ", ".join(f"{k[5:]} {v['seconds']:.2f} s = {pct(v['share_of_peak'])} of that rate"
                     for k, v in b["ours"].items())
    line = (f"Bound: a call needs at least {b['min_gflop']:.1f} GFLOP of matmuls (encoder and cross-attention "
            f"keys/values once per source, one hypothesis per source at the first step, then every beam; HF "
            f"`generate` does {b['peer_gflop']:.1f}, every beam from the first step), {1e3 * b['min_s']:.3g} ms at "
            f"the rate of a {b['precision']} square product timed among the decoders ({_fmt(b['peak_gflops'])} "
            f"GFLOP/s, median: the same load as theirs). Ours: {ours}.")
    if b.get("ceiling_vs_peer"):
        line += (f" The peer's {b['peer_best'][5:]} time over that least time, **{b['ceiling_vs_peer']:.3g}x**, is "
                 "the highest decoding ratio against the peer that this machine's matmul rate allows.")
    if b["ours"] and max(v["share_of_peak"] for v in b["ours"].values()) < 0.5:
        line += (" Ours is far from that rate, so the matmul rate is not what bounds decoding here: the many "
                 "small per-step operations are.")
    return ["", line]


def gpu_shape_markdown(gs: dict[str, Any] | None) -> list[str]:
    """The GPU-sized training stage (CUDA only): model FLOP/s against the measured peak."""
    if not gs:
        return []
    o = gs["options"]
    mfu = "—" if gs["mfu"] is None else f"{100 * gs['mfu']:.0f}%"
    L = ["", f"### Training at a GPU-sized shape ({gs['precision']})", "",
         f"Our Transformer, d_model {o['d_model']}, d_ff {o['d_ff']}, {o['heads']} heads (head size "
         f"{o['d_model'] // o['heads']}), {o['layers']}+{o['layers']} layers, {gs['params']:,} parameters; "
         f"token batches (`train.batch_size = 0`, `train.max_tokens = {gs['max_tokens']}`) of "
         f"{min(gs['batch_examples'])}-{max(gs['batch_examples'])} examples with sources and targets of "
         "varied length. Median over the timed updates:", "",
         "| model GFLOP/s | peak GFLOP/s | MFU | target tok/s | peak memory (MB) |", "|---|---|---|---|---|",
         f"| {_fmt(gs['model_gflops'])} | {_fmt(gs['peak_gflops'])} ({gs['peak_kind']}) | {mfu} | "
         f"{_fmt(gs['tokens_per_s'])} | {_fmt(gs['peak_mem_mb'])} |"]
    if gs.get("variants"):
        L += ["", "The same model, seed and batches with one thing changed, timed interleaved with the runs' own "
              f"setting (cuDNN attention {'on' if gs.get('cudnn_attention') else 'off'}, eager). The first pass "
              "over the batches (every shape new) pays cuDNN's graph builds and compilation:", "",
              "| variant | model GFLOP/s | MFU | vs the runs' setting | first pass (s) |", "|---|---|---|---|---|",
              f"| the runs' setting | {_fmt(gs['model_gflops'])} | {mfu} | 1.00x | {gs.get('first_pass_s', 0):.1f} |"]
        for v, f in gs["variants"].items():
            what = GPU_SHAPE_VARIANTS.get(v, v)
            if "error" in f:
                L.append(f"| {what} | not measured: {f['error'][:100]} | | | |")
                continue
            vm = "—" if f["mfu"] is None else f"{100 * f['mfu']:.0f}%"
            L.append(f"| {what} | {_fmt(f['model_gflops'])} | {vm} | {f['vs_default']:.2f}x | {f['first_pass_s']:.1f} |")
    return L


def recurrent_markdown(dev: dict[str, Any], shape: dict[str, Any]) -> list[str]:
    """The recurrent family's table: each model's fast implementation against ``impl = "reference"``,
    timed interleaved in this run."""
    rec = dev.get("recurrent")
    if not rec:
        return []
    L = ["", "### Recurrent family: fast implementation against the previous one (`impl = \"reference\"`)", "",
         f"Same run, interleaved, same batch (training: {shape['batch']} x source {shape['src_len']} x target "
         f"{shape['tgt_len']}; decoding: beam {shape['beams']}, {shape['dec_sources']} sources x {shape['dec_len']} "
         f"tokens, {dev['default_precision']}). Speed-up = reference time / fast time.", "",
         "| model | params | precision | fast tok/s | reference tok/s | speed-up | fast peak memory (MB) "
         "| reference peak memory (MB) |", "|---|---|---|---|---|---|---|---|"]
    for name, r in rec.items():
        for p, row in r["training"].items():
            f, ref = row["fast"], row.get("reference")
            L.append(f"| {name} | {r['params']:,} | {p} training | {_fmt(f['tokens_per_s'])} | "
                     + (f"{_fmt(ref['tokens_per_s'])} | **{row['speedup']:.2f}x** | " if ref else
                        f"fails here ({row.get('reference_error', '')[:60]}) | — | ")
                     + f"{_fmt(f.get('peak_mem_mb'))} | {_fmt(ref.get('peak_mem_mb')) if ref else '—'} |")
        d = r.get("decoding", {})
        if "fast" in d:
            L.append(f"| {name} | {r['params']:,} | {d['fast']['precision']} beam-{shape['beams']} decoding | "
                     f"{_fmt(d['fast']['tokens_per_s'])} | {_fmt(d['reference']['tokens_per_s'])} | "
                     f"**{d['speedup']:.2f}x** | {_fmt(d['fast'].get('peak_mem_mb'))} | "
                     f"{_fmt(d['reference'].get('peak_mem_mb'))} |")
    bounds = [f"{name} {p} training {row['ceiling']:.2f}x ({row['output_s_at_peak']:.2f} of "
              f"{row['reference']['step_s']:.2f} s)"
              for name, r in rec.items() for p, row in r["training"].items() if row.get("ceiling")]
    bounds += [f"{name} decoding {r['decoding']['ceiling']:.2f}x ({r['decoding']['output_s_at_peak']:.2f} of "
               f"{r['decoding']['reference']['seconds']:.2f} s)"
               for name, r in rec.items() if r.get("decoding", {}).get("ceiling")]
    vocab = [f"{name} {r['decoding']['vocabulary_ceiling']:.2f}x ({r['decoding']['vocabulary_s']:.3g} of "
             f"{r['decoding']['reference']['seconds']:.3g} s)"
             for name, r in rec.items() if r.get("decoding", {}).get("vocabulary_ceiling")]
    if vocab:
        L += ["", "Bound on the decoding speed-up from the work both implementations share in the one beam decoder: "
              "per step the output layer, the fp32 log-softmax and each row's top 2K over the vocabulary, timed alone "
              "(first time in brackets; the reference's decoding time second): " + "; ".join(vocab) + "."]
    if bounds:
        L += ["", "Bound on the speed-up: both implementations do the same output-layer matmuls (training: 6 × output "
              "params × target tokens; beam decoding: 2 × output params × hypotheses, summed over the steps); at the "
              "rate of a square product timed among them (median) those alone take the first time in brackets (the "
              "reference's whole time second), so no fast path can beat the reference by more than: "
              + "; ".join(bounds) + "."]
    return L


def _table_head(title: str, columns: list[str]) -> list[str]:
    """A markdown section heading and the header rows of its table."""
    return ["", f"### {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def eole_markdown(eo: dict[str, Any] | None) -> list[str]:
    if not eo:
        return []
    L = _table_head(f"Second peer: eole {eo.get('version') or ''} (training, {eo['precision']}, interleaved)",
                    ["ours", "eole model", "ours tok/s", "eole tok/s", "ours / eole", "params ours / eole",
                     "shape difference"])
    for name, p in eo["pairs"].items():
        if "error" in p:
            L.append(f"| {name} | {p['eole_model']} | — | — | not measured: {p['error'][:80]} | | |")
            continue
        if "none" in p:
            L.append(f"| {name} | — | — | — | — | | {p['none']} |")
            continue
        L.append(f"| {name} | {p['eole_model']} | {_fmt(p['ours']['tokens_per_s'])} | {_fmt(p['eole']['tokens_per_s'])} "
                 f"| **{p['ratio']:.2f}x** | {p['ours_params']:,} / {p['eole_params']:,} | "
                 f"{p['difference']} |")
    return L


def eval_cost_markdown(ec: dict[str, Any] | None) -> list[str]:
    if not ec:
        return []
    L = _table_head(f"Evaluation cost: scoring {ec['examples']:,} summaries ({ec['words_per_summary']} words each, "
                    "one reference)", ["metric", "seconds", "summaries/s", "peak memory (MB)"])
    for name in ("rouge", "bertscore"):
        m = ec.get(name, {})
        label = {"rouge": "ROUGE-1/2/L/Lsum (rouge-score, stemmer)",
                 "bertscore": f"BERTScore ({m.get('backbone') or 'default backbone'})"}[name]
        if "error" in m:
            L.append(f"| {label} | not measured: {m['error']} | | |")
        else:
            L.append(f"| {label} | {m['seconds']:.1f} | {_fmt(m['examples_per_s'])} | {_fmt(m.get('peak_mem_mb'))} |")
    return L


def cpu_bf16_isa() -> str:
    """Which bf16 matmul instructions the CPU has: AMX (tiles, several times the fp32 rate), AVX512-BF16
    (dot products, about twice the fp32 rate) or none."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return "unknown"
    if "amx_bf16" in flags:
        return "AMX"
    return "AVX512-BF16 (no AMX)" if "avx512_bf16" in flags else "none"


def choose_threads(requested: int | None, load: float | None) -> tuple[int, str]:
    """torch CPU threads for the bench: ``requested`` if given; else torch's default, lowered to the
    cores other processes leave free (never below 1). On a shared machine, OpenMP threads that outnumber
    the free cores wait at every barrier for a descheduled sibling: measured here, 2 threads on 2 busy
    cores ran a training step 3-4x slower than 1 thread, and erratically."""
    default = torch.get_num_threads()
    if requested:
        return requested, "--threads"
    ncpu = os.cpu_count() or default
    if load is None:
        return default, "torch's default"
    free = max(1, int(round(ncpu - load)))
    if free < default:
        return free, (f"torch's default {default} lowered: load average {load:.1f} on {ncpu} CPUs leaves ~{free} "
                      f"free; --threads N overrides")
    return default, f"torch's default (load average {load:.1f} on {ncpu} CPUs)"


def run_bench(out: str | Path = "results/bench", *, quick: bool = False, devices: list[str] | None = None,
              scaling: bool = True, threads: int | None = None, data_dir: str | None = None,
              full_epoch: bool = False, with_compile: bool = False, shape: Shape = PAPER, plan: Plan | None = None,
              command: str = "zoo bench",
              progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Run every measurement on each device and write ``out``/bench.json and ``out``/README.md."""
    from datetime import datetime, timezone

    from seq2seq_zoo.utils import atomic_write_json, atomic_write_text, cpu_has_fast_bf16, hardware, pick_device
    t0 = time.perf_counter()
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    threads, why = choose_threads(threads, load_before)
    torch.set_num_threads(threads)
    progress(f"torch threads: {threads} ({why})")
    plan = plan or (QUICK_PLAN if quick else FULL_PLAN)
    if with_compile:
        plan = replace(plan, compile=True)
    if devices is None:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    devices = [pick_device(d) for d in devices]  # before hardware(): it records the attention kernels in use
    report: dict[str, Any] = {"command": command, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "quick": quick, "hardware": hardware(), "cpu_fast_bf16": cpu_has_fast_bf16(),
                              "cpu_bf16_isa": cpu_bf16_isa(),
                              "threads": threads, "threads_reason": why, "load_before": load_before,
                              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                              "shape": asdict(shape), "plan": asdict(plan), "peer_config": peer_config(shape),
                              "definitions": __doc__.split("Definitions (also written into the output):")[1].strip(),
                              "devices": []}
    try:
        import transformers
        report["transformers"] = transformers.__version__
    except Exception:  # noqa: BLE001
        report["transformers"] = None
    for device in devices:
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda: no CUDA device is available")
        report["devices"].append(run_device(device, shape, plan, scaling=scaling, data_dir=data_dir,
                                            full_epoch=full_epoch, progress=progress))
    report["wall_s"] = time.perf_counter() - t0
    report["load_after"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cpu = next((r for r in report["devices"] if r["device"] == "cpu"), None)
    if cpu is not None and not quick and not plan.compile and shape == PAPER:
        cpu["targets"].append(_target("`zoo bench` wall time on CPU (all devices), seconds", report["wall_s"],
                                      TARGET_BENCH_S, "s", lower_is_better=True))
    out = Path(out)
    atomic_write_json(out / "bench.json", report)
    atomic_write_text(out / "README.md", markdown(report))
    progress(f"wrote {out / 'bench.json'} and {out / 'README.md'} in {report['wall_s']:.0f}s")
    for dev in report["devices"]:
        for t in dev.get("targets", []):
            progress(f"  [{dev['device']}] {t['target']}: {t['status']}")
    return report


__all__ = ["Shape", "Plan", "PAPER", "TINY", "FULL_PLAN", "QUICK_PLAN", "run_bench", "run_device", "matmul_peak",
           "Trainer", "OurDecoder", "PeerDecoder", "measure_training", "measure_decoding", "epoch_scaling",
           "decode_vs_beam", "flop_params", "train_flops", "shaped_batch", "targets", "markdown", "measure_compile",
           "choose_threads", "cpu_bf16_isa", "beam_decode_flops", "decode_bound", "output_bound", "decode_rows"]
