"""The package's layers: a run's settings flow config -> data -> model -> fit -> evaluate -> record ->
report -> cli, and the imports follow that direction. A module imports, at module level, only from its
own layer or the layers below; the few imports that reach up from inside a function are listed here by
name (a new one fails until it is listed, a removed one until it is struck off). No module takes another
module's underscore name, but for the few listed here. One ``zoo run`` parses its experiment file once."""
from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from conftest import run_cli, tiny_experiment, write_dialogsum
from import_graph import FILES, PKG, import_edges, private_imports, private_uses

# lowest first; a module belongs to the first entry naming it or a package above it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # errors, the shared helpers, the name registries, the record's schema and its reading and writing
    # (every layer above may read or write a record), statistics, precision policy
    ("foundation", ("seq2seq_zoo", "errors", "names", "registry", "utils", "record_schema", "results", "stats",
                    "findings", "precision")),
    ("config", ("config",)),                               # TOML -> RunSpecs; config.schema at its bottom
    ("data", ("data", "metrics", "embeddings")),           # corpora, text, vocabularies, batches; text metrics
    ("model", ("models", "decode")),                       # the models and the one search over them
    ("fit", ("train", "averaging")),                       # the loop, objectives, schedules, DDP
    ("evaluate", ("evaluation", "inference", "exported", "reuse")),   # decode-and-score, loading trained runs
    ("report", ("report", "export")),                      # tables, plots, findings from the records alone
    ("run", ("runner", "bench", "launch")),                # one run end to end; the benchmark; cluster jobs
    ("cli", ("cli", "__main__")),
]

# imports inside a function that reach a higher layer: the checks that need a registry's entries
LAZY_UPWARD = {
    ("seq2seq_zoo", "seq2seq_zoo.inference"),              # `from seq2seq_zoo import Summarizer`, on first use
    ("seq2seq_zoo.config.load", "seq2seq_zoo.data.text"),      # data.turn_separator: one token to the tokenizer
    ("seq2seq_zoo.config.load", "seq2seq_zoo.models.base"),    # the meta-device build of each run's model
}

# underscore names that modules other than their own still import (none: a shared name is public)
SHARED_PRIVATE: set[str] = set()


def layer_of(module: str) -> int:
    rest = "seq2seq_zoo" if module == "seq2seq_zoo" else module.removeprefix("seq2seq_zoo.")
    for i, (_, mods) in enumerate(LAYERS):
        if any(rest == m or rest.startswith(m + ".") for m in mods):
            return i
    raise KeyError(f"{module}: in no layer of tests/test_layering.py; add it to LAYERS")


def test_every_module_has_a_layer():
    for mod in FILES:
        layer_of(mod)


def test_reexports_resolve_to_the_defining_module():
    top, _ = import_edges()
    assert ("seq2seq_zoo.evaluation", "seq2seq_zoo.config.spec") in top   # RunSpec via seq2seq_zoo.config
    assert ("seq2seq_zoo.evaluation", "seq2seq_zoo.config.decoding") in top
    assert layer_of("seq2seq_zoo.config.schema") < layer_of("seq2seq_zoo.data.corpora") < \
        layer_of("seq2seq_zoo.models.rnn") < layer_of("seq2seq_zoo.train.loop") < \
        layer_of("seq2seq_zoo.evaluation") < layer_of("seq2seq_zoo.report.build") < \
        layer_of("seq2seq_zoo.runner") < layer_of("seq2seq_zoo.cli.run")


def test_module_level_imports_go_down_the_layers():
    top, _ = import_edges()
    up = sorted(f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
                for a, b in top if layer_of(b) > layer_of(a))
    assert not up, "imports against the layers:\n" + "\n".join(up)


def test_function_level_imports_up_the_layers_are_the_listed_ones():
    _, lazy = import_edges()
    up = {(a, b) for a, b in lazy if layer_of(b) > layer_of(a)}
    assert up - LAZY_UPWARD == set(), f"unlisted upward imports inside functions: {sorted(up - LAZY_UPWARD)}"
    assert LAZY_UPWARD - up == set(), f"listed but gone (strike them off): {sorted(LAZY_UPWARD - up)}"


def test_no_module_imports_another_modules_underscore_name():
    """A name with a leading underscore is its module's own: one that another module needs is public (or
    moved to where it is used)."""
    used = private_imports()
    unlisted = sorted(f"{a} imports {name}" for a, name in used if name not in SHARED_PRIVATE)
    assert not unlisted, ("underscore names taken from another module (make them public there, or move "
                          "them):\n" + "\n".join(unlisted))
    gone = SHARED_PRIVATE - {name for _, name in used}
    assert not gone, f"listed but no module imports them any more (strike them off): {sorted(gone)}"


def test_the_underscore_scan_finds_every_form():
    import ast
    src = ("import seq2seq_zoo.utils.io\nimport seq2seq_zoo.models.copying as cp\n"
           "from seq2seq_zoo.report import plots\nfrom .plots import _title, context\n"
           "from seq2seq_zoo.config.values import _merge as merge, __all__\n"
           "def f(self):\n    from ..cli.common import EXIT_USAGE, _x\n"
           "    seq2seq_zoo.utils.io._y(); cp._z(); plots._w; plots.context; self._own; _title()\n")
    found = private_uses("seq2seq_zoo.report.build", PKG / "report" / "build.py", ast.parse(src))
    assert {name for _, name in found} == {
        "seq2seq_zoo.report.plots._title", "seq2seq_zoo.config.values._merge", "seq2seq_zoo.cli.common._x",
        "seq2seq_zoo.utils.io._y", "seq2seq_zoo.models.copying._z", "seq2seq_zoo.report.plots._w"}


def test_config_schema_imports_nothing_from_the_package():
    top, lazy = import_edges()
    assert not {b for a, b in top | lazy if a == "seq2seq_zoo.config.schema"}


def test_reading_the_config_loads_no_data_model_or_training_code():
    code = ("import sys, seq2seq_zoo.config; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith(('seq2seq_zoo.data', "
            "'seq2seq_zoo.models', 'seq2seq_zoo.train'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=PKG.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("flags", [["--dry-run", "--only", "a", "--profile", "auto"], ["--only", "a"]])
def test_one_zoo_run_parses_its_experiment_file_once(tmp_path, monkeypatch, flags):
    """--profile auto reads the file's profiles, --only reads the whole file for the tables' order and the
    findings, the report compares finished runs with the file: one parse serves them all."""
    from seq2seq_zoo.config import toml_lines
    data = write_dialogsum(tmp_path / "data", n_train=8, n_dev=2, n_test=2)
    text = tiny_experiment("once", '[[runs]]\nname = "a"\n\n[[runs]]\nname = "b"\n', seeds=1, data_dir=data,
                           epochs=1, decode_max_len=8) + '\n[profiles.cpu]\ntrain.epochs = 1\n'
    toml = tmp_path / "once.toml"
    toml.write_text(text, encoding="utf-8")
    parsed = []
    real = tomllib.loads
    monkeypatch.setattr(tomllib, "loads", lambda s, **kw: (parsed.append(s == text), real(s, **kw))[1])
    toml_lines._parsed.cache_clear()
    assert run_cli(["run", str(toml), "--results", str(tmp_path / "R"), "--no-progress", *flags]) == 0
    assert parsed.count(True) == 1
