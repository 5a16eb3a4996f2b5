"""The one training loop, readable top to bottom (nanoGPT style): bucketed batches, autocast,
gradient accumulation, clipping, LR schedule, validation, best/last checkpoints, exact resume,
early stopping. Every registered model and objective goes through it unchanged.
"""
from __future__ import annotations

import contextlib
import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
from tqdm.auto import tqdm

from seq2seq_zoo.config import TrainConfig
from seq2seq_zoo.data.batching import Encoded, bucket_batches
from seq2seq_zoo.errors import Preempted, TrainingStopped, UnsafeCheckpoint
from seq2seq_zoo.metrics import scale_of
from seq2seq_zoo.precision import autocast, autocast_dtype
from seq2seq_zoo.registry import OBJECTIVES, SCHEDULES
from seq2seq_zoo.train.distributed import LOCAL, ObjectiveModule
from seq2seq_zoo.train.objectives import Objective
from seq2seq_zoo.train.validation import decoded_samples, validation_loss, validation_score
from seq2seq_zoo.utils import load_checkpoint, load_weights


@dataclass
class LoopState:
    epoch: int = 0                 # current epoch (0-based)
    batch: int = 0                 # next batch index within the epoch
    step: int = 0                  # optimizer updates done
    best_val: float = math.inf
    best_step: int = 0
    bad_validations: int = 0
    train_seconds: float = 0.0     # update time, summed over every invocation (resumes included)
    val_seconds: float = 0.0
    train_tokens: int = 0
    resumes: int = 0
    history: list[dict] = field(default_factory=list)      # one row per epoch
    val_curve: list[dict] = field(default_factory=list)    # one row per validation
    stopped_early: bool = False
    stopped_by_time: bool = False  # train.max_minutes ended training
    finished: bool = False
    best_score: float | None = None  # val_metric at best.pt when it is a decode metric (higher is better)
    objective_stats: dict = field(default_factory=dict)     # e.g. SCST rewards and reward time

    def to_dict(self):
        return dict(self.__dict__)


def build_optimizer(params, cfg: TrainConfig, lr: float | None = None) -> torch.optim.Optimizer:
    """Adam or AdamW; the fused kernel (one pass over all tensors) where every parameter's device has one,
    which halves the optimizer's time on CPU and GPU alike."""
    params = list(params)
    opt_cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    try:
        from torch.optim.optimizer import _get_fused_kernels_supported_devices
        devices = set(_get_fused_kernels_supported_devices())
    except ImportError:  # private helper; these two have had fused Adam since torch 2.4
        devices = {"cpu", "cuda"}
    fused = bool(params) and all(p.device.type in devices and p.is_floating_point() for p in params)
    return opt_cls(params, lr=cfg.lr if lr is None else lr, betas=tuple(cfg.betas), eps=cfg.eps,
                   weight_decay=cfg.weight_decay, fused=fused or None)


def lr_at(cfg: TrainConfig, step: int, d_model: int | None) -> float:
    return SCHEDULES.get(cfg.schedule)(step, lr=cfg.lr, d_model=d_model or 512, lr_factor=cfg.lr_factor,
                                       warmup=cfg.warmup)


