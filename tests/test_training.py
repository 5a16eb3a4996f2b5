"""The one loop: loss falls on a tiny corpus; an interrupted run resumes to the same final state."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch

from conftest import tiny_encoded, tiny_transformer
from seq2seq_zoo.config import TrainConfig
from seq2seq_zoo.train.loop import TrainingStopped, fit, validation_loss

CPU = torch.device("cpu")
quiet = dict(progress=False, log=lambda s: None)


def test_tiny_training_run_loss_falls(tmp_path):
    vocab, data = tiny_encoded(16)
    model = tiny_transformer(len(vocab), seed=0, d_model=32, d_ff=64, heads=4, layers=2, dropout=0.1,
                             max_src_len=64, max_tgt_len=24).train()
    initial = validation_loss(model, data, 16, CPU, None)
    cfg = TrainConfig(epochs=20, batch_size=8, lr=3e-3, schedule="warmup_constant", warmup=5, precision="fp32")
    st = fit(model, data, data, cfg, seed=1, ckpt_dir=tmp_path, device=CPU, **quiet)
    final = validation_loss(model, data, 16, CPU, None)
    assert final < 0.7 * initial, (initial, final)
    assert st.finished and st.epoch == 20 and st.step == 40
    assert len(st.history) == 20 and len(st.val_curve) == 20
    assert st.history[-1]["train_loss"] < st.history[0]["train_loss"]
    assert st.history[-1]["val_loss"] == pytest.approx(final, rel=1e-5)  # last epoch's validation = the model now
    assert st.best_val == pytest.approx(min(r["val_loss"] for r in st.val_curve))
    assert (tmp_path / "best.pt").exists() and (tmp_path / "last.pt").exists()
    best = torch.load(tmp_path / "best.pt", weights_only=True)
    assert best["loop"]["step"] == st.best_step
    # warm-up: the recorded lr of epoch 1 (steps 1, 2) is 2/5 of the peak
    assert st.history[0]["lr"] == pytest.approx(3e-3 * 2 / 5)
    assert st.history[-1]["lr"] == pytest.approx(3e-3)
    assert st.train_tokens == 20 * sum(len(e.src) + len(e.tgt) + 1 for e in data)


def test_validation_loss_is_token_mean_nll(tmp_path):
    vocab, data = tiny_encoded(6)
    model = tiny_transformer(len(vocab), seed=2, max_src_len=64, max_tgt_len=24)
    from seq2seq_zoo.data.batching import collate
    with torch.no_grad():
        total, n = 0.0, 0
        for e in data:  # one example at a time, by hand
            b = collate([e])
            lp = model(b).log_probs[0]
            for t, y in enumerate(b.tgt_out[0].tolist()):
                total -= float(lp[t, y])
                n += 1
    assert validation_loss(model, data, 4, CPU, None) == pytest.approx(total / n, rel=1e-5)


def test_token_batches_train_and_validate(tmp_path):
    """train.batch_size = 0 with train.max_tokens (the GPU setting): batches by padded tokens alone, fewer
    updates than one per few examples, the same token-mean validation loss, and the loss falls."""
    vocab, data = tiny_encoded(16)
    lengths = sorted(len(e.src) + len(e.tgt) for e in data)
    budget = 6 * lengths[-1]                                  # room for at least 6 of the longest
    model = tiny_transformer(len(vocab), seed=0, d_model=32, d_ff=64, heads=4, layers=2, dropout=0.1,
                             max_src_len=64, max_tgt_len=24).train()
    initial = validation_loss(model, data, 16, CPU, None)
    assert validation_loss(model, data, 0, CPU, None, max_tokens=budget) == pytest.approx(initial, rel=1e-5)
    cfg = TrainConfig(epochs=20, batch_size=0, max_tokens=budget, lr=3e-3, schedule="warmup_constant", warmup=5,
                      precision="fp32")
    st = fit(model, data, data, cfg, seed=1, ckpt_dir=tmp_path, device=CPU, **quiet)
    assert st.finished and 20 <= st.step <= 20 * 3          # 16 examples in 1-3 token batches per epoch
    assert validation_loss(model, data, 16, CPU, None) < 0.7 * initial
    assert st.train_tokens == 20 * sum(len(e.src) + len(e.tgt) + 1 for e in data)


def _fresh(vocab_size, seed=0):
    return tiny_transformer(vocab_size, seed=seed, d_model=16, d_ff=32, heads=2, layers=1, dropout=0.2,
                            max_src_len=64, max_tgt_len=24).train()


def _same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def _losses(st):
    return [(r["epoch"], r["train_loss"], r["val_loss"], r["step"]) for r in st.history], st.val_curve


def _interrupt_after(model, n_calls, how):
    """Interrupt training at the n-th training forward pass: by SIGINT (Ctrl-C) or by a crash."""
    calls = {"n": 0}

    def hook(mod, args):
        if mod.training:
            calls["n"] += 1
            if calls["n"] == n_calls:
                if how == "sigint":
                    os.kill(os.getpid(), signal.SIGINT)
                else:
                    raise RuntimeError("simulated crash")

    return model.register_forward_pre_hook(hook)


@pytest.mark.parametrize("how", ["sigint", "crash"])
def test_resume_after_interruption_matches_uninterrupted_run(tmp_path, how):
    vocab, data = tiny_encoded(12)
    cfg = TrainConfig(epochs=3, batch_size=4, lr=2e-3, precision="fp32", checkpoint_every=2)
    # A: straight through
    a = _fresh(len(vocab))
    st_a = fit(a, data, data[:4], cfg, seed=5, ckpt_dir=tmp_path / "a", device=CPU, **quiet)
    # B: interrupted in the middle of epoch 2 (3 batches per epoch; forward 5 = epoch 2, batch 2)
    b = _fresh(len(vocab))
    h = _interrupt_after(b, 5, how)
    with pytest.raises(KeyboardInterrupt if how == "sigint" else RuntimeError) as stopped:
        fit(b, data, data[:4], cfg, seed=5, ckpt_dir=tmp_path / "b", device=CPU, **quiet)
    h.remove()
    # the loop's own stop says so: under DDP every rank raises it at the same update (zoo run then
    # lets the ranks leave the process group together)
    assert getattr(stopped.value, "together", False) is (how == "sigint")
    saved = torch.load(tmp_path / "b" / "last.pt", weights_only=True)["loop"]
    assert not saved["finished"] and saved["epoch"] == 1
    # resume into a differently initialised model: everything must come from the checkpoint
    b2 = _fresh(len(vocab), seed=99)
    st_b = fit(b2, data, data[:4], cfg, seed=5, ckpt_dir=tmp_path / "b", device=CPU, resume=True, **quiet)
    _same_state(a, b2)
    assert _losses(st_a) == _losses(st_b)
    assert (st_a.step, st_a.epoch, st_a.best_step, st_a.train_tokens) == (st_b.step, st_b.epoch, st_b.best_step,
                                                                          st_b.train_tokens)
    # a finished run resumes to itself without training
    st_c = fit(b2, data, data[:4], cfg, seed=5, ckpt_dir=tmp_path / "b", device=CPU, resume=True, **quiet)
    assert st_c.step == st_a.step
    _same_state(a, b2)


def test_resume_with_more_epochs_continues(tmp_path):
    """Training 1 epoch, then resuming with epochs = 2, equals training 2 epochs straight."""
    vocab, data = tiny_encoded(8)
    cfg2 = TrainConfig(epochs=2, batch_size=4, lr=2e-3, precision="fp32")
    a = _fresh(len(vocab))
    st_a = fit(a, data, data[:4], cfg2, seed=3, ckpt_dir=tmp_path / "a", device=CPU, **quiet)
    b = _fresh(len(vocab))
    fit(b, data, data[:4], TrainConfig(epochs=1, batch_size=4, lr=2e-3, precision="fp32"), seed=3,
        ckpt_dir=tmp_path / "b", device=CPU, **quiet)
    st_b = fit(b, data, data[:4], cfg2, seed=3, ckpt_dir=tmp_path / "b", device=CPU, resume=True, **quiet)
    assert st_b.epoch == 2 and st_b.step == st_a.step
    _same_state(a, b)
    assert _losses(st_a) == _losses(st_b)


def test_gradient_accumulation_equals_bigger_batch(tmp_path):
    """accum_steps=2 with batches of 2 == one batch of 4 (dropout 0, fp32), compared after one update.
    Adam's first step is lr * g / (|g| + eps): with eps = 1 it is smooth in g, so float summation order
    cannot flip the sign of a near-zero gradient's update."""
    vocab, data = tiny_encoded(4)
    # equal-length examples so both token-mean losses weigh tokens the same way
    data = [data[0]] * 4
    m1 = tiny_transformer(len(vocab), seed=4, max_src_len=64, max_tgt_len=24).train()
    m2 = tiny_transformer(len(vocab), seed=4, max_src_len=64, max_tgt_len=24).train()
    fit(m1, data, data, TrainConfig(epochs=1, batch_size=4, lr=1e-2, eps=1.0, precision="fp32", clip_norm=0), seed=0,
        ckpt_dir=tmp_path / "1", device=CPU, **quiet)
    st = fit(m2, data, data, TrainConfig(epochs=1, batch_size=2, accum_steps=2, lr=1e-2, eps=1.0,
                                         precision="fp32", clip_norm=0), seed=0, ckpt_dir=tmp_path / "2", device=CPU, **quiet)
    assert st.step == 1
    m0 = tiny_transformer(len(vocab), seed=4, max_src_len=64, max_tgt_len=24)
    moved = 0
    for p0, p1, p2 in zip(m0.parameters(), m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, atol=1e-7, rtol=1e-5)
        moved += int(not torch.equal(p0, p1))
    assert moved > 0


