"""Data-parallel training over several processes and machines (PyTorch DistributedDataParallel).

Launching
    ``zoo run EXP --nproc N``   starts N workers on this machine running the same command, through
                                torch.distributed.run's elastic agent (what ``torchrun --standalone`` does);
    ``torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m seq2seq_zoo run EXP``
                                the same over machines, with torchrun's usual rendezvous flags.
    A worker knows it is one from torchrun's RANK / WORLD_SIZE / LOCAL_RANK variables. Backend: gloo on
    CPU (each worker gets cores // workers-per-machine threads), NCCL with ``cuda:LOCAL_RANK`` on GPUs
    ($ZOO_DIST_BACKEND overrides). Ranks > 0 wait in a collective while rank 0 decodes and scores a run,
    so the collective timeout is long: $ZOO_DIST_TIMEOUT_MIN minutes (default 180).

What a run means does not change with the number of processes
    Every rank builds the same batch list from (seed, epoch) (``bucket_batches``). Each global batch (still
    ``train.batch_size`` examples or ``train.max_tokens`` padded tokens, as in one process) is split by
    example: rank r trains on ``batch[r::W]``. A rank left without an example (a batch smaller than W)
    runs one stand-in example with weight 0, so every rank takes part in every gradient all-reduce.

    The loop normalises the loss by the number of target tokens. Rank r's shard has n_r of the global
    batch's N = sum_r n_r tokens (one small all-reduce per batch), and it back-propagates
    ``loss_r * n_r * W / N``; DDP averages gradients over the W ranks, so the update is the gradient of
    sum_r loss_r * n_r / N: the single-process loss of the same global batch (up to float summation
    order). Auxiliary losses that are per-token means (coverage) combine the same way. Steps, learning
    rate schedule, clipping, accumulation and early stopping are those of a single-process run, and the
    logged train loss and tokens/s are global. Validation batches are sharded over ranks and the NLL
    sums all-reduced, so every rank takes the same early-stopping / best-checkpoint decisions.
    DDP wraps an ``ObjectiveModule``: the objective runs inside DDP's forward with the model itself, so
    any objective (SCST decodes through ``encode``/``decode_step``) gets DDP's gradient averaging, and
    gradients are synchronised only on update batches (``DistributedDataParallel.no_sync`` otherwise).
    Shards are weighted by target tokens: exact for token means (CE, coverage); for a per-example mean
    (SCST's RL term) it is an approximation of the global batch's mean.

Writing
    Only rank 0 writes checkpoints, records, predictions and reports; it also decodes and scores the test
    split. Checkpoints carry every rank's RNG state, so ``--resume`` continues exactly (with the same
    number of processes; with another, ranks > 0 get fresh dropout streams). On several machines the
    results folder must be one shared filesystem, since every rank reads ``last.pt`` on ``--resume``.
"""
from __future__ import annotations

import contextlib
import copy
import gc
import inspect
import logging
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Iterator, Sequence

import torch

from seq2seq_zoo.data.batching import Batch, collate, iterate as _iterate
from seq2seq_zoo.errors import UserError
from seq2seq_zoo.precision import autocast
from seq2seq_zoo.utils import atomic_torch_save

_CURRENT: "DDPContext | None" = None
_LEFT = False  # this process was in a process group and has left it (shutdown)


class ObjectiveModule(torch.nn.Module):
    """``forward(batch) = objective(model, batch)``: the training step's forward as one module, so that a
    data-parallel wrapper sees every parameter the objective uses, whichever model methods it calls."""

    def __init__(self, model: torch.nn.Module, objective):
        super().__init__()
        self.model, self.objective = model, objective

    def forward(self, batch):
        return self.objective(self.model, batch)


class Single:
    """One process: every hook is the identity (the loop's default)."""
    rank, world_size, is_main = 0, 1, True

    def wrap(self, module, data=None, device=None, dtype=None):
        return module

    def iterate(self, data, batches, start: int = 0) -> Iterator[tuple[int, Batch]]:
        return _iterate(data, batches, start)

    def sync_gradients(self, update: bool = True):
        return contextlib.nullcontext()

    def reduce(self, loss, stats, batch, interrupted):
        return loss, stats

    def sum(self, *values):
        return values

    def agree(self, value):
        return value

    def save(self, obj: dict, path) -> None:
        atomic_torch_save(obj, path)

    def load_rng(self, ck: dict) -> None:
        pass

    def interrupt_flag(self) -> dict:
        return {"flag": False}