class TrainStep:
    """One batch of training, as the loop runs it and ``zoo bench`` times it:

    forward_backward(batch, update)  the objective's loss under autocast, inside the data-parallel
                                     wrapper's forward (gradients synchronised only when ``update``);
                                     under accumulation weighted by its target tokens (and scaled by
                                     the fp16 GradScaler) and back-propagated
    optimizer_step(lr)               accumulated gradients divided by the group's target tokens, the
                                     learning rate set, gradients unscaled and clipped, one optimizer
                                     update, gradients cleared
    __call__(batch)                  both: one update on one batch (accum_steps = 1)
    """

    def __init__(self, model, objective: Objective, cfg: TrainConfig, device: torch.device, dtype, lr: float):
        self.model, self.objective, self.cfg, self.device, self.dtype = model, objective, cfg, device, dtype
        self.group_tokens = 0  # target tokens of the accumulation group so far (groups start at updates)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, cfg, lr=lr)
        self.scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
        self.ddp = LOCAL
        self.net = ObjectiveModule(model, objective)   # runs objective(model, batch) as its forward
        self.grad_norm: torch.Tensor | None = None     # of the last update, before clipping (for the logs)

    def distribute(self, ddp, data: Sequence[Encoded]) -> None:
        """Data-parallel training: wrap the objective module in DistributedDataParallel."""
        self.ddp = ddp
        self.net = ddp.wrap(self.net, data, self.device, self.dtype)

    def forward_backward(self, batch, update: bool = True, interrupted=None) -> tuple[float, dict]:
        """Returns the loss of the (global) batch as a float, the loop's one host sync per batch, and
        the objective's stats."""
        with self.ddp.sync_gradients(update):
            with autocast(self.device, self.dtype):
                loss, stats = self.net(batch)
            loss, stats = self.ddp.reduce(loss, stats, batch, interrupted)  # DDP: the global batch's loss
            # accumulation weights each micro-batch's token mean by its target tokens, and the update
            # divides by the group's total: the gradient of the token mean over the union of the group
            # (as the DDP path weighs shards), also for a group cut short by the end of the epoch
            accum = self.cfg.accum_steps > 1
            self.scaler.scale(loss * stats["tokens"] if accum else loss).backward()
            self.group_tokens += stats["tokens"]
        return float(loss.detach()), stats  # after backward is queued

    def optimizer_step(self, lr: float) -> None:
        if self.cfg.accum_steps > 1:
            torch._foreach_div_([p.grad for p in self.params if p.grad is not None], float(max(self.group_tokens, 1)))
        self.group_tokens = 0
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        if self.cfg.clip_norm > 0:
            self.scaler.unscale_(self.optimizer)
            self.grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def __call__(self, batch) -> float:
        loss, _ = self.forward_backward(batch)
        self.optimizer_step(self.optimizer.param_groups[0]["lr"])
        return loss


def fit(model, train_data: Sequence[Encoded], val_data: Sequence[Encoded], cfg: TrainConfig, *, seed: int,
        ckpt_dir: Path, device: torch.device, resume: bool = False, progress: bool = True,
        log: Callable[[str], None] = print, extra_state: dict | None = None, ddp=None, vocab=None,
        run_dir: Path | None = None) -> LoopState:
    """Train ``model`` on ``train_data`` with ``cfg``; checkpoints go to ``ckpt_dir`` (``last.pt`` every
    epoch, ``best.pt`` at the best validation). ``ddp``: a ``train.distributed.DDPContext`` for one rank
    of a data-parallel run (default: one process). ``vocab``: for objectives and validation metrics
    that turn ids into text (SCST, ``val_metric``). ``run_dir``: write the live logs there
    (``run_dir/logs/``: train_log.jsonl and TensorBoard events, see ``train.runlog``).

    The stages: set up (objective, ``TrainStep``, data parallel), resume, then epoch by epoch the batches
    (forward and backward; every ``accum_steps`` batches an update, then validation and checkpoints when
    due), and the epoch's end (validation, ``last.pt``). Ctrl-C / SIGTERM stop at an update boundary
    with ``last.pt`` saved."""
    tr = _Training(model, train_data, val_data, cfg, seed, Path(ckpt_dir), device, ddp or LOCAL, vocab, log,
                   extra_state)
    if resume and tr.resume():
        return tr.st                                       # finished already
    st = tr.st
    with _stop_signals(tr.ddp) as interrupted, tr.live_logs(run_dir):
        model.train()
        tr.score_starting_point()
        while st.epoch < cfg.epochs and not st.stopped_early:
            batches, row, bar, clock = tr.start_epoch(progress)
            for k, batch in tr.ddp.iterate(train_data, batches, st.batch):
                update = (k + 1) % cfg.accum_steps == 0 or k + 1 == len(batches)
                loss = tr.forward_backward(batch, update, row, interrupted, _total_steps(cfg, len(batches)))
                st.batch = k + 1
                if update and tr.update(row, loss, clock):
                    break  # max_steps, patience or time used up at a validation inside the epoch
                clock.show_progress(bar, st, row, loss, len(batches), log)
                if interrupted["flag"] and st.batch % cfg.accum_steps == 0:
                    break  # only at an update boundary, so the saved state resumes exactly
            tr.end_epoch(row, bar, clock, len(batches), interrupted)
    return st