@pytest.mark.parametrize("accum", [4, 8])
def test_accumulation_is_token_weighted_and_equals_the_union_batch(tmp_path, accum):
    """4 micro-batches of one example each, with targets of 2, 5, 9 and 14 tokens, accumulated into one
    update == one batch of the 4 (the token mean over the union), also when the group is cut short by
    the end of the epoch (accum 8: 4 of 8 micro-batches)."""
    vocab, data = tiny_encoded(4)
    for ex, n in zip(data, (1, 4, 8, 13)):          # + <eos> = 2, 5, 9, 14 target tokens
        ex.tgt = np.resize(ex.tgt, n)
        ex.tgt_ext = np.resize(ex.tgt_ext, n)
    m1 = tiny_transformer(len(vocab), seed=4, max_src_len=64, max_tgt_len=24).train()
    m2 = tiny_transformer(len(vocab), seed=4, max_src_len=64, max_tgt_len=24).train()
    fit(m1, data, data, TrainConfig(epochs=1, batch_size=4, lr=1e-2, eps=1.0, precision="fp32", clip_norm=0), seed=0,
        ckpt_dir=tmp_path / "1", device=CPU, **quiet)
    st = fit(m2, data, data, TrainConfig(epochs=1, batch_size=1, accum_steps=accum, lr=1e-2, eps=1.0,
                                         precision="fp32", clip_norm=0), seed=0, ckpt_dir=tmp_path / "2", device=CPU,
             **quiet)
    assert st.step == 1
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, atol=1e-6, rtol=1e-5)


