"""The commands that use a finished run (export, summarize, average, eval --decode, compare, power) lose
nothing, write only where they should, and refuse a damaged or hostile input with one line (exit 2; the
Python API raises ``BadExport`` for exported folders). One tiny run (two epochs, the last two averaged)
is trained once for the module."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from conftest import tiny_experiment, trained_tiny_experiment
from test_crash_safety import main_captured, one_line

RUNS = '''
[[runs]]
name = "tiny"
train.average_last = 2
'''


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reliable")
    data, toml, R = trained_tiny_experiment(tmp, "rel", RUNS, epochs=2, seeds=1)
    run = R / "rel" / "tiny"
    export = tmp / "exported"
    d = main_captured(["export", run, export])
    assert d.rc == 0, d.err
    return {"tmp": tmp, "data": data, "toml": toml, "R": R, "run": run, "export": export}


def _refused(args, *needles) -> str:
    d = main_captured(args)
    assert d.rc == 2, (d.rc, d.err)
    line = one_line(d.err)
    for n in needles:
        assert n in line, line
    return line


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _copy_export(done, tmp_path) -> Path:
    out = tmp_path / "m"
    shutil.copytree(done["export"], out)
    return out


# ------------------------------------------------------------------------------------ export: data loss
def test_export_refuses_a_folder_of_another_tool_and_force_keeps_its_other_files(done, tmp_path):
    other = tmp_path / "hf_model"
    other.mkdir()
    (other / "config.json").write_text('{"architectures": ["Bert"]}\n')
    (other / "README.md").write_text("my notes\n")
    (other / "tokenizer.json").write_text("{}\n")
    before = _snapshot(other)
    _refused(["export", done["run"], other], "config.json", "--force")
    assert _snapshot(other) == before                       # nothing touched
    d = main_captured(["export", done["run"], other, "--force"])
    assert d.rc == 0, d.err
    assert (other / "tokenizer.json").read_text() == "{}\n"   # kept, not deleted
    assert json.loads((other / "config.json").read_text())["format"] == 1
    assert not list(tmp_path.glob(".hf_model.export-*"))      # no staging folder left


def test_export_over_an_earlier_export_replaces_it_whole(done, tmp_path):
    from seq2seq_zoo import Summarizer
    out = _copy_export(done, tmp_path)
    d = main_captured(["export", done["run"], out, "--checkpoint", "last.pt"])
    assert d.rc == 0, d.err
    assert json.loads((out / "config.json").read_text())["checkpoint"] == "last.pt"
    Summarizer.from_pretrained(out)


def test_a_kill_during_export_leaves_the_old_export_whole(done, tmp_path, monkeypatch):
    """SIGTERM (Preempted) after the new weights are written: the old export is untouched and loads."""
    from seq2seq_zoo import Summarizer, export
    from seq2seq_zoo.errors import Preempted
    out = _copy_export(done, tmp_path)
    before = _snapshot(out)

    def killed(*a, **k):
        raise Preempted()
    monkeypatch.setattr(export, "model_card", killed)
    with pytest.raises(Preempted):
        export.export_run(done["run"], out, checkpoint="last.pt", log=lambda *_: None)
    assert _snapshot(out) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    Summarizer.from_pretrained(out)


def test_a_crash_at_the_swap_leaves_old_or_new_never_a_mix(done, tmp_path, monkeypatch):
    """The swap itself fails (as a kill between two renames would): the folder is the old export."""
    from seq2seq_zoo import export
    from seq2seq_zoo.errors import WriteFailed
    from seq2seq_zoo.utils import io
    out = _copy_export(done, tmp_path)
    before = _snapshot(out)
    monkeypatch.setattr(io, "_exchange", lambda a, b: (_ for _ in ()).throw(OSError(5, "I/O error")))
    with pytest.raises(WriteFailed):
        export.export_run(done["run"], out, checkpoint="last.pt", log=lambda *_: None)
    assert _snapshot(out) == before


def test_export_may_not_write_into_a_run(done):
    _refused(["export", done["run"], done["run"] / "model"], "inside")
    _refused(["export", done["run"], done["R"] / "rel" / "tiny" / "checkpoints" / "x"], "inside")
    assert not (done["run"] / "model").exists()


# ---------------------------------------------------------------------------- summarize --output
def test_summarize_output_may_not_be_its_input_or_inside_a_run(done, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("#Person1#: hello there . #Person2#: hi .\n")
    before = inp.read_bytes()
    _refused(["summarize", done["run"], "--input", inp, "--output", inp, "--no-progress"], "input")
    assert inp.read_bytes() == before
    link = tmp_path / "link.txt"
    link.symlink_to(inp)
    _refused(["summarize", done["run"], "--input", inp, "--output", link, "--no-progress"], "input")
    preds = done["run"] / "predictions.jsonl"
    kept = preds.read_bytes()
    _refused(["summarize", done["run"], "--input", inp, "--output", preds, "--no-progress"], "inside")
    _refused(["summarize", done["export"], "--input", inp, "--output", preds, "--no-progress"], "run folder")
    _refused(["summarize", done["export"], "--input", inp, "--output", done["run"] / "decodes" / "x.jsonl",
              "--no-progress"], "run folder")
    assert preds.read_bytes() == kept and not (done["run"] / "decodes").exists()
    other = tmp_path / "notes.txt"
    other.write_text("my own notes\n")
    _refused(["summarize", done["run"], "--input", inp, "--output", other, "--no-progress"], "--force")
    assert other.read_text() == "my own notes\n"
    out = tmp_path / "out.jsonl"
    assert main_captured(["summarize", done["run"], "--input", inp, "--output", out, "--no-progress"]).rc == 0
    assert main_captured(["summarize", done["run"], "--input", inp, "--output", out, "--no-progress"]).rc == 0
    assert list(json.loads(out.read_text().splitlines()[0])) == ["id", "summary"]


def test_summarize_refuses_unbounded_decoding_before_work(done):
    from seq2seq_zoo import Summarizer
    from seq2seq_zoo.errors import UserError
    s = Summarizer.from_pretrained(done["export"])
    with pytest.raises(UserError, match="beam_size"):
        s("a b c", beam_size=10**6)
    with pytest.raises(UserError, match="max_len"):
        s("a b c", max_len=10**6)


# ---------------------------------------------------------------------- eval --decode: writes in place
def test_eval_decode_refuses_a_decodes_link_outside_the_results(done, tmp_path):
    run = tmp_path / "R2" / "rel" / "tiny"
    shutil.copytree(done["run"], run)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "decodes").symlink_to(elsewhere)
    _refused(["eval", run, "--decode", "beam_size=1", "--name", "X", "--no-progress"], "outside")
    assert not list(elsewhere.iterdir())


def test_a_kill_while_a_decoding_variant_is_written_leaves_the_old_one_whole(done, tmp_path, monkeypatch):
    """`zoo eval --decode` writes the variant's folder whole and swaps it in: a SIGTERM after the new
    predictions are written but before the record leaves the earlier variant (predictions and record) as it was."""
    from seq2seq_zoo import evaluation
    from seq2seq_zoo.errors import Preempted
    run = tmp_path / "R7" / "rel" / "tiny"
    shutil.copytree(done["run"], run)
    assert main_captured(["eval", run, "--decode", "beam_size=1", "--name", "g", "--no-progress"]).rc == 0
    before = _snapshot(run / "decodes")

    def killed(*a, **k):
        raise Preempted()
    monkeypatch.setattr(evaluation, "write_record", killed)
    # other settings under the same name: other predictions (at most 2 tokens), then killed before the record
    assert main_captured(["eval", run, "--decode", "beam_size=1,max_len=2", "--name", "g", "--no-progress",
                          "--force"]).rc == 143
    assert _snapshot(run / "decodes") == before
    monkeypatch.undo()
    assert main_captured(["eval", run, "--decode", "beam_size=1,max_len=2", "--name", "g", "--no-progress",
                          "--force"]).rc == 0
    assert _snapshot(run / "decodes")["g/predictions.jsonl"] != before["g/predictions.jsonl"]  # the check can fail


# ------------------------------------------------------------------------------------------- average
def test_average_keeps_the_averaged_weights_the_run_was_scored_with(done, tmp_path):
    run = tmp_path / "R3" / "rel" / "tiny"
    shutil.copytree(done["run"], run)
    avg = run / "checkpoints" / "averaged.pt"
    before = avg.read_bytes()
    d = main_captured(["average", run, "--last", "2"])             # the same mean: kept as it is
    assert d.rc == 0 and avg.read_bytes() == before, d.err
    _refused(["average", run, "--last", "1"], "averaged.pt", "epoch001.pt, epoch002.pt", "--force")
    assert avg.read_bytes() == before
    d = main_captured(["average", run, "--last", "1", "--force"])
    assert d.rc == 0, d.err
    assert torch.load(avg, weights_only=True)["averaged"] == ["epoch002.pt"]


def test_average_refuses_checkpoints_of_different_shapes(done, tmp_path):
    run = tmp_path / "R4" / "rel" / "tiny"
    shutil.copytree(done["run"], run)
    ck = torch.load(run / "checkpoints" / "epoch001.pt", weights_only=True)
    k = next(iter(ck["model"]))
    ck["model"][k] = torch.zeros(3, 3)
    torch.save(ck, run / "checkpoints" / "epoch001.pt")
    _refused(["average", run, "--last", "2", "--force"], "epoch001.pt", k, "not of one model")


# -------------------------------------------------------------------------------- not a run, init_from
def test_a_results_folder_is_named_as_such_not_as_untrained(done):
    line = _refused(["summarize", done["R"] / "rel"], "not a run", "tiny")
    assert "not committed" not in line
    _refused(["export", done["R"] / "rel", done["tmp"] / "never"], "not a run")
    assert not (done["tmp"] / "never").exists()


def test_init_from_a_file_that_is_not_a_checkpoint_is_one_line(done, tmp_path):
    toml = tmp_path / "init.toml"
    toml.write_text(tiny_experiment("init", '[[runs]]\nname = "x"\ntrain.init_from = "/etc/passwd"\n', seeds=1,
                                    data_dir=done["data"]), encoding="utf-8")
    _refused(["run", toml, "--results", tmp_path / "R", "--no-progress"], "/etc/passwd", "not a checkpoint")


def test_run_force_starts_a_new_training_log(done, tmp_path):
    R = tmp_path / "R5"
    shutil.copytree(done["R"], R)
    log = R / "rel" / "tiny" / "logs" / "train_log.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    steps = [r["step"] for r in rows if r["kind"] == "train"]
    d = main_captured(["run", done["toml"], "--results", R, "--no-progress", "--force"])
    assert d.rc == 0, d.err
    again = [json.loads(x)["step"] for x in log.read_text().splitlines() if json.loads(x)["kind"] == "train"]
    assert again == steps == sorted(set(steps))


# ----------------------------------------------------------------------------- hostile export folders
def _config(out: Path) -> dict:
    return json.loads((out / "config.json").read_text())


def _put(out: Path, config: dict) -> None:
    (out / "config.json").write_text(json.dumps(config))


HOSTILE = {
    "format_is_a_string": lambda out: _put(out, {**_config(out), "format": "1"}),
    "format_is_newer": lambda out: _put(out, {**_config(out), "format": 99}),
    "config_is_a_list": lambda out: (out / "config.json").write_text("[1, 2]"),
    "config_with_nan": lambda out: (out / "config.json").write_text(
        (out / "config.json").read_text().replace('"format": 1', '"format": NaN')),
    "d_model_does_not_match": lambda out: _put(out, {**_config(out), "spec": {
        **_config(out)["spec"], "model_options": {**_config(out)["spec"]["model_options"], "d_model": 32}}}),
    "gigantic_d_model": lambda out: _put(out, {**_config(out), "spec": {
        **_config(out)["spec"], "model_options": {**_config(out)["spec"]["model_options"], "d_model": 2**30,
                                                  "d_ff": 2**30}}}),
    "option_of_the_wrong_type": lambda out: _put(out, {**_config(out), "spec": {
        **_config(out)["spec"], "model_options": {**_config(out)["spec"]["model_options"], "layers": "two"}}}),
    "unbounded_max_src_len": lambda out: _put(out, {**_config(out), "spec": {
        **_config(out)["spec"], "data": {**_config(out)["spec"]["data"], "max_src_len": 10**12}}}),
    "truncated_vocabulary": lambda out: (out / "vocab.json").write_text(json.dumps(
        {"itos": json.loads((out / "vocab.json").read_text())["itos"][:-3]})),
    "repeated_word": lambda out: (out / "vocab.json").write_text(json.dumps(
        {"itos": json.loads((out / "vocab.json").read_text())["itos"][:-1] + ["<unk>"]})),
    "vocab_cut_in_half": lambda out: (out / "vocab.json").write_bytes(
        (out / "vocab.json").read_bytes()[: (out / "vocab.json").stat().st_size // 2]),
    "weights_are_a_pickle": lambda out: torch.save({"model": {}}, out / "model.safetensors"),
    "weights_cut_in_half": lambda out: (out / "model.safetensors").write_bytes(
        (out / "model.safetensors").read_bytes()[: (out / "model.safetensors").stat().st_size // 2]),
    "weights_empty": lambda out: (out / "model.safetensors").write_bytes(b""),
    "header_claims_gigabytes": lambda out: (out / "model.safetensors").write_bytes(
        (2**40).to_bytes(8, "little") + b"{}"),
    "weights_missing": lambda out: (out / "model.safetensors").unlink(),
    "config_is_a_folder": lambda out: ((out / "config.json").unlink(), (out / "config.json").mkdir()),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_damaged_or_hostile_export_is_one_bad_export_error(done, tmp_path, case):
    from seq2seq_zoo import Summarizer
    from seq2seq_zoo.errors import BadExport
    out = _copy_export(done, tmp_path)
    HOSTILE[case](out)
    with pytest.raises(BadExport) as e:
        Summarizer.from_pretrained(out)
    assert "\n" not in str(e.value) and str(out) in str(e.value)
    _refused(["summarize", out], str(out))


def test_the_export_is_checked_before_any_tensor_is_allocated(done, tmp_path, monkeypatch):
    """A config whose model does not fit the weights never reaches build_model off the meta device."""
    from seq2seq_zoo import Summarizer
    from seq2seq_zoo.errors import BadExport
    from seq2seq_zoo.models import base
    out = _copy_export(done, tmp_path)
    HOSTILE["gigantic_d_model"](out)
    real = base.build_model
    devices = []

    def watched(*a, **k):
        devices.append(torch.empty(0).device.type)
        return real(*a, **k)
    monkeypatch.setattr(base, "build_model", watched)
    with pytest.raises(BadExport):
        Summarizer.from_pretrained(out)
    assert devices == ["meta"]


# ------------------------------------------------------------------------------------------- compare
def test_compare_refuses_runs_scored_against_different_references(done, tmp_path):
    other = tmp_path / "R6" / "rel"
    shutil.copytree(done["R"] / "rel", other)
    preds = other / "tiny" / "predictions.jsonl"
    rows = [json.loads(x) for x in preds.read_text().splitlines()]
    rows[0]["references"] = ["another reference entirely"]
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _refused(["compare", f"{done['R'] / 'rel'}:tiny", f"{other}:tiny"], "different reference", rows[0]["id"])
    _refused(["compare", f"{done['R'] / 'rel'}:tiny", f"{other}:tiny", "--scale", "nan"], "--scale")


def test_eval_save_refuses_a_decodes_link_outside_the_results(done, tmp_path):
    run = tmp_path / "R8" / "rel" / "tiny"
    shutil.copytree(done["run"], run)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "v").mkdir(parents=True)
    for f in ("record.json", "predictions.jsonl", "scores.jsonl"):   # a variant the command would re-score
        shutil.copy(run / f, elsewhere / "v" / f)
    (run / "decodes").symlink_to(elsewhere)
    before = _snapshot(elsewhere)
    _refused(["eval", run, "--metrics", "rouge", "--save", "--force"], "outside")
    assert _snapshot(elsewhere) == before
