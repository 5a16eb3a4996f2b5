"""One run's steps read forward (data -> model -> fit -> evaluate -> record): the shown examples are
picked after training, while an unknown eval.examples id still stops before anything is trained."""
from __future__ import annotations

import pytest

import seq2seq_zoo.runner as runner
from seq2seq_zoo.config import load_experiment
from seq2seq_zoo.errors import DataError


def _spec(tmp_path, dialogsum_dir, extra=""):
    from conftest import tiny_experiment
    p = tmp_path / "e.toml"
    p.write_text(tiny_experiment("flow", '[[runs]]\nname = "a"\n', seeds=1, data_dir=dialogsum_dir, epochs=1,
                                 extra_defaults="data.max_test = 2\n" + extra))
    return load_experiment(p).runs[0]


def test_examples_are_picked_after_training(tmp_path, dialogsum_dir, monkeypatch):
    calls = []
    for name in ("fit", "pick_examples", "decode_and_score"):
        real = getattr(runner, name)
        monkeypatch.setattr(runner, name, lambda *a, _r=real, _n=name, **k: (calls.append(_n), _r(*a, **k))[1])
    rec = runner.run(_spec(tmp_path, dialogsum_dir), tmp_path / "out", progress=False, log=lambda *a, **k: None)
    assert calls == ["fit", "decode_and_score", "pick_examples"]
    assert rec["status"] == "done" and (tmp_path / "out" / "examples.json").is_file()


def test_an_unknown_example_id_stops_before_training(tmp_path, dialogsum_dir, monkeypatch):
    monkeypatch.setattr(runner, "fit", lambda *a, **k: pytest.fail("trained"))
    spec = _spec(tmp_path, dialogsum_dir, 'eval.examples = ["test_0", "tset_1"]\n')
    with pytest.raises(DataError, match="no example with id 'tset_1'.*Did you mean 'test_1'"):
        runner.run(spec, tmp_path / "out", progress=False, log=lambda *a, **k: None)
    assert not (tmp_path / "out").exists()