def test_non_finite_loss_stops_with_a_clear_message(tmp_path):
    vocab, data = tiny_encoded(4)
    model = _fresh(len(vocab))
    with torch.no_grad():
        model.generator.bias.fill_(float("nan"))
    with pytest.raises(TrainingStopped, match="non-finite"):
        fit(model, data, data, TrainConfig(epochs=1, batch_size=4, precision="fp32"), seed=0, ckpt_dir=tmp_path,
            device=CPU, **quiet)


def test_max_steps_and_early_stopping(tmp_path):
    vocab, data = tiny_encoded(8)
    st = fit(_fresh(len(vocab)), data, data, TrainConfig(epochs=5, batch_size=2, max_steps=3, precision="fp32"),
             seed=0, ckpt_dir=tmp_path / "a", device=CPU, **quiet)
    assert st.step == 3 and st.finished
    # lr 0 -> validation never improves after the first check -> stops after `patience` more
    st = fit(_fresh(len(vocab)), data, data, TrainConfig(epochs=10, batch_size=4, lr=1e-12, patience=2,
                                                          precision="fp32"),
             seed=0, ckpt_dir=tmp_path / "b", device=CPU, **quiet)
    assert st.stopped_early and len(st.history) == 3


def test_early_stopping_inside_an_epoch_stops_at_that_update(tmp_path):
    """With validation every N updates (train.val_every), patience counts those validations: the run stops
    at the update that used it up, not at the end of the epoch (and says so once)."""
    vocab, data = tiny_encoded(16)
    said = []
    st = fit(_fresh(len(vocab)), data, data, TrainConfig(epochs=3, batch_size=2, lr=1e-12, patience=2, val_every=1,
                                                         precision="fp32"),
             seed=0, ckpt_dir=tmp_path, device=CPU, progress=False, log=said.append)
    assert st.stopped_early and st.finished
    assert st.step == 3 < len(data) // 2           # best at update 1, two validations without gain
    assert [p["step"] for p in st.val_curve] == [1, 2, 3]
    assert sum("early stopping" in m for m in said) == 1


