"""A bad experiment file stops `zoo run` before training: exit status 2 and one line naming the file,
the line and the key (the traceback only with --debug)."""
from __future__ import annotations


import pytest

from seq2seq_zoo.cli import main
from test_crash_safety import corpus, exp_text, one_line, trained_anything, write_exp  # noqa: F401  (corpus: a fixture)


def _append(extra):
    return lambda t: t + extra


def _sub(old, new):
    def f(t):
        assert old in t, old
        return t.replace(old, new, 1)
    return f


# (id, make the bad text from the good one, key the message must name, words it must contain (a tuple =
#  any of them), text of the offending line (its last occurrence) or None)
BAD_FILES = [
    ("toml-syntax", _sub("d_model = 32", "d_model = = 32"), None, [("syntax", "TOML")], "d_model = = 32"),
    ("unknown-top-level-section", _append("\n[experimnt]\nx = 1\n"), "experimnt", ["unknown", "'experiment'"],
     "[experimnt]"),
    ("top-level-decode-section", _append("\n[decode]\nbeam_size = 8\n"), "decode", ["unknown"], "[decode]"),
    ("unknown-experiment-key", _sub("seeds = [1]", "seed = [1]"), "seed", ["unknown", "'seeds'"], "seed = [1]"),
    ("unknown-defaults-train-key", _sub("epochs = 3", "epoch = 3"), "epoch", ["unknown", "'epochs'"], "epoch = 3"),
    ("unknown-run-key", _append("d_modle = 32\n"), "d_modle", ["'d_model'"], "d_modle = 32"),
    ("unknown-model", _sub('model = "transformer"', 'model = "transformr"'), "model",
     ["transformr", "'transformer'"], 'model = "transformr"'),
    ("unknown-dataset", _sub('dataset = "dialogsum"', 'dataset = "dialogsun"'), "dataset",
     ["dialogsun", "'dialogsum'"], 'dataset = "dialogsun"'),
    ("unknown-metric", _sub('metrics = ["rouge"]', 'metrics = ["rouge", "rogue"]'), "metrics",
     ["rogue", "'rouge'"], "metrics ="),
    ("unknown-schedule", _sub("lr = 0.002", 'lr = 0.002\nschedule = "nom"'), "schedule", ["nom", "'noam'"],
     'schedule = "nom"'),
    ("wrong-type-str-for-int", _sub("epochs = 3", 'epochs = "3"'), "epochs", ["int", "str"], 'epochs = "3"'),
    ("wrong-type-float-model-option", _sub("d_model = 32", "d_model = 32.5"), "d_model", ["int", "32.5"],
     "d_model = 32.5"),
    ("wrong-type-run-name", _sub('name = "a"', "name = 3"), "name", [("str", "string", "name")], "name = 3"),
    ("wrong-type-grid-not-a-list", _append("\n[grid]\nd_model = 32\n"), "d_model", ["grid", "list"],
     "d_model = 32\n"),
    ("negative-lr", _sub("lr = 0.002", "lr = -0.002"), "lr", ["-0.002"], "lr = -0.002"),
    ("infinite-lr", _sub("lr = 0.002", "lr = inf"), "lr", ["inf"], "lr = inf"),
    ("beam-size-0", _sub("beam_size = 2", "beam_size = 0"), "beam_size", [(">= 1", "> 0", "positive")],
     "beam_size = 0"),
    ("dropout-1.5", _sub("dropout = 0.1", "dropout = 1.5"), "dropout", ["1.5"], "dropout = 1.5"),
    ("decode-max-len-0", _sub("max_len = 20", "max_len = 0"), "max_len", [(">= 1", "> 0", "positive")],
     "max_len = 0"),
    ("max-src-len-0", _sub("max_src_len = 64", "max_src_len = 0"), "max_src_len", [(">= 1", "> 0", "positive")],
     "max_src_len = 0"),
    ("heads-do-not-divide-d_model", _sub("heads = 2", "heads = 3"), "heads", ["d_model"], "heads = 3"),
    ("duplicate-run-names", lambda t: t + '\n[[runs]]\nname = "a"\n', "name", ["duplicate", "'a'"], 'name = "a"'),
]


def _line_no(text: str, needle: str) -> int:
    i = text.rfind(needle)
    assert i >= 0, needle
    return text.count("\n", 0, i) + 1


@pytest.mark.parametrize("make,key,words,line_text", [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_bad_experiment_file_exit_2_one_line_before_training(corpus, tmp_path, capsys, make, key, words,
                                                             line_text):
    tmp, data, _ = corpus
    text = make(exp_text("cfg", ["a"]))
    path = write_exp(tmp_path / "bad.toml", text)
    R = tmp_path / "R"
    rc = main(["run", str(path), "--results", str(R), "--no-progress", "--data-dir", str(data)])
    cap = capsys.readouterr()
    assert rc == 2, cap.err
    msg = one_line(cap.err)
    assert str(path) in msg
    if key:
        assert key in msg
    for w in words:
        alts = w if isinstance(w, tuple) else (w,)
        assert any(a in msg for a in alts), (w, msg)
    if line_text:
        n = _line_no(text, line_text)
        assert f"{path}:{n}:" in msg or f"line {n}," in msg or f"line {n})" in msg, (n, msg)
    assert trained_anything(R) == []


def test_debug_shows_the_traceback(corpus, tmp_path):
    from seq2seq_zoo.config import ConfigError
    tmp, data, _ = corpus
    path = write_exp(tmp_path / "bad.toml", exp_text("cfg").replace('"transformer"', '"transformr"'))
    with pytest.raises(ConfigError, match="transformr"):  # raised, so Python prints the traceback
        main(["run", str(path), "--results", str(tmp_path / "R"), "--data-dir", str(data), "--debug"])
    assert trained_anything(tmp_path / "R") == []
