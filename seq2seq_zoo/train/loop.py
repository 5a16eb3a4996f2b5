"""The one training loop, readable top to bottom (nanoGPT style): bucketed batches, autocast,
gradient accumulation, clipping, LR schedule, validation, best/last checkpoints, exact resume,
early stopping. Every registered model and objective goes through it unchanged.
"""
from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
from tqdm.auto import tqdm

from seq2seq_zoo.config import TrainConfig
from seq2seq_zoo.data.batching import Encoded, bucket_batches, collate, iterate
from seq2seq_zoo.errors import Preempted, TrainingStopped, UnsafeCheckpoint
from seq2seq_zoo.metrics import sentence_scorer
from seq2seq_zoo.precision import autocast, autocast_dtype
from seq2seq_zoo.registry import OBJECTIVES, SCHEDULES
from seq2seq_zoo.train.distributed import LOCAL, ObjectiveModule
from seq2seq_zoo.train.objectives import Objective, _text, greedy_ids, token_losses
from seq2seq_zoo.utils import load_checkpoint, load_weights


@torch.no_grad()
def validation_loss(model, data: Sequence[Encoded], batch_size: int, device, dtype, ddp=None,
                    max_tokens: int | None = None) -> float:
    """Mean token NLL (no label smoothing) over a split (sharded over the ranks of a DDP run), in the
    training batches' sizes."""
    ddp = ddp or LOCAL
    was = model.training
    model.eval()
    nll, n = 0.0, 0
    for _, batch in iterate(data, bucket_batches(data, batch_size, max_tokens=max_tokens,
                                                   shuffle=False)[ddp.rank::ddp.world_size]):
        batch.to(device)
        with autocast(device, dtype):
            out = model(batch)
        _, s, k = token_losses(out.log_probs.float(), batch.tgt_out)
        nll += float(s)
        n += k
    model.train(was)
    nll, n = ddp.sum(nll, n)
    return nll / max(n, 1)


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
    (``run_dir/logs/``: train_log.jsonl and TensorBoard events, see ``train.runlog``)."""
    ddp = ddp or LOCAL
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    dtype = autocast_dtype(cfg.precision, device)
    d_model = model.schedule_dim()
    objective = OBJECTIVES.get(cfg.objective)(label_smoothing=cfg.label_smoothing, cfg=cfg, vocab=vocab)
    if cfg.val_metric != "loss" and vocab is None:
        raise ValueError(f"train.val_metric = {cfg.val_metric!r} decodes the validation set and needs the vocabulary")
    step = TrainStep(model, objective, cfg, device, dtype, lr=lr_at(cfg, 1, d_model))
    st = LoopState()
    torch.manual_seed(seed)
    step.distribute(ddp, train_data)

    last = ckpt_dir / "last.pt"
    if resume and ddp.agree(last.exists()):
        st = _resume(last, model, step, device, ddp, log)
        st.finished = st.epoch >= cfg.epochs or st.stopped_early  # epochs may have been raised since
        if st.finished:
            return st

    def save(path: Path):
        ddp.save({"model": model.state_dict(), "optimizer": step.optimizer.state_dict(),
                  "scaler": step.scaler.state_dict(), "loop": st.to_dict(), "rng": torch.get_rng_state(),
                  "cuda_rng": torch.cuda.get_rng_state() if device.type == "cuda" else None,
                  **(extra_state or {})}, path)  # DDP: rank 0 writes, with every rank's RNG state

    logger = None
    if run_dir is not None and ddp.is_main:
        from seq2seq_zoo.train.runlog import RunLogger
        logger = RunLogger(run_dir, step=st.step, log=log)

    def validate() -> float:
        return _validate(model, val_data, cfg, device, dtype, st, save, ckpt_dir, log, ddp, vocab, logger)

    interrupted = ddp.interrupt_flag()  # {"flag": False}; "term": whether it was SIGTERM (on any rank)

    def on_signal(signum, frame):  # Ctrl-C or SIGTERM: finish the current update, save, then stop
        if signum == signal.SIGTERM:
            interrupted["term"] = True
        interrupted["flag"] = True

    def stop() -> KeyboardInterrupt:  # SIGTERM (a scheduler's pre-emption) exits 143, Ctrl-C 130
        e = Preempted() if interrupted.get("term") else KeyboardInterrupt()
        e.together = True  # under DDP every rank raises it at the same update (the flag is agreed on)
        return e

    old_handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)} \
        if _main_thread() else {}
    model.train()
    if cfg.init_from and cfg.val_metric != "loss" and st.step == 0 and not st.val_curve:
        # fine-tuning from a checkpoint: score the starting point too (the first row of the seed's
        # Table 28), and keep it as best.pt unless an update beats it
        validate()
        model.train()
    try:
        while st.epoch < cfg.epochs and not st.stopped_early:
            batches = bucket_batches(train_data, cfg.batch_size, max_tokens=cfg.max_tokens, seed=seed, epoch=st.epoch)
            if st.batch == 0:
                st.history.append({"epoch": st.epoch + 1, "train_loss_sum": 0.0, "train_tokens": 0,
                                   "seconds": 0.0})
            row = st.history[-1]
            bar = tqdm(total=len(batches), initial=st.batch, desc=f"epoch {st.epoch + 1}/{cfg.epochs}",
                       disable=None if progress else True, leave=False, dynamic_ncols=True)
            t0 = time.perf_counter()
            last_log = t0
            total_steps = _total_steps(cfg, len(batches))
            for k, batch in ddp.iterate(train_data, batches, st.batch):
                # --- one batch: forward, loss, backward (an update every accum_steps batches)
                batch.to(device)
                update = (k + 1) % cfg.accum_steps == 0 or k + 1 == len(batches)
                objective.set_progress(st.step / max(total_steps, 1))  # e.g. SCST's gamma ramp
                loss_value, stats = step.forward_backward(batch, update, interrupted)
                if not math.isfinite(loss_value):  # raised before the update: the weights stay as they were
                    kept = (f"the last good checkpoint is kept in {last}" if last.exists()
                            else "no checkpoint had been written yet")
                    raise TrainingStopped(
                        f"non-finite loss ({loss_value}) at epoch {st.epoch + 1}, step {st.step}; {kept}. "
                        "Lower the learning rate or use train.precision = \"fp32\".")
                row["train_loss_sum"] += loss_value * stats["tokens"]
                row["train_tokens"] += stats["tokens"]
                st.train_tokens += stats.get("batch_tokens") or batch.n_tokens()
                st.objective_stats = objective.summary()
                st.batch = k + 1
                # --- an optimizer update, then validation / checkpoint when they are due
                if update:
                    st.step += 1
                    row["lr"] = lr = lr_at(cfg, st.step, d_model)
                    step.optimizer_step(lr)
                    if logger is not None:
                        gn = step.grad_norm
                        logger.update(st.step, st.epoch + 1, loss_value, lr, None if gn is None else float(gn),
                                      st.train_tokens / max(st.train_seconds + time.perf_counter() - t0, 1e-9))
                    if cfg.val_every and st.step % cfg.val_every == 0:
                        t0 += validate()
                        if cfg.max_minutes:  # DDP: rank 0's clock decides for every rank
                            st.stopped_by_time = ddp.agree(_time_up(cfg, st, time.perf_counter() - t0))
                    if cfg.checkpoint_every and st.step % cfg.checkpoint_every == 0:
                        _timed_save(st, row, t0, save, last)
                        t0 = time.perf_counter()
                    if (cfg.max_steps and st.step >= cfg.max_steps) or st.stopped_early or st.stopped_by_time:
                        break  # patience or time used up at a validation inside the epoch: stop at this update
                last_log = _show_progress(bar, st, row, loss_value, t0, last_log, len(batches), log)
                if interrupted["flag"] and st.batch % cfg.accum_steps == 0:
                    break  # only at an update boundary, so the saved state resumes exactly
            bar.close()
            row["seconds"] += time.perf_counter() - t0
            st.train_seconds += time.perf_counter() - t0
            if interrupted["flag"] and st.batch < len(batches):
                save(last)
                raise stop()
            _end_epoch(st, row, cfg, validate, log, ddp.agree)
            if cfg.average_last and ddp.is_main:  # the weights of the last N epochs, for averaging
                from seq2seq_zoo.averaging import keep_epoch
                keep_epoch(ckpt_dir, model, len(st.history), cfg.average_last)
            save(last)
            if interrupted["flag"]:  # even after the last update: the user asked to stop
                raise stop()
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        if logger is not None:
            logger.close()
    return st


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
        + (f", val {cfg.val_metric} {100 * row[metric]:.2f}" if cfg.val_metric != "loss"
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
        log(f"  step {st.step}: validation {cfg.val_metric} {100 * score:.2f} (val loss {v:.4f})")
    if better:
        st.best_val, st.best_step, st.bad_validations = v, st.step, 0
        st.best_score = score
        save(ckpt_dir / "best.pt")
    else:
        st.bad_validations += 1
        if cfg.patience and st.bad_validations >= cfg.patience:
            best = (f"{cfg.val_metric} {100 * st.best_score:.2f}" if st.best_score is not None
                    else f"val loss {st.best_val:.4f}")
            log(f"early stopping: no validation gain in {cfg.patience} validations (best {best} "
                f"at step {st.best_step})")
            st.stopped_early = True
    elapsed = time.perf_counter() - t0  # validation and best-checkpoint time: not training time
    st.val_seconds += elapsed
    return elapsed


@torch.no_grad()
def validation_score(model, data: Sequence[Encoded], vocab, cfg: TrainConfig, device, dtype) -> float:
    """Mean ``cfg.val_metric`` (0-1; ROUGE: F1) of greedy decodes (up to ``cfg.rl_max_len`` tokens, and no longer
    than the longest target) against the first reference."""
    score = sentence_scorer([cfg.val_metric])
    max_len = _decode_len(data, cfg)
    total, n = 0.0, 0
    for _, batch in iterate(data, bucket_batches(data, cfg.batch_size, max_tokens=cfg.max_tokens, shuffle=False)):
        batch.to(device)
        with autocast(device, dtype):
            ids = greedy_ids(model, batch, max_len)
        texts = [_text(vocab, row, oovs) for row, oovs in zip(ids.tolist(), batch.oovs)]
        total += sum(score(texts, [r[0] for r in batch.references])[cfg.val_metric])
        n += batch.size
    return total / max(n, 1)


def _decode_len(data: Sequence[Encoded], cfg: TrainConfig) -> int:
    """``cfg.rl_max_len``, but no longer than the longest target of ``data`` (the data's max_tgt_len cut
    bounds it, and a Transformer's decoder positions end there)."""
    longest = max((len(e.tgt) + 1 for e in data), default=cfg.rl_max_len)  # + EOS
    return max(1, min(cfg.rl_max_len, longest))


@torch.no_grad()
def decoded_samples(model, data: Sequence[Encoded], vocab, cfg: TrainConfig, device, dtype) -> list[dict]:
    """Greedy decodes (up to ``cfg.rl_max_len`` tokens) of a few examples, for the live logs."""
    if not data:
        return []
    batch = collate(list(data)).to(device)
    with autocast(device, dtype):
        ids = greedy_ids(model, batch, _decode_len(data, cfg))
    return [{"id": str(e.id), "prediction": _text(vocab, row, oovs), "reference": e.references[0]}
            for e, row, oovs in zip(data, ids.tolist(), batch.oovs)]


def _main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


__all__ = ["fit", "validation_loss", "autocast_dtype", "autocast", "TrainingStopped", "LoopState", "collate"]