LOCAL = Single()


class _AgreedFlag(dict):
    """The loop's Ctrl-C flag under DDP. The signal handler's ``flag = True`` only marks the request;
    ``flag`` reads the value all ranks agreed on at the last batch, so every rank stops at the same update."""

    def __init__(self):
        super().__init__(flag=False, term=False)
        self.pending = False
        self.term_pending = False  # the request was SIGTERM (pre-emption): every rank then exits 143

    def __setitem__(self, key, value):
        if key == "term":
            self.term_pending = self.term_pending or bool(value)
        else:
            self.pending = self.pending or bool(value)

    def agreed(self, value: bool, term: bool = False) -> None:
        dict.__setitem__(self, "flag", bool(value))
        dict.__setitem__(self, "term", bool(term))


class DDPContext:
    """One rank of a data-parallel run (see the module docstring)."""

    def __init__(self, rank: int, world_size: int, local_rank: int = 0, local_world_size: int | None = None):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.local_world_size = local_world_size or world_size
        self.is_main = rank == 0
        self.ddp = None

    # ------------------------------------------------------------------------------------ setup
    def device(self, wanted: torch.device) -> torch.device:
        """This rank's device: cuda -> cuda:LOCAL_RANK; cpu stays cpu."""
        if wanted.type == "cuda":
            if self.local_world_size > torch.cuda.device_count():
                raise UserError(f"{self.local_world_size} processes on this machine but {torch.cuda.device_count()} "
                                "GPU(s): NCCL needs one GPU per process (use fewer processes, or --device cpu)")
            return torch.device("cuda", self.local_rank)
        return wanted

    def wrap(self, module: ObjectiveModule, data: Sequence, device: torch.device, dtype):
        """DistributedDataParallel around the objective module (parameters broadcast from rank 0). A
        probe step on one example (RNG state restored, on a copy of the objective so its statistics stay
        untouched) finds parameters the objective leaves without gradients; only then does DDP pay for
        ``find_unused_parameters``. Ranks > 0 then draw their own dropout stream."""
        from torch.nn.parallel import DistributedDataParallel
        model = module.model
        params = [p for p in model.parameters() if p.requires_grad]
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
        was = model.training
        model.train()
        probe = collate([data[self.rank % len(data)]]).to(device)
        with autocast(device, dtype):
            loss, _ = copy.deepcopy(module.objective)(model, probe)
        loss.backward()
        unused = any(p.grad is None for p in params)
        for p in params:
            p.grad = None
        model.train(was)
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state(cuda_rng, device)
        flag = torch.tensor([float(unused)])
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        # buffers (positional tables) are constants: no broadcast before every forward
        no_sync = ({"forward_sync_buffers": False}
                   if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
                   else {"broadcast_buffers": False})
        ids = [device.index if device.index is not None else torch.cuda.current_device()] \
            if device.type == "cuda" else None
        self.ddp = DistributedDataParallel(module, device_ids=ids, find_unused_parameters=bool(flag.item()),
                                           **no_sync)
        if self.rank:
            torch.manual_seed(torch.initial_seed() + 7919 * self.rank)
        return self.ddp

    # ------------------------------------------------------------------------------------ training
    def iterate(self, data, batches: list[list[int]], start: int = 0):
        """This rank's share of each global batch."""
        for k in range(start, len(batches)):
            mine = batches[k][self.rank::self.world_size]
            weight = 1.0
            if not mine:  # fewer examples than ranks: a stand-in that contributes nothing
                mine, weight = batches[k][:1], 0.0
            batch = collate([data[i] for i in mine])
            batch.extra["ddp_weight"] = weight
            yield k, batch

    def sync_gradients(self, update: bool = True):
        """Around forward and backward: all-reduce the gradients only on a batch that ends with an
        update; under gradient accumulation the other batches add to the local gradients."""
        return contextlib.nullcontext() if update or self.ddp is None else self.ddp.no_sync()

    def reduce(self, loss: torch.Tensor, stats: dict, batch: Batch, interrupted: _AgreedFlag):
        """One all-reduce per batch: token counts, the global loss, and whether any rank was interrupted.
        Returns a loss whose value is the global batch's loss (what one process would log and check for
        NaN) and whose gradient is this rank's share, scaled so DDP's average is the global gradient."""
        w = float(batch.extra.get("ddp_weight", 1.0))
        n = stats["tokens"] * w
        local = float(loss.detach()) * n if w else 0.0
        vec = torch.tensor([n, local, stats.get("nll_sum", 0.0) * w, batch.n_tokens() * w,
                            float(getattr(interrupted, "pending", False)),
                            float(getattr(interrupted, "term_pending", False))], dtype=torch.float64, device=loss.device)
        torch.distributed.all_reduce(vec)
        N, loss_sum, nll_sum, src_tgt, stop, term = vec.tolist()
        if isinstance(interrupted, _AgreedFlag):
            interrupted.agreed(stop > 0, term > 0)
        N_ = max(N, 1.0)
        scaled = loss * (n * self.world_size / N_)
        value = torch.tensor(loss_sum / N_, dtype=loss.dtype, device=loss.device)
        out = dict(stats, tokens=int(round(N)), nll_sum=nll_sum, batch_tokens=int(round(src_tgt)))
        return scaled + (value - scaled).detach(), out

    def sum(self, *values):
        t = torch.tensor([float(v) for v in values], dtype=torch.float64)
        torch.distributed.all_reduce(t)
        return tuple(t.tolist())

    def agree(self, value):
        """Rank 0's answer, on every rank (e.g. whether a checkpoint exists)."""
        obj = [value]
        torch.distributed.broadcast_object_list(obj, src=0, device=torch.device("cpu"))
        return obj[0]

    def interrupt_flag(self) -> _AgreedFlag:
        return _AgreedFlag()

    # ------------------------------------------------------------------------------------ checkpoints
    def save(self, obj: dict, path) -> None:
        """Every rank's RNG state is gathered into the checkpoint; only rank 0 writes it."""
        mine = [torch.get_rng_state()]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            mine.append(torch.cuda.get_rng_state())
        states = [None] * self.world_size
        torch.distributed.all_gather_object(states, mine)
        if self.is_main:
            atomic_torch_save(dict(obj, rng_ranks=states), path)

    def load_rng(self, ck: dict) -> None:
        ranks = ck.get("rng_ranks")
        if ranks and len(ranks) == self.world_size:
            torch.set_rng_state(ranks[self.rank][0])
            if len(ranks[self.rank]) > 1 and torch.cuda.is_available():
                torch.cuda.set_rng_state(ranks[self.rank][1])
        elif self.rank:
            torch.manual_seed(torch.initial_seed() + 7919 * self.rank)

    @contextlib.contextmanager
    def main_first(self):
        """Rank 0 runs the block first (e.g. fills a cache), then the others."""
        if not self.is_main:
            torch.distributed.barrier()
        yield
        if self.is_main:
            torch.distributed.barrier()


