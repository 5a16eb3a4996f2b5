"""Using trained runs: live logs (train_log.jsonl, TensorBoard), train.val_metric, checkpoint averaging,
export and the Summarizer API, batch summarising, the plots, and the small command-line options.
One tiny experiment (a Transformer scored by validation ROUGE-1 and decoded with averaged weights, and a
LEAD row) is trained once for the module."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from conftest import run_cli, tiny_experiment, trained_tiny_experiment, write_dialogsum

RUNS = '''
[[runs]]
name = "tiny"
train.val_metric = "rouge1"
train.average_last = 2

[[runs]]
name = "lead"
model = "lead"
unit = "turn"
choose_k = [1, 2]
'''


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("using_runs")
    data, toml, results = trained_tiny_experiment(tmp, "u", RUNS, epochs=2, seeds=1)
    return {"tmp": tmp, "data": data, "toml": toml, "exp": results / "u", "run": results / "u" / "tiny"}


def _test_sources(data: Path) -> list[str]:
    rows = [json.loads(x) for x in (data / "dialogsum" / "dialogsum.test.jsonl").read_text().splitlines()]
    return [r["dialogue"] for r in rows]


# ------------------------------------------------------------------------------------ live logging
def test_train_log_has_every_update_validation_and_samples(trained):
    rec = json.loads((trained["run"] / "record.json").read_text())
    rows = [json.loads(x) for x in (trained["run"] / "logs" / "train_log.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, rec["train"]["steps"] + 1))
    assert all(r["grad_norm"] > 0 and r["lr"] == pytest.approx(0.003) and r["tokens_per_s"] > 0 for r in train)
    val = [r for r in rows if r["kind"] == "val"]
    assert [v["val_loss"] for v in val] == pytest.approx([p["val_loss"] for p in rec["train"]["val_curve"]])
    assert all("val_rouge1" in v for v in val)
    assert len([r for r in rows if r["kind"] == "sample"]) == 2 * len(val)


def test_tensorboard_event_file_holds_the_tags(trained):
    pytest.importorskip("tensorboard", reason="pip install 'seq2seq-zoo[tensorboard]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    tb = trained["run"] / "logs" / "tensorboard"
    assert list(tb.glob("events.out.tfevents.*"))
    ea = EventAccumulator(str(tb), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    scalars = set(ea.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "val/loss", "val/rouge1"} <= scalars
    rec = json.loads((trained["run"] / "record.json").read_text())
    assert [e.step for e in ea.Scalars("train/loss")] == list(range(1, rec["train"]["steps"] + 1))
    assert any(t.startswith("samples") for t in ea.Tags()["tensors"])


def test_logs_are_git_ignored():
    import subprocess
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(["git", "check-ignore", "results/x/y/logs/train_log.jsonl",
                          "results/x/y/logs/tensorboard/events.out.tfevents.1", "results/smoke/tiny/record.json"],
                         cwd=root, capture_output=True, text=True)
    if out.returncode == 128:
        pytest.skip("not a git work tree")
    assert len(out.stdout.split()) == 3


# ------------------------------------------------------------------------------------- val_metric
def test_val_metric_per_epoch_in_loss_csv_and_record(trained):
    import pandas as pd
    rec = json.loads((trained["run"] / "record.json").read_text())
    df = pd.read_csv(trained["exp"] / "loss.csv")
    tiny = df[df.run == "tiny"]
    assert list(tiny.epoch) == [1, 2]
    assert list(tiny.val_rouge1) == pytest.approx([h["val_rouge1"] for h in rec["train"]["history"]])
    assert rec["train"]["best_score"] == pytest.approx(max(tiny.val_rouge1))


def test_stop_message_names_the_metric():
    from seq2seq_zoo.config import TrainConfig
    from seq2seq_zoo.train.loop import LoopState, _validate
    from conftest import tiny_encoded, tiny_transformer
    vocab, data = tiny_encoded(4, max_src=32)
    model = tiny_transformer(len(vocab))
    cfg = TrainConfig(val_metric="rouge1", patience=1, batch_size=4)
    st = LoopState(best_score=2.0)  # unbeatable: the first validation stops the run
    lines = []
    _validate(model, data, cfg, torch.device("cpu"), None, st, lambda p: None, Path("."), lines.append, None, vocab)
    assert st.stopped_early
    assert "best rouge1 200.00" in lines[-1] and "val loss" not in lines[-1]


# -------------------------------------------------------------------------------------- averaging
def test_average_state_dicts_is_the_mean():
    from seq2seq_zoo.averaging import average_state_dicts
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([3.0, 6.0]), "n": torch.tensor(5)}
    out = average_state_dicts([a, b])
    assert torch.equal(out["w"], torch.tensor([2.0, 4.0])) and int(out["n"]) == 5


def test_averaged_checkpoint_is_the_mean_of_the_kept_epochs(trained):
    from seq2seq_zoo.utils import load_checkpoint
    ck = trained["run"] / "checkpoints"
    kept = sorted(p.name for p in ck.glob("epoch*.pt"))
    assert kept == ["epoch001.pt", "epoch002.pt"]
    e1, e2 = (load_checkpoint(ck / n)["model"] for n in kept)
    avg = load_checkpoint(ck / "averaged.pt")["model"]
    for k in avg:
        if torch.is_floating_point(avg[k]):
            torch.testing.assert_close(avg[k], (e1[k] + e2[k]) / 2)
    rec = json.loads((trained["run"] / "record.json").read_text())
    assert "averaged.pt" in rec["train"]["decoded_with"]


def test_decoding_used_the_averaged_weights(trained):
    from seq2seq_zoo.inference import Summarizer
    preds = [json.loads(x)["prediction"] for x in (trained["run"] / "predictions.jsonl").read_text().splitlines()]
    got = Summarizer.from_run(trained["run"], "averaged.pt").summarize(_test_sources(trained["data"]), batch_size=8)
    assert got == preds


def test_zoo_average_command(trained, capsys):
    assert run_cli(["average", str(trained["run"]), "--last", "2"]) == 0
    assert run_cli(["average", str(trained["run"]), "--last", "5"]) == 2
    assert "train.average_last" in capsys.readouterr().err


# ------------------------------------------------------------------------------- export and the API
def test_export_and_from_pretrained(trained, tmp_path):
    from safetensors import safe_open

    from seq2seq_zoo import Summarizer
    out = tmp_path / "model"
    assert run_cli(["export", str(trained["run"]), str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {"model.safetensors", "config.json", "vocab.json", "README.md"}
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert len(list(f.keys())) > 0
    card = (out / "README.md").read_text()
    for needed in ("dialogsum", "ROUGE-1", "95% CI", "seed 1", "updates", "hardware", "below LEAD"):
        assert needed in card, needed
    texts = _test_sources(trained["data"])
    exported = Summarizer.from_pretrained(out)
    assert exported.summarize(texts) == Summarizer.from_run(trained["run"]).summarize(texts)
    assert exported(texts[0]) == exported.summarize(texts[:1])[0]
    assert exported.summarize(["", texts[0]])[0] == ""


def test_from_pretrained_refuses_a_foreign_folder(tmp_path):
    from seq2seq_zoo.errors import UserError
    from seq2seq_zoo.inference import Summarizer
    with pytest.raises(UserError, match="zoo export"):
        Summarizer.from_pretrained(tmp_path)


def test_summarize_jsonl_and_stdin_lines(trained, tmp_path, monkeypatch, capsys):
    import io
    texts = _test_sources(trained["data"])
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"x{i}", "dialogue": t}) + "\n" for i, t in enumerate(texts)))
    out = tmp_path / "out.jsonl"
    assert run_cli(["summarize", str(trained["run"]), "--input", str(inp), "--output", str(out), "--batch-size",
                    "2", "--no-progress"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    from seq2seq_zoo.inference import Summarizer
    assert rows == [{"id": f"x{i}", "summary": s}
                    for i, s in enumerate(Summarizer.from_run(trained["run"]).summarize(texts))]
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(t.replace("\n", " ") for t in texts) + "\n"))
    assert run_cli(["summarize", str(trained["run"]), "--input", "-", "--no-progress"]) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [g["id"] for g in got] == ["0", "1", "2"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a b c"}\n{"body": "x"}\n')
    assert run_cli(["summarize", str(trained["run"]), "--input", str(bad)]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ plots
def test_every_plot_renders_with_titled_axes(trained, monkeypatch):
    from PIL import Image

    from seq2seq_zoo.report import build_report, plots
    seen = {}
    real = plots.save_figure

    def keep(fig, path):
        seen[Path(path).name] = [(ax.get_title() or fig._suptitle.get_text() if fig._suptitle else ax.get_title(),
                                  ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes if ax.get_visible()
                                 and ax.get_label() != "<colorbar>"]
        return real(fig, path)
    monkeypatch.setattr(plots, "save_figure", keep)
    import seq2seq_zoo.report.finetune as finetune
    monkeypatch.setattr(finetune, "save_figure", keep, raising=False)
    build_report(trained["exp"])
    for name in ("scores.png", "val_loss.png", "lr_schedule.png", "positional_encodings.png", "attention_tiny.png"):
        assert name in seen, name
        main = seen[name][0]
        assert main[0] and main[1] and main[2], (name, main)
        w, h = Image.open(trained["exp"] / "plots" / name).size
        assert 300 < w < 4000 and 200 < h < 3000, (name, w, h)
        assert (trained["exp"] / "plots" / name).stat().st_size < 1_000_000
    assert "experiment u" in seen["scores.png"][0][0] and "dataset dialogsum" in seen["val_loss.png"][0][0]
    assert "heads averaged" not in seen["attention_tiny.png"][0][0]
    assert "mean of 2 heads" in seen["attention_tiny.png"][0][0]
    assert "source token" in seen["attention_tiny.png"][0][1]


def test_attention_title_names_the_map_in_words():
    from seq2seq_zoo.report.plots import human_map_name
    assert human_map_name("decoder_layer2_block2_decenc_att", 4) == \
        "encoder-decoder attention, decoder layer 2 (mean of 4 heads)"
    assert human_map_name("decoder_layer1_block2_decenc_att", 1) == "encoder-decoder attention, decoder layer 1"


def test_one_epoch_val_loss_has_no_band(tmp_path, monkeypatch):
    from seq2seq_zoo.report import plots
    recs = [{"run": f"a-seed{s}", "seed": s, "experiment": "e", "data": {"dataset": "d"}, "profile": None,
             "train": {"history": [{"epoch": 1, "val_loss": 3.0 + s / 10, "train_loss": 4.0}]}} for s in (1, 2)]
    calls = []
    monkeypatch.setattr(plots.plt.Axes, "fill_between", lambda *a, **k: calls.append(a))
    assert plots.val_loss(recs, tmp_path / "v.png")
    assert not calls


# ------------------------------------------------------------------------------- tables and commands
def test_attention_plot_of_emoji_tokens_draws_without_missing_glyphs(tmp_path):
    """SAMSum's chats hold emoji: their tick labels are code points, so matplotlib warns of no missing glyph."""
    import json
    import warnings
    from seq2seq_zoo.report import plots
    assert plots.drawable("ok\U0001F600!") == "ok<U+1F600>!" and plots.drawable("caf\u00e9") == "caf\u00e9"
    run = tmp_path / "run"
    run.mkdir()
    maps = {"cross": [[0.5, 0.5], [0.2, 0.8]]}
    (run / "attention.json").write_text(json.dumps({
        "example_id": "x1", "cross_attention": "cross", "maps": maps, "source_tokens": ["hi", "\U0001F600"],
        "output_tokens": ["<bos>", "\U0001F602"], "predicted_tokens": ["\U0001F602", "</s>"]}), encoding="utf-8")
    rec = {"_dir": str(run), "run": "a", "experiment": "e", "data": {"dataset": "samsum"}, "profile": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert plots.attention(rec, tmp_path / "a.png")
    assert not [w for w in caught if "Glyph" in str(w.message)], [str(w.message) for w in caught]


def test_header_line_gives_an_evenly_spaced_choice_as_its_range():
    import pandas as pd
    from seq2seq_zoo.report.tables import split_constant
    df = pd.DataFrame({"run": ["lead", "lead_words", "a"], "choose_k": ["1, 2, 3, 4, 5, 6", None, None],
                       "k_grid": [None, "20, 25, 30, 35, 40", None], "lrs": ["0.1, 0.2, 0.3, 0.4", None, None],
                       "score": [1.0, 2.0, 3.0]})
    _, line = split_constant(df)
    assert "choose_k 1-6 (lead only)" in line and "k_grid 20-40 in steps of 5 (lead_words only)" in line
    assert "lrs 0.1, 0.2, 0.3, 0.4 (lead only)" in line     # not whole numbers: as written


def test_constant_settings_leave_the_table_for_a_header_line(trained):
    md = (trained["exp"] / "table.md").read_text()
    assert "**Settings that do not vary**" in md
    header = next(x for x in md.splitlines() if x.startswith("| run"))
    for col in ("d_model", "heads", "layers"):  # the same for the one trained run
        assert f"| {col} |" not in header


def test_params_table_keeps_the_model_name_and_groups_seeds():
    from seq2seq_zoo.report.tables import params_table, to_markdown
    recs = [{"run": "lead", "seed": 1, "model": "lead", "data": {"vocab_size": 2328},
             "params": {"model": 0, "total": 0}}]
    recs += [{"run": f"t-seed{s}", "seed": s, "model": "transformer", "data": {"vocab_size": 50},
              "params": {"encoder": 10, "total": 10}} for s in (1, 2, 3)]
    md = to_markdown(params_table(recs))
    assert "| lead | lead | 2328 |" in md
    assert md.count("| t | transformer |") == 1 and "seed" not in md


def test_only_selects_every_seed(tmp_path, capsys):
    from seq2seq_zoo.config import load_experiment
    toml = tmp_path / "e.toml"
    toml.write_text(tiny_experiment("e", '[[runs]]\nname = "tmax"\n[[runs]]\nname = "other"\n', seeds=1)
                    .replace("seeds = [1]", "seeds = [1, 2]"))
    assert [s.name for s in load_experiment(toml, only=["tmax"]).runs] == ["tmax-seed1", "tmax-seed2"]
    assert [s.name for s in load_experiment(toml, only=["tmax-seed2"]).runs] == ["tmax-seed2"]
    assert run_cli(["run", str(toml), "--only", "tmax", "--dry-run", "--results", str(tmp_path / "r")]) == 0
    assert run_cli(["run", str(toml), "--only", "tmx", "--dry-run", "--results", str(tmp_path / "r")]) == 2


def test_eval_prints_a_summary_and_json_on_request(trained, capsys):
    assert run_cli(["eval", str(trained["run"])]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 examples: ROUGE-1 ") and "{" not in out and len(out.splitlines()) == 1
    assert run_cli(["eval", str(trained["run"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_examples"] == 3


def test_version(capsys):
    from seq2seq_zoo import __version__
    with pytest.raises(SystemExit) as e:
        run_cli(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"seq2seq-zoo {__version__}"


def test_no_progress_silences_library_bars(trained, monkeypatch, tmp_path):
    """BERTScore's weight-loading bar is transformers' (through huggingface_hub): --no-progress turns it off."""
    tf_logging = pytest.importorskip("transformers.utils.logging")
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
    import warnings
    was = tf_logging.is_progress_bar_enabled()
    with warnings.catch_warnings():  # huggingface_hub may have read the variable when it was imported
        warnings.simplefilter("ignore")
        tf_logging.enable_progress_bar()
    inp = tmp_path / "t.txt"
    inp.write_text("#Person1#: Hello Amy.\n")
    try:
        assert run_cli(["summarize", str(trained["run"]), "--input", str(inp), "--no-progress"]) == 0
        import os
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1" and os.environ["TQDM_DISABLE"] == "1"
        assert not tf_logging.is_progress_bar_enabled()
    finally:
        if was:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tf_logging.enable_progress_bar()


@pytest.mark.parametrize("metric", ["loss", "rouge1"])
def test_epoch_line_names_the_validation_metric_once(metric):
    from seq2seq_zoo.config import TrainConfig
    from seq2seq_zoo.train.loop import LoopState, _end_epoch
    st = LoopState(step=4, train_tokens=100, train_seconds=1.0,
                   val_curve=[{"step": 4, "epoch": 1, "val_loss": 2.5, **({"val_rouge1": 0.25} if metric != "loss" else {})}])
    row = {"epoch": 1, "train_loss_sum": 30.0, "train_tokens": 10, "seconds": 1.0}
    lines = []
    _end_epoch(st, row, TrainConfig(val_metric=metric, epochs=2), lambda: None, lines.append)
    assert lines[0].count("val loss") == 1 and "val loss 2.5000" in lines[0]
    assert ("val rouge1 25.00" in lines[0]) == (metric == "rouge1")


def test_zoo_run_max_minutes_stops_training_scores_the_run_and_says_so(tmp_path, capsys):
    """zoo run --max-minutes: the run stops after its first epoch, is still decoded and scored, its record
    says train.stopped_by_time, the table's 'stopped' column says why, and the file's own setting (no limit)
    still counts as the same recipe (a time limit is a resource, like the device)."""
    from seq2seq_zoo.report.tables import convergence
    data = write_dialogsum(tmp_path / "data", n_train=8, n_dev=2, n_test=2)
    toml = tmp_path / "m.toml"
    toml.write_text(tiny_experiment("m", '[[runs]]\nname = "tiny"\n', seeds=1, data_dir=data, epochs=4))
    results = tmp_path / "results"
    assert run_cli(["run", str(toml), "--results", str(results), "--no-progress", "--max-minutes", "1e-9"]) == 0
    rec = json.loads((results / "m" / "tiny" / "record.json").read_text())
    assert rec["train"]["stopped_by_time"] is True and rec["train"]["epochs_run"] == 1
    assert rec["spec"]["train"]["max_minutes"] == 1e-9 and "--max-minutes" in rec["command"]
    assert rec["eval"]["split"] == "test" and rec["eval"]["scores"]["rouge1"] is not None
    assert convergence(rec) in ("not converged", "time limit")
    capsys.readouterr()
    assert run_cli(["run", str(toml), "--results", str(results), "--no-progress"]) == 0   # already done: kept
    assert "tiny" in capsys.readouterr().out
    assert json.loads((results / "m" / "tiny" / "record.json").read_text())["train"]["epochs_run"] == 1
    for bad in ("0", "-1", "inf", "soon"):
        with pytest.raises(SystemExit) as e:
            run_cli(["run", str(toml), "--results", str(results), "--max-minutes", bad])
        assert e.value.code == 2 and "--max-minutes" in capsys.readouterr().err


def test_convergence_names_the_time_limit():
    from seq2seq_zoo.report.tables import convergence
    hist = [{"val_loss": 2.0}, {"val_loss": 1.0}, {"val_loss": 1.5}]
    assert convergence({"train": {"history": hist}}) == "cap reached"
    assert convergence({"train": {"history": hist, "stopped_by_time": True}}) == "time limit"
    assert convergence({"train": {"history": hist[:2], "stopped_by_time": True}}) == "not converged"
