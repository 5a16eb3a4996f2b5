"""The package's structure: no import cycles, one base class for user-facing errors, one selection of
the examples a run uses, one decode-and-score path, one greedy decoder, one decode-length check."""
from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest
import torch

import seq2seq_zoo
from seq2seq_zoo import errors

PKG = Path(seq2seq_zoo.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> package modules it imports, at module level or inside functions alike (a function-level
    import that closes a cycle is still a cycle, only a hidden one)."""
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for a in node.names:
                    if f"{target}.{a.name}" in files:
                        deps.add(f"{target}.{a.name}")
                    elif target in files:
                        deps.add(target)
        deps.discard(mod)
        graph[mod] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_find_cycle_finds_a_cycle_and_accepts_a_dag():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_graph_sees_function_level_and_relative_imports():
    g = import_graph()
    assert "seq2seq_zoo.runner" in g["seq2seq_zoo.cli"]            # imported inside cmd_run
    assert "seq2seq_zoo.errors" in g["seq2seq_zoo.cli"]
    assert "seq2seq_zoo.evaluation" in g["seq2seq_zoo.runner"]


def test_package_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_errors_module_imports_nothing_from_the_package():
    assert import_graph()["seq2seq_zoo.errors"] <= {"seq2seq_zoo"}


# ------------------------------------------------------------------------------------------- errors
def test_every_user_facing_error_derives_from_user_error():
    from seq2seq_zoo import config, embeddings, registry, runner, utils
    from seq2seq_zoo.data import corpora, download
    from seq2seq_zoo.train import loop
    for cls in (config.ConfigError, corpora.DataError, registry.UnknownName, runner.InitError,
                embeddings.EmbeddingError, loop.TrainingStopped, utils.UnsafeCheckpoint, download.DownloadError,
                errors.MissingFile):
        assert issubclass(cls, errors.UserError), cls
    # and each keeps the built-in class callers caught before
    assert issubclass(config.ConfigError, ValueError) and issubclass(registry.UnknownName, KeyError)
    assert issubclass(errors.MissingFile, FileNotFoundError) and issubclass(loop.TrainingStopped, RuntimeError)
    assert str(registry.UnknownName("no model 'x'")) == "no model 'x'"  # plain, unlike KeyError's quotes


def test_no_module_defines_its_own_user_error_base():
    """Error classes live in errors.py; other modules only import them."""
    for path in PKG.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                pytest.fail(f"{path.name} defines {node.name}; define it in seq2seq_zoo/errors.py")


def test_cli_turns_every_user_error_into_one_line(capsys, monkeypatch):
    """One base class caught: an error raised deep in the code (here an EmbeddingError, which the cli
    used not to list) prints one line and exits 2."""
    from seq2seq_zoo import cli
    from seq2seq_zoo.errors import EmbeddingError

    def boom(args):
        raise EmbeddingError("embeddings = \"pretrained:x.txt\": file not found; give the path of a GloVe file")
    monkeypatch.setattr(cli, "cmd_list", boom)
    assert cli.main(["list"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["zoo list: error: embeddings = \"pretrained:x.txt\": file not found; "
                                        "give the path of a GloVe file"]

    def bug(args):
        raise ValueError("a bug, not a user error")
    monkeypatch.setattr(cli, "cmd_list", bug)
    with pytest.raises(ValueError):  # programming errors keep their traceback
        cli.main(["list"])


# ------------------------------------------------------------------------ one selection of examples
def test_training_and_re_decoding_select_the_same_examples(dialogsum_dir):
    from seq2seq_zoo.config import RunSpec
    from seq2seq_zoo.evaluation import _load_eval_data
    from seq2seq_zoo.runner import prepare_data
    spec = RunSpec.from_dict({"experiment": "e", "name": "r", "seed": 3, "model": "gru", "model_options": {},
                              "data": {"dataset": "dialogsum", "max_train": 9, "max_test": 2,
                                       "filter_percentiles": [10, 90]},
                              "eval": {"train_sample": 0.5}})
    vocab, enc, _ = prepare_data(spec, str(dialogsum_dir), log=lambda *_: None)
    shown, n_train, _, sample, test = _load_eval_data(spec, vocab, str(dialogsum_dir), None)
    assert n_train == len(enc["train"]) and 0 < n_train <= 9
    assert [e.id for e in test] == [e.id for e in enc["test"]] and len(test) == 2
    train_ids = {e.id for e in enc["train"]}
    assert sample and {e.id for e in sample} <= train_ids
    for a, b in zip(test, enc["test"]):
        assert (a.src == b.src).all() and (a.tgt == b.tgt).all()


# ------------------------------------------------------------------------------------ decode length
def test_one_decode_length_check_for_files_sweeps_and_zoo_eval():
    from seq2seq_zoo.config import DataConfig, DecodeConfig, decode_too_long
    assert decode_too_long(DecodeConfig(max_len=40), DataConfig(max_tgt_len=40)) is None
    msg = decode_too_long(DecodeConfig(max_len=41), DataConfig(max_tgt_len=40))
    assert "max_len 41" in msg and "max_tgt_len (40)" in msg and "lower decode.max_len" in msg
    src = inspect.getsource
    from seq2seq_zoo import config, evaluation
    # the comparison itself is written once
    assert (src(config) + src(evaluation)).count("max_len >") == 1


# ------------------------------------------------------------------------------- one greedy decoder
def test_greedy_decoding_and_the_scst_baseline_are_the_same_decoder():
    from conftest import random_batch, tiny_transformer
    from seq2seq_zoo.config import DecodeConfig
    from seq2seq_zoo.decode import _strip, greedy
    from seq2seq_zoo.train.objectives import greedy_ids
    model = tiny_transformer(vocab_size=30, seed=5)
    batch = random_batch(30, [7, 5, 3], [2, 2, 2], seed=1)
    cfg = DecodeConfig(method="greedy", max_len=9, min_len=0)
    ids = greedy_ids(model, batch, 9)
    assert greedy(model, batch, cfg) == [_strip(r) for r in ids.tolist()]


def test_greedy_applies_min_len_and_ngram_blocking():
    from conftest import random_batch, tiny_transformer
    from seq2seq_zoo.config import DecodeConfig
    from seq2seq_zoo.data.vocab import EOS_ID
    from seq2seq_zoo.decode import greedy
    model = tiny_transformer(vocab_size=12, seed=2)
    with torch.no_grad():
        model.generator.bias[EOS_ID] += 50          # would stop at once
    batch = random_batch(12, [5, 4], [2, 2], seed=3)
    assert greedy(model, batch, DecodeConfig(method="greedy", max_len=8, min_len=0)) == [[], []]
    out = greedy(model, batch, DecodeConfig(method="greedy", max_len=8, min_len=4, no_repeat_ngram=1))
    assert all(len(x) == 4 and len(set(x)) == 4 for x in out)


# --------------------------------------------------------------------------------- one loader
def test_summarize_and_re_decoding_load_a_run_the_same_way(tmp_path):
    from seq2seq_zoo.errors import MissingFile
    from seq2seq_zoo.inference import Summarizer, load_trained_run
    with pytest.raises(MissingFile, match="summarize needs the run's checkpoints"):
        Summarizer.from_run(tmp_path)
    with pytest.raises(MissingFile, match="re-decoding needs"):
        load_trained_run(tmp_path, purpose="re-decoding")


@pytest.mark.parametrize("model,opts,legacy", [("transformer", {"pe": "sinusoidal_tmax", "d_model": 8, "d_ff": 16,
                                                                  "heads": 2, "layers": 1}, {"pe_tmax_rule": "per_side"}),
                                                ("pointer_generator", {"emb_dim": 8, "hidden": 12},
                                                 {"variant": "bahdanau"})])
def test_runs_trained_before_issue_19_load_with_their_own_rules(tmp_path, model, opts, legacy):
    """A checkpoint whose record has no ``model_rules`` was trained with the old defaults (per-side
    T_max, the Bahdanau-style pointer); re-decoding rebuilds it with those, not today's defaults."""
    import json

    import torch

    from conftest import tiny_encoded
    from seq2seq_zoo.config import DataConfig, DecodeConfig, EvalConfig, RunSpec, TrainConfig
    from seq2seq_zoo.inference import load_trained_run
    from seq2seq_zoo.models.base import build_model
    from seq2seq_zoo.registry import model_context
    from seq2seq_zoo.utils import atomic_torch_save
    vocab, _ = tiny_encoded(4)
    spec = RunSpec(experiment="e", name="r", seed=1, model=model, model_options=dict(opts),
                   data=DataConfig(max_src_len=40, max_tgt_len=12), train=TrainConfig(), decode=DecodeConfig(),
                   eval=EvalConfig())
    ck = tmp_path / "checkpoints"
    ck.mkdir()
    (ck / "spec.json").write_text(json.dumps(spec.to_dict()))
    vocab.save(ck / "vocab.json")
    torch.manual_seed(0)
    old = build_model(model, model_context(len(vocab), spec.data), {**opts, **legacy})
    atomic_torch_save({"model": old.state_dict()}, ck / "best.pt")
    (tmp_path / "record.json").write_text(json.dumps({"run": "r"}))            # made before issue 19
    run = load_trained_run(tmp_path)
    if model == "transformer":
        assert run.model.decoder.pe.base == 13.0 and run.model.encoder.pe.base == 40.0
    else:
        assert run.model.variant == "bahdanau"
    (tmp_path / "record.json").write_text(json.dumps({"run": "r", "model_rules": {}}))   # made after
    if model == "transformer":
        assert load_trained_run(tmp_path).model.decoder.pe.base == 40.0