class _Training:
    """What ``fit`` holds for one run: the model, its ``TrainStep`` and objective, the loop state, the
    checkpoint files and the run's ranks; each method is one stage of ``fit``."""

    def __init__(self, model, train_data, val_data, cfg: TrainConfig, seed: int, ckpt_dir: Path, device, ddp, vocab,
                 log, extra_state):
        self.model, self.train_data, self.val_data, self.cfg, self.seed = model, train_data, val_data, cfg, seed
        self.ckpt_dir, self.device, self.ddp, self.vocab, self.log = ckpt_dir, device, ddp, vocab, log
        self.extra_state = extra_state or {}
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        self.last = ckpt_dir / "last.pt"
        self.dtype = autocast_dtype(cfg.precision, device)
        self.d_model = model.schedule_dim()
        self.objective = OBJECTIVES.get(cfg.objective).from_config(cfg, vocab)
        if cfg.val_metric != "loss" and vocab is None:
            raise ValueError(f"train.val_metric = {cfg.val_metric!r} decodes the validation set and needs the "
                             "vocabulary")
        self.step = TrainStep(model, self.objective, cfg, device, self.dtype, lr=lr_at(cfg, 1, self.d_model))
        self.st = LoopState()
        self.logger = None
        torch.manual_seed(seed)
        self.step.distribute(ddp, train_data)

    # ------------------------------------------------------------------------------- before the first batch
    def resume(self) -> bool:
        """Go on from ``last.pt`` when every rank has one; True when that run had finished already."""
        if not self.ddp.agree(self.last.exists()):
            return False
        st = self.st = _resume(self.last, self.model, self.step, self.device, self.ddp, self.log)
        st.finished = st.epoch >= self.cfg.epochs or st.stopped_early  # epochs may have been raised since
        return st.finished

    @contextlib.contextmanager
    def live_logs(self, run_dir: Path | None):
        """train_log.jsonl and TensorBoard events under ``run_dir/logs/`` (rank 0), closed at the end."""
        if run_dir is not None and self.ddp.is_main:
            from seq2seq_zoo.train.runlog import RunLogger
            self.logger = RunLogger(run_dir, step=self.st.step, log=self.log)
        try:
            yield
        finally:
            if self.logger is not None:
                self.logger.close()

    def score_starting_point(self) -> None:
        """Fine-tuning from a checkpoint with a decode metric: score the starting point too (the first row of
        the seed's Table 28), and keep it as best.pt unless an update beats it."""
        cfg, st = self.cfg, self.st
        if cfg.init_from and cfg.val_metric != "loss" and st.step == 0 and not st.val_curve:
            self.validate()
            self.model.train()

    # ------------------------------------------------------------------------------------- the batches
    def start_epoch(self, progress: bool):
        st, cfg = self.st, self.cfg
        batches = bucket_batches(self.train_data, cfg.batch_size, max_tokens=cfg.max_tokens, seed=self.seed,
                                 epoch=st.epoch)
        if st.batch == 0:
            st.history.append({"epoch": st.epoch + 1, "train_loss_sum": 0.0, "train_tokens": 0, "seconds": 0.0})
        bar = tqdm(total=len(batches), initial=st.batch, desc=f"epoch {st.epoch + 1}/{cfg.epochs}",
                   disable=None if progress else True, leave=False, dynamic_ncols=True)
        return batches, st.history[-1], bar, _Clock()

    def forward_backward(self, batch, update: bool, row: dict, interrupted, total_steps: int) -> float:
        """One batch: forward, loss, backward (gradients synchronised on update batches); the loss checked
        finite before any update, and the epoch's sums."""
        st = self.st
        batch.to(self.device)
        self.objective.set_progress(st.step / max(total_steps, 1))  # e.g. SCST's gamma ramp
        loss, stats = self.step.forward_backward(batch, update, interrupted)
        _check_finite(loss, st, self.last)
        row["train_loss_sum"] += loss * stats["tokens"]
        row["train_tokens"] += stats["tokens"]
        st.train_tokens += stats.get("batch_tokens") or batch.n_tokens()
        st.objective_stats = self.objective.summary()
        return loss

    def update(self, row: dict, loss: float, clock: _Clock) -> bool:
        """An optimizer update, its live log line, then validation and a checkpoint when due. True when
        training stops here (max_steps, patience or time used up at this validation)."""
        st, cfg = self.st, self.cfg
        st.step += 1
        row["lr"] = lr = lr_at(cfg, st.step, self.d_model)
        self.step.optimizer_step(lr)
        if self.logger is not None:
            gn = self.step.grad_norm
            self.logger.update(st.step, st.epoch + 1, loss, lr, None if gn is None else float(gn),
                               st.train_tokens / max(st.train_seconds + time.perf_counter() - clock.t0, 1e-9))
        if cfg.val_every and st.step % cfg.val_every == 0:
            clock.t0 += self.validate()
            if cfg.max_minutes:  # DDP: rank 0's clock decides for every rank
                st.stopped_by_time = self.ddp.agree(_time_up(cfg, st, time.perf_counter() - clock.t0))
        if cfg.checkpoint_every and st.step % cfg.checkpoint_every == 0:
            _timed_save(st, row, clock.t0, self.save, self.last)
            clock.t0 = time.perf_counter()
        return bool((cfg.max_steps and st.step >= cfg.max_steps) or st.stopped_early or st.stopped_by_time)

    def end_epoch(self, row: dict, bar, clock: _Clock, n_batches: int, interrupted) -> None:
        """The epoch's time; on a stop request inside the epoch, ``last.pt`` and the stop; else the epoch's
        row and validation (``_end_epoch``), the kept weights for averaging, ``last.pt``."""
        st, cfg = self.st, self.cfg
        bar.close()
        row["seconds"] += time.perf_counter() - clock.t0
        st.train_seconds += time.perf_counter() - clock.t0
        if interrupted["flag"] and st.batch < n_batches:
            self.save(self.last)
            raise _stopped(interrupted)
        _end_epoch(st, row, cfg, self.validate, self.log, self.ddp.agree)
        if cfg.average_last and self.ddp.is_main:  # the weights of the last N epochs, for averaging
            from seq2seq_zoo.averaging import keep_epoch
            keep_epoch(self.ckpt_dir, self.model, len(st.history), cfg.average_last)
        self.save(self.last)
        if interrupted["flag"]:  # even after the last update: the user asked to stop
            raise _stopped(interrupted)

    # ------------------------------------------------------------------------ validation and checkpoints
    def validate(self) -> float:
        return _validate(self.model, self.val_data, self.cfg, self.device, self.dtype, self.st, self.save,
                         self.ckpt_dir, self.log, self.ddp, self.vocab, self.logger)

    def save(self, path: Path) -> None:
        """Weights, optimizer, scaler, loop state and RNG states (DDP: rank 0 writes, with every rank's RNG
        state), so a resume goes on exactly."""
        step, device = self.step, self.device
        self.ddp.save({"model": self.model.state_dict(), "optimizer": step.optimizer.state_dict(),
                       "scaler": step.scaler.state_dict(), "loop": self.st.to_dict(), "rng": torch.get_rng_state(),
                       "cuda_rng": torch.cuda.get_rng_state() if device.type == "cuda" else None,
                       **self.extra_state}, path)


