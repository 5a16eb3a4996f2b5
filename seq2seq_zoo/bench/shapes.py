"""What `zoo bench` measures and against what: the model shapes (Shape), how long (Plan) and the
suite's speed targets."""
from __future__ import annotations

from dataclasses import dataclass


RNN_MODELS = ("gru", "bahdanau", "bilstm", "pointer_generator")


# The suite's speed targets; the bench prints whether each is met and by how much.
TARGET_TRAIN_VS_PEER = 1.5     # our default precision vs the peer's best precision (aim: 2.0)


TARGET_TRAIN_AIM = 2.0


TARGET_FP32_PARITY = 1.0       # our fp32 vs the peer's fp32


TARGET_DECODE_VS_PEER = 3.0    # beam-4 decoding


TARGET_DECODE_INT8_VS_PEER = 4.5   # beam-4 decoding with decode.precision = "int8", |ROUGE-1 change| < 0.2


TARGET_INT8_ROUGE1_CHANGE = 0.2


TARGET_EPOCH_S = 300.0         # one epoch of the pe_ablation CPU profile on DialogSum


TARGET_BENCH_S = 300.0         # `zoo bench` on CPU


TARGET_POINTER_VS_BASELINE = 2.0   # full-size pointer-generator update against `--baseline`'s, one thread


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


# A GPU's peak is measured on a larger product than a CPU's: a 2048³ product leaves much of a large GPU
# idle and reaches about half the rate of 8192³ products (figures: docs/performance.md)
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
    pointer_rounds: int = 3       # timed updates per side of the full-size pointer-generator stage (0: skip it)


FULL_PLAN = Plan()


QUICK_PLAN = Plan(warmup=1, iters=2, decode_iters=2, matmul_iters=4, scaling_steps=6, rnn_iters=1, eval_examples=200,
                  pointer_rounds=2)
