"""`zoo bench`: training and decoding throughput of our models against a Hugging Face BART peer (and,
optionally, eole) of the same shape, measured in one process, against the suite's speed targets.

One concern a module: ``shapes`` (what is measured, the targets), ``timing`` (interleaved timing, medians,
peak memory, matmul rate), ``workloads`` (random batches, our models at the bench shapes), ``flops`` (the
FLOP model and the bounds it gives), ``measure`` (training and decoding of ours), ``peers.hf`` and
``peers.eole`` (the peers), ``recurrent`` (fast against reference recurrent models), ``scaling`` (epoch
time against data size), ``evalcost`` (metric cost), ``gpu`` (the GPU-sized stage), ``targets`` and
``markdown`` (the report) and ``run`` (the entry: ``run_bench`` and ``run_device``). Every name is
re-exported here. How to run it and the current figures: docs/performance.md."""
from __future__ import annotations

from seq2seq_zoo.bench.shapes import (  # noqa: F401
    RNN_MODELS, TARGET_POINTER_VS_BASELINE, TARGET_TRAIN_VS_PEER, TARGET_TRAIN_AIM, TARGET_FP32_PARITY, TARGET_DECODE_VS_PEER,
    TARGET_EPOCH_S, TARGET_BENCH_S, Shape, PAPER, GPU_SHAPE, GPU_MAX_TOKENS, TARGET_GPU_MFU, GPU_MATMUL_N, TINY,
    Plan, FULL_PLAN, QUICK_PLAN)
from seq2seq_zoo.bench.timing import (  # noqa: F401
    log, sync, release_free_memory, PeakMemory, interleaved, error_line, median, precision_name, peak_matmul_n,
    MatmulProbe, matmul_peak)
from seq2seq_zoo.bench.workloads import (  # noqa: F401
    random_examples, shaped_batch, target_tokens, source_tokens, context, our_transformer, our_model,
    token_batches)
from seq2seq_zoo.bench.flops import (  # noqa: F401
    flop_params, train_flops, beam_decode_flops, decode_bound, int8_bound, output_bound, decode_rows)
from seq2seq_zoo.bench.measure import (  # noqa: F401
    Trainer, peer_update, train_figures, measure_training, linears_free, OurDecoder, measure_decoding,
    decode_vs_beam, measure_compile)
from seq2seq_zoo.bench.peers.hf import (  # noqa: F401
    peer_config, peer_available, peer_model, PeerDecoder)
from seq2seq_zoo.bench.peers.eole import (  # noqa: F401
    EOLE_VERSION, EOLE_PAIRS, EOLE_NONE, eole_available, eole_model, EoleTrainer, measure_eole)
from seq2seq_zoo.bench.recurrent import (  # noqa: F401
    measure_recurrent, vocabulary_work)
from seq2seq_zoo.bench.pointer_full import (  # noqa: F401
    PG_FULL, measure_pointer_full, shared_work, check_baseline)
from seq2seq_zoo.bench.scaling import (  # noqa: F401
    epoch_scaling)
from seq2seq_zoo.bench.evalcost import (  # noqa: F401
    synthetic_summaries, measure_eval_cost)
from seq2seq_zoo.bench.gpu import (  # noqa: F401
    BatchCycle, GPU_SHAPE_VARIANTS, WithCudnnAttention, measure_gpu_shape)
from seq2seq_zoo.bench.targets import (  # noqa: F401
    targets, verdict)
from seq2seq_zoo.bench.markdown import (  # noqa: F401
    markdown, decode_bound_markdown, int8_bound_markdown, gpu_shape_markdown, recurrent_markdown, eole_markdown,
    eval_cost_markdown, pointer_full_markdown)
from seq2seq_zoo.bench.run import (  # noqa: F401
    run_device, cpu_bf16_isa, choose_threads, run_bench)

__all__ = [
    'RNN_MODELS', 'TARGET_POINTER_VS_BASELINE', 'TARGET_TRAIN_VS_PEER', 'TARGET_TRAIN_AIM', 'TARGET_FP32_PARITY', 'TARGET_DECODE_VS_PEER',
    'TARGET_EPOCH_S', 'TARGET_BENCH_S', 'Shape', 'PAPER', 'GPU_SHAPE', 'GPU_MAX_TOKENS', 'TARGET_GPU_MFU',
    'GPU_MATMUL_N', 'TINY', 'Plan', 'FULL_PLAN', 'QUICK_PLAN', 'log', 'sync', 'release_free_memory',
    'PeakMemory', 'interleaved', 'error_line', 'median', 'precision_name', 'peak_matmul_n', 'MatmulProbe',
    'matmul_peak', 'random_examples', 'shaped_batch', 'target_tokens', 'source_tokens', 'context',
    'our_transformer', 'our_model', 'token_batches', 'flop_params', 'train_flops', 'beam_decode_flops',
    'decode_bound', 'int8_bound', 'output_bound', 'decode_rows', 'Trainer', 'peer_update', 'train_figures',
    'measure_training', 'linears_free', 'OurDecoder', 'measure_decoding', 'decode_vs_beam', 'measure_compile', 'peer_config',
    'peer_available', 'peer_model', 'PeerDecoder', 'EOLE_VERSION', 'EOLE_PAIRS', 'EOLE_NONE', 'eole_available',
    'eole_model', 'EoleTrainer', 'measure_eole', 'measure_recurrent', 'vocabulary_work', 'PG_FULL', 'measure_pointer_full', 'shared_work', 'check_baseline', 'epoch_scaling',
    'synthetic_summaries', 'measure_eval_cost', 'BatchCycle', 'GPU_SHAPE_VARIANTS', 'WithCudnnAttention',
    'measure_gpu_shape', 'targets', 'verdict', 'markdown', 'decode_bound_markdown', 'int8_bound_markdown', 'gpu_shape_markdown',
    'recurrent_markdown', 'eole_markdown', 'eval_cost_markdown', 'pointer_full_markdown', 'run_device', 'cpu_bf16_isa', 'choose_threads',
    'run_bench']