# ---------------------------------------------------------------------------------------- processes
def in_worker() -> bool:
    """True inside a torchrun-launched process of a group with more than one rank."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


def launched() -> bool:
    """True in any process torchrun started (even a group of one): never launch again from there."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def current() -> DDPContext | None:
    return _CURRENT


def setup() -> DDPContext | None:
    """Join the process group torchrun describes in the environment (None in a single process).
    Ranks other than 0 keep quiet on stdout."""
    global _CURRENT
    if _CURRENT is not None or not in_worker():
        return _CURRENT
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    torch.set_num_threads(max(1, _cores() // local_world))
    backend = os.environ.get("ZOO_DIST_BACKEND") or ("cpu:gloo,cuda:nccl" if cuda else "gloo")
    # ranks > 0 wait in a collective while rank 0 decodes and scores a run: allow for that
    timeout = timedelta(minutes=float(os.environ.get("ZOO_DIST_TIMEOUT_MIN", "180")))
    torch.distributed.init_process_group(backend, timeout=timeout)
    _CURRENT = DDPContext(rank, world, local_rank, local_world)
    if rank:
        sys.stdout = open(os.devnull, "w")
    return _CURRENT


def shutdown(wait: bool = False) -> None:
    """Leave the process group ``setup`` joined, if any (see ``leave``)."""
    global _CURRENT
    if _CURRENT is not None:
        leave(wait)
    _CURRENT = None


def leave(wait: bool = False) -> None:
    """Leave this process's process group, if it is in one. ``wait`` (a clean finish, or a Ctrl-C / SIGTERM
    stop that every rank agreed on): first wait until every rank gets here, so that ranks > 0 do not tear
    down their end while rank 0 still decodes and writes the report or last.pt. End the process with
    ``end_process`` afterwards."""
    global _LEFT
    if not torch.distributed.is_initialized():
        return
    if wait:
        try:
            torch.distributed.barrier()
        except RuntimeError:  # another rank is gone: nothing left to wait for
            pass
    gc.collect()  # DDP models nothing refers to any more (cycles) let go of the group before it is destroyed
    torch.distributed.destroy_process_group()
    _LEFT = True


def end_process(code: int) -> int:
    """The last call of a process: one that left a process group ends here with ``os._exit(code)`` once its
    output is flushed, skipping the interpreter's teardown; any other process gets ``code`` back.
    Why: with torch 2.13, a gloo process group that something still holds after ``destroy_process_group``
    (DDP's reducer does, for as long as its model lives: an exception's traceback, a reference cycle) is
    torn down with the interpreter, whose end then aborts ("terminate called without an active exception",
    exit -6) after a run that finished cleanly. Measured on the 2-core VM under load, 30 two-rank
    launches each of DDP steps, barrier and destroy: 7 aborts; with the model collected first, 0; with this
    exit, 0. ``leave`` collects, this exit covers what is still referenced. Everything the process writes
    is written by then (records, checkpoints and logs are closed files)."""
    if not _LEFT:
        return code
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing to flush
            pass
    logging.shutdown()
    os._exit(code)


def on_main(fn, default=None):
    """``fn()`` on rank 0 only; if it raises, every rank stops (rank 0 with the error, others quietly)."""
    ctx = current()
    if ctx is None:
        return fn()
    failed, result = None, default
    if ctx.is_main:
        try:
            result = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below once the others know
            failed = e
    if ctx.agree(failed is not None):
        if failed is not None:
            raise failed
        raise SystemExit(2)
    return result


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def launch(nproc: int, argv: list[str]) -> int:
    """``zoo ARGV`` in ``nproc`` worker processes on this machine: torch.distributed.run's elastic agent
    (``torchrun --standalone``), run in this process. Returns the workers' exit status (rank 0's first)."""
    import signal

    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    entry = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if entry is not None and entry.name == "zoo" and entry.is_file():
        target = ["--no-python", str(entry)]   # so records show the command as it was typed
    else:
        target = ["--module", "seq2seq_zoo"]
    ns = torchrun.get_args_parser().parse_args(["--standalone", f"--nproc-per-node={nproc}", *target])
    ns.training_script_args = list(argv)   # set here: torchrun's parser would take --nproc for its own
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores() // nproc)))
    handled = [getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, n)]
    old = {s: signal.getsignal(s) for s in handled}
    try:
        torchrun.run(ns)
        return 0
    except ChildFailedError as e:  # the workers printed their errors already
        codes = [f.exitcode for _, f in sorted(e.failures.items())]
        return next((c for c in codes if c and c > 0), 1)
    except SignalException as e:  # Ctrl-C / kill: the agent passed it on to the workers, which saved
        return 130 if e.sigval == signal.SIGINT else 128 + int(e.sigval)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


__all__ = ["ObjectiveModule", "Single", "LOCAL", "DDPContext", "setup", "shutdown", "current", "in_worker", "launched", "launch", "on_main"]