class _Clock:
    """The epoch's training clock (validation time is taken out of it) and when a progress line was last
    written."""

    def __init__(self):
        self.t0 = self.last_log = time.perf_counter()

    def show_progress(self, bar, st: LoopState, row: dict, loss: float, n_batches: int, log) -> None:
        self.last_log = _show_progress(bar, st, row, loss, self.t0, self.last_log, n_batches, log)


@contextlib.contextmanager
def _stop_signals(ddp):
    """Ctrl-C or SIGTERM while training: the flag is set, the loop finishes the current update, saves and
    stops (``_stopped``); the previous handlers come back at the end. Yields the flag (agreed over ranks)."""
    interrupted = ddp.interrupt_flag()  # {"flag": False}; "term": whether it was SIGTERM (on any rank)

    def on_signal(signum, frame):
        if signum == signal.SIGTERM:
            interrupted["term"] = True
        interrupted["flag"] = True
    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)} if _main_thread() else {}
    try:
        yield interrupted
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _stopped(interrupted) -> BaseException:
    """SIGTERM (a scheduler's pre-emption) exits 143, Ctrl-C 130."""
    e = Preempted() if interrupted.get("term") else KeyboardInterrupt()
    e.together = True  # under DDP every rank raises it at the same update (the flag is agreed on)
    return e