def test_time_limit_stops_at_the_epoch_end_and_resume_leaves_it_stopped(tmp_path):
    """train.max_minutes (fairseq's --stop-time-hours): training stops at the first epoch end after the limit,
    counting training and validation time; the stop is final, so --resume of the run does nothing more."""
    vocab, data = tiny_encoded(8)
    said = []
    cfg = TrainConfig(epochs=5, batch_size=2, max_minutes=1e-9, precision="fp32")
    st = fit(_fresh(len(vocab)), data, data, cfg, seed=0, ckpt_dir=tmp_path, device=CPU, progress=False,
             log=said.append)
    assert st.finished and st.stopped_by_time and not st.stopped_early
    assert len(st.history) == 1 and st.step == len(data) // 2    # one whole epoch, then the stop
    assert sum(m.startswith("time limit:") for m in said) == 1
    again = fit(_fresh(len(vocab)), data, data, cfg, seed=0, ckpt_dir=tmp_path, device=CPU, resume=True, **quiet)
    assert again.step == st.step and again.stopped_by_time
    # a limit not reached changes nothing: the same five epochs as without one
    free = fit(_fresh(len(vocab)), data, data, TrainConfig(epochs=5, batch_size=2, max_minutes=60, precision="fp32"),
               seed=0, ckpt_dir=tmp_path / "free", device=CPU, **quiet)
    assert len(free.history) == 5 and not free.stopped_by_time


def test_time_limit_with_val_every_stops_at_that_validation(tmp_path):
    vocab, data = tiny_encoded(16)
    st = fit(_fresh(len(vocab)), data, data, TrainConfig(epochs=3, batch_size=2, val_every=3, max_minutes=1e-9,
                                                         precision="fp32"),
             seed=0, ckpt_dir=tmp_path, device=CPU, **quiet)
    assert st.stopped_by_time and st.finished
    assert st.step == 3 and [p["step"] for p in st.val_curve] == [3]   # stopped at the first validation


def test_time_up_counts_training_validation_and_the_running_epoch():
    from seq2seq_zoo.train.loop import LoopState, _time_up
    st = LoopState(train_seconds=50.0, val_seconds=5.0)
    assert not _time_up(TrainConfig(max_minutes=0), st, 1e9)        # 0: no limit
    assert not _time_up(TrainConfig(max_minutes=1), st, 4.9)        # 59.9 s
    assert _time_up(TrainConfig(max_minutes=1), st, 5.0)            # 60 s
