"""A NaN or infinite loss stops training, keeps the last good checkpoint and says so in one line."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import tiny_encoded, tiny_transformer
from seq2seq_zoo.cli import main
from seq2seq_zoo.config import TrainConfig
from seq2seq_zoo.train.loop import TrainingStopped, fit
from seq2seq_zoo.train.objectives import CrossEntropy
from seq2seq_zoo.utils import load_checkpoint
from test_crash_safety import CPU, corpus, one_line  # noqa: F401  (corpus: a fixture)


def _poison_objective(monkeypatch, from_call: int, value: float, snapshot: dict, ckpt: Path):
    """From the ``from_call``-th training objective call on, the loss becomes ``value`` (NaN or inf);
    at that moment the checkpoints on disk are copied into ``snapshot``."""
    orig = CrossEntropy.__call__
    calls = {"n": 0}

    def objective(self, model, batch):
        loss, stats = orig(self, model, batch)
        calls["n"] += 1
        if calls["n"] >= from_call:
            if not snapshot:
                snapshot.update({f: (ckpt / f).read_bytes() for f in ("last.pt", "best.pt")})
            loss = loss * value
        return loss, stats

    monkeypatch.setattr(CrossEntropy, "__call__", objective)
    return calls


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_non_finite_loss_in_second_epoch_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch, value):
    vocab, data = tiny_encoded(8)
    model = tiny_transformer(len(vocab), seed=0, max_src_len=64, max_tgt_len=24).train()
    snap: dict = {}
    calls = _poison_objective(monkeypatch, 3, value, snap, tmp_path)  # 2 batches per epoch: call 3 = epoch 2
    cfg = TrainConfig(epochs=3, batch_size=4, lr=1e-3, precision="fp32")
    with pytest.raises(TrainingStopped) as e:
        fit(model, data, data[:4], cfg, seed=0, ckpt_dir=tmp_path, device=CPU, progress=False, log=lambda s: None)
    assert calls["n"] == 3
    assert "non-finite" in str(e.value) and str(tmp_path / "last.pt") in str(e.value)
    assert snap and (tmp_path / "last.pt").read_bytes() == snap["last.pt"]
    assert (tmp_path / "best.pt").read_bytes() == snap["best.pt"]
    loop = load_checkpoint(tmp_path / "last.pt")["loop"]
    assert loop["epoch"] == 1 and not loop["finished"]


def test_non_finite_loss_via_cli_exit_2_mentions_checkpoint_and_keeps_it(corpus, tmp_path, monkeypatch, capsys):
    tmp, data, toml = corpus
    R = tmp_path / "R"
    ck = R / "rel" / "a" / "checkpoints"
    snap: dict = {}
    _poison_objective(monkeypatch, 9, float("nan"), snap, ck)  # 8 batches per epoch: call 9 = epoch 2
    rc = main(["run", str(toml), "--results", str(R), "--no-progress", "--data-dir", str(data)])
    msg = one_line(capsys.readouterr().err)
    assert rc == 2
    assert "non-finite" in msg and str(ck / "last.pt") in msg
    assert snap and (ck / "last.pt").read_bytes() == snap["last.pt"] and (ck / "best.pt").read_bytes() == snap["best.pt"]
    assert not (R / "rel" / "a" / "record.json").exists()
    assert not (R / "rel" / "a" / ".lock").exists()