def _check_finite(loss: float, st: LoopState, last: Path) -> None:
    """A non-finite loss stops the run before the update: the weights stay as they were."""
    if not math.isfinite(loss):
        kept = f"the last good checkpoint is kept in {last}" if last.exists() else "no checkpoint had been written yet"
        raise TrainingStopped(f"non-finite loss ({loss}) at epoch {st.epoch + 1}, step {st.step}; {kept}. "
                              "Lower the learning rate or use train.precision = \"fp32\".")


def _resume(last: Path, model, step: TrainStep, device: torch.device, ddp, log) -> LoopState:
    """Weights, optimizer, loss scaler, loop state and every RNG state from ``last.pt``: the run goes on
    exactly where it stopped."""
    ck = load_checkpoint(last, required=("model", "optimizer", "scaler", "loop", "rng"))
    load_weights(model, ck["model"], last)
    try:
        step.optimizer.load_state_dict(ck["optimizer"])
        step.scaler.load_state_dict(ck["scaler"])
        st = LoopState(**ck["loop"])
        torch.set_rng_state(ck["rng"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:  # a hand-edited or foreign last.pt
        raise UnsafeCheckpoint(f"{last}: damaged training state ({type(e).__name__}: {str(e)[:200]}); delete it "
                               "and start the run again without --resume") from None
    st.resumes += 1
    if device.type == "cuda" and ck.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(ck["cuda_rng"])
    ddp.load_rng(ck)
    log(f"resumed from {last}: epoch {st.epoch + 1}, batch {st.batch}, step {st.step}")
    return st


def _show_progress(bar, st: LoopState, row: dict, loss_value: float, t0: float, last_log: float, n_batches: int,
                   log) -> float:
    """The progress bar, or without one (log file, --no-progress) a line a minute. Returns when a line
    was last logged."""
    now = time.perf_counter()
    tok_s = st.train_tokens / max(st.train_seconds + now - t0, 1e-9)
    bar.update(1)
    bar.set_postfix(loss=f"{loss_value:.3f}", tok_s=f"{tok_s:.0f}", lr=f"{row.get('lr', 0):.2e}")
    if bar.disable and now - last_log > 60:
        log(f"  epoch {st.epoch + 1} batch {st.batch}/{n_batches} step {st.step}: "
            f"loss {loss_value:.3f}, {tok_s:.0f} tok/s")
        return now
    return last_log


def _end_epoch(st: LoopState, row: dict, cfg: TrainConfig, validate, log, agree=lambda v: v) -> None:
    """The epoch's row (train loss, tokens/s, validation loss), a validation unless one just ran, and
    the move to the next epoch (or the end of the run). ``agree``: rank 0's answer on every rank (DDP)."""
    row["train_loss"] = row["train_loss_sum"] / max(row["train_tokens"], 1)
    row["tokens_per_s"] = st.train_tokens / max(st.train_seconds, 1e-9)
    row["step"] = st.step
    if not cfg.val_every or not st.val_curve or st.val_curve[-1]["step"] != st.step:
        validate()
    row["val_loss"] = st.val_curve[-1]["val_loss"]
    metric = f"val_{cfg.val_metric}"
    if cfg.val_metric != "loss":
        row[metric] = st.val_curve[-1].get(metric)
    log(f"epoch {st.epoch + 1}: train loss {row['train_loss']:.4f}, val loss {row['val_loss']:.4f}"
        + (f", val {cfg.val_metric} {scale_of(cfg.val_metric) * row[metric]:.2f}" if cfg.val_metric != "loss"
           and row.get(metric) is not None else "")
        + f", {row['seconds']:.0f}s, {row['tokens_per_s']:.0f} tok/s")
    st.epoch += 1
    st.batch = 0
    if cfg.max_steps and st.step >= cfg.max_steps:
        st.epoch = cfg.epochs
    if cfg.max_minutes and st.epoch < cfg.epochs and not st.stopped_early:
        st.stopped_by_time = st.stopped_by_time or agree(_time_up(cfg, st, 0.0))
        if st.stopped_by_time:
            log(f"time limit: {(st.train_seconds + st.val_seconds) / 60:.1f} minutes of training and validation "
                f"(train.max_minutes = {cfg.max_minutes:g}) after epoch {st.epoch}; the run is scored from best.pt")
            st.epoch = cfg.epochs
    if st.epoch >= cfg.epochs or st.stopped_early:
        st.finished = True


def _time_up(cfg: TrainConfig, st: LoopState, running: float) -> bool:
    """Whether ``train.max_minutes`` is used up: training and validation seconds of every invocation so far,
    plus ``running`` seconds of training not yet added to ``st``."""
    return bool(cfg.max_minutes) and st.train_seconds + running + st.val_seconds >= 60 * cfg.max_minutes


def _timed_save(st, row, t0, save, path):
    dt = time.perf_counter() - t0
    row["seconds"] += dt
    st.train_seconds += dt
    save(path)


def _total_steps(cfg: TrainConfig, batches_per_epoch: int) -> int:
    per_epoch = math.ceil(batches_per_epoch / cfg.accum_steps)
    total = per_epoch * cfg.epochs
    return min(total, cfg.max_steps) if cfg.max_steps else total


def _validate(model, val_data, cfg, device, dtype, st: LoopState, save, ckpt_dir: Path, log, ddp=None, vocab=None,
              logger=None):
    t0 = time.perf_counter()
    v = validation_loss(model, val_data, cfg.batch_size, device, dtype, ddp, max_tokens=cfg.max_tokens)
    point = {"step": st.step, "epoch": st.epoch + 1, "val_loss": v}
    if cfg.val_metric != "loss":  # best.pt by a decode metric (higher is better), e.g. SCST's ROUGE-1
        score = validation_score(model, val_data[: cfg.val_max or None], vocab, cfg, device, dtype)
        point[f"val_{cfg.val_metric}"] = score
        better = st.best_score is None or score > st.best_score + 1e-9
    else:
        score = None
        better = v < st.best_val - 1e-6
    st.val_curve.append(point)
    if logger is not None:
        logger.validation(point)
        if vocab is not None:
            logger.samples(st.step, decoded_samples(model, val_data[:2], vocab, cfg, device, dtype))
    if ddp is not None and score is not None:
        better = ddp.agree(better)  # DDP: every rank decoded; rank 0's decision holds, so all save alike
    if score is not None:
        log(f"  step {st.step}: validation {cfg.val_metric} {scale_of(cfg.val_metric) * score:.2f} (val loss {v:.4f})")
    if better:
        st.best_val, st.best_step, st.bad_validations = v, st.step, 0
        st.best_score = score
        save(ckpt_dir / "best.pt")
    else:
        st.bad_validations += 1
        if cfg.patience and st.bad_validations >= cfg.patience:
            best = (f"{cfg.val_metric} {scale_of(cfg.val_metric) * st.best_score:.2f}" if st.best_score is not None
                    else f"val loss {st.best_val:.4f}")
            log(f"early stopping: no validation gain in {cfg.patience} validations (best {best} "
                f"at step {st.best_step})")
            st.stopped_early = True
    elapsed = time.perf_counter() - t0  # validation and best-checkpoint time: not training time
    st.val_seconds += elapsed
    return elapsed


def _main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


__all__ = ["fit", "validation_loss", "autocast_dtype", "TrainingStopped", "LoopState"]
