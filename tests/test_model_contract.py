"""The model contract (models/base.py) and user models from outside the package: a model that breaks a
rule stops with one line naming it; option rules belong to the model; attention maps and pretrained
vectors are declared; --models, [experiment] models and the entry point group register user models."""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from seq2seq_zoo.cli import main
from seq2seq_zoo.config import load_experiment
from seq2seq_zoo.errors import ConfigError, ContractError, PluginError
from seq2seq_zoo.models.base import build_model
from seq2seq_zoo.registry import MODELS, load_entry_points, load_models

# a complete small model; {name}, {init}, {forward} and {extra} are filled per test
MODEL = '''
import torch
from torch import nn
from seq2seq_zoo.models.base import Seq2Seq, StepOutput, at_least, between, one_of
from seq2seq_zoo.registry import register_model


@register_model("{name}")
class M(Seq2Seq):
{extra}
    def __init__(self, vocab_size, width=8, method="sum", warmup=0, eps=0.0, split="all", vectors="random",
                 pretrained_embeddings=None):
{init}
        self.emb = nn.Embedding(vocab_size, width)
        self.out = nn.Linear(width, vocab_size)
        self.got_vectors = pretrained_embeddings

{forward}
        x = self.emb(batch.tgt_in) + self.emb(batch.src).mean(1, keepdim=True)
        lp = self.out(x).log_softmax(-1)
        return StepOutput(lp, attention={{"mine": torch.ones(x.size(0), 1, x.size(1), batch.src.size(1))}})

    def encode(self, batch):
        return {{"ctx": self.emb(batch.src).mean(1)}}

    def decode_step(self, state, prev):
        return self.out(self.emb(self.feed(prev)) + state["ctx"]).log_softmax(-1), state
'''
GOOD_INIT = "        super().__init__()\n        self.vocab_size = vocab_size"
GOOD_FORWARD = "    def forward(self, batch, need_attention=False):"


def _model_file(tmp_path: Path, name: str, init=GOOD_INIT, forward=GOOD_FORWARD, extra="    pass") -> Path:
    f = tmp_path / f"{name}.py"
    f.write_text(MODEL.format(name=name, init=init, forward=forward, extra=extra), encoding="utf-8")
    return f


def _experiment(tmp_path: Path, model: str, options: str = "", experiment: str = "") -> Path:
    p = tmp_path / "exp.toml"
    p.write_text(f'[experiment]\nname = "x"\ndataset = "dialogsum"\n{experiment}\n[defaults]\nmodel = "{model}"\n'
                 f"data.max_tgt_len = 24\ndecode.max_len = 20\n{options}\n[[runs]]\nname = \"a\"\n", encoding="utf-8")
    return p


# ------------------------------------------------------------------------------ contract violations
@pytest.mark.parametrize("case,init,forward,rule", [
    ("nosuper", "        self.vocab_size = vocab_size", GOOD_FORWARD, "must call super().__init__()"),
    ("noflag", GOOD_INIT, "    def forward(self, batch):", "forward must accept need_attention"),
    ("novocab", "        super().__init__()", GOOD_FORWARD, "vocab_size must be set"),
])
def test_a_model_that_breaks_the_contract_stops_with_one_line(tmp_path, capsys, case, init, forward, rule):
    """The README's old example: no super().__init__() (a torch traceback mid-run before), forward
    without need_attention (a crash after training, no record). Now: exit 2 when the file is read."""
    f = _model_file(tmp_path, f"zz_contract_{case}", init=init, forward=forward)
    exp = _experiment(tmp_path, f"zz_contract_{case}")
    assert main(["run", str(exp), "--models", str(f), "--dry-run", "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "breaks the model contract" in err and rule in err, err
    assert f"{f}:" in err and f"model 'zz_contract_{case}'" in err
    with pytest.raises(ContractError, match="breaks the model contract"):
        build_model(f"zz_contract_{case}", {"vocab_size": 10}, {})


def test_declarations_are_checked_against_the_constructor(tmp_path):
    f = _model_file(tmp_path, "zz_contract_badrule", extra='    option_rules = {"widht": at_least(1)}')
    load_models([f])
    with pytest.raises(ContractError, match="option_rules names 'widht'"):
        build_model("zz_contract_badrule", {"vocab_size": 10}, {})
    f = _model_file(tmp_path, "zz_contract_nodim", extra='    embeddings_option = "vectors"')
    load_models([f])
    with pytest.raises(ContractError, match="must declare embedding_dim"):
        build_model("zz_contract_nodim", {"vocab_size": 10}, {})


# ------------------------------------------------------------------------------------- option rules
def test_model_options_named_like_section_keys_follow_the_models_rules(tmp_path):
    """method, split, warmup and eps are decode/eval/train keys; a model's options of those names used to
    be checked with those sections' rules ('beam' | 'greedy', >= 1, > 0)."""
    rules = '    option_rules = {"warmup": between(0, 10), "method": one_of("sum", "max"), "width": at_least(2)}'
    f = _model_file(tmp_path, "zz_rules", extra=rules)
    load_models([f])
    ok = _experiment(tmp_path, "zz_rules", 'method = "max"\nwarmup = 0\neps = 0.0\nsplit = "none"')
    spec = load_experiment(ok).runs[0]
    assert spec.model_options == {"method": "max", "warmup": 0, "eps": 0.0, "split": "none"}
    for opt, msg in (('method = "beam"', "is not one of sum, max"), ("warmup = 20", "must be in [0, 10)"),
                     ("width = 1", "must be >= 2")):
        bad = _experiment(tmp_path, "zz_rules", opt)
        with pytest.raises(ConfigError) as e:
            load_experiment(bad)
        assert str(e.value).startswith(f"{bad}:9: runs[0].{opt.split()[0]}:") and msg in str(e.value), str(e.value)
    # the sections keep their rules
    with pytest.raises(ConfigError, match="decode.method: 'sum' is not one of beam, greedy"):
        load_experiment(_experiment(tmp_path, "zz_rules", 'decode.method = "sum"'))


def test_built_in_models_declare_their_ranges():
    from seq2seq_zoo.registry import model_option_rules
    assert model_option_rules("transformer")["heads"](0) == "must be >= 1"
    assert model_option_rules("transformer_pointer")["d_model"](0) == "must be >= 1"   # inherited
    assert model_option_rules("pointer_generator")["hidden"](0) == "must be >= 1"
    assert model_option_rules("gru")["emb_dim"](4) is None and model_option_rules("lead") == {}


# ----------------------------------------------------------------- declared maps, vectors, defaults
def test_declared_attention_maps_are_kept_whatever_their_names(tmp_path):
    from conftest import tiny_encoded
    from seq2seq_zoo.runner import _save_artifacts
    extra = '    cross_attention = "mine"'
    load_models([_model_file(tmp_path, "zz_maps", extra=extra)])
    vocab, data = tiny_encoded(2)
    model = build_model("zz_maps", {"vocab_size": len(vocab)}, {})
    _save_artifacts(model, data, vocab, [[5, 6, 7]], tmp_path, torch.device("cpu"), None, 24)
    a = json.loads((tmp_path / "attention.json").read_text())
    assert a["cross_attention"] == "mine" and list(a["maps"]) == ["mine"] and len(a["maps"]["mine"]) == 4
    load_models([_model_file(tmp_path, "zz_nomaps")])   # declares nothing: nothing kept
    _save_artifacts(build_model("zz_nomaps", {"vocab_size": len(vocab)}, {}), data, vocab, [[5]], tmp_path,
                    torch.device("cpu"), None, 24)
    assert json.loads((tmp_path / "attention.json").read_text())["maps"] == {}


def test_pretrained_vectors_follow_the_declared_option_and_width(tmp_path, dialogsum_dir):
    """The vectors option is called ``vectors`` and the width ``width``: neither name the runner knew."""
    from seq2seq_zoo.runner import run
    extra = ('    embeddings_option = "vectors"\n\n    @classmethod\n    def embedding_dim(cls, options):\n'
             '        return options["width"]\n')
    load_models([_model_file(tmp_path, "zz_vectors", extra=extra)])
    exp = _experiment(tmp_path, "zz_vectors", 'width = 6\nvectors = "word2vec"\ntrain.epochs = 1\n'
                      'train.precision = "fp32"\ndecode.beam_size = 1\ndata.max_test = 1\n'
                      f'data.max_valid = 1\n', experiment=f'data_dir = "{dialogsum_dir}"')
    spec = load_experiment(exp).runs[0]
    seen = {}
    real = build_model

    def spy(name, context, options):
        seen["vectors"] = context.get("pretrained_embeddings")
        return real(name, context, options)
    import seq2seq_zoo.runner as runner
    orig, runner.build_model = runner.build_model, spy
    try:
        rec = run(spec, tmp_path / "out", progress=False, log=lambda *a, **k: None)
    finally:
        runner.build_model = orig
    assert seen["vectors"] is not None and seen["vectors"].shape == (rec["data"]["vocab_size"], 6)
    assert rec["embeddings"]["embeddings"] == "word2vec"


def test_legacy_defaults_are_declared_by_the_models():
    from seq2seq_zoo import inference
    assert not hasattr(inference, "LEGACY_MODEL_DEFAULTS")
    assert MODELS.get("transformer").legacy_defaults == {"pe_tmax_rule": "per_side", "pe_init_std": 0.02}
    assert MODELS.get("pointer_generator").legacy_defaults == {"variant": "bahdanau"}
    assert MODELS.get("transformer_pointer").legacy_defaults == {} and MODELS.get("gru").legacy_defaults == {}


# ---------------------------------------------------------------- models from outside the package
def test_experiment_models_key_is_relative_to_the_file(tmp_path):
    (tmp_path / "mine").mkdir()
    _model_file(tmp_path / "mine", "zz_keyed")
    exp = _experiment(tmp_path, "zz_keyed", experiment='models = ["mine/zz_keyed.py"]')
    assert load_experiment(exp).runs[0].model == "zz_keyed"
    assert load_experiment(exp).runs[0].model == "zz_keyed"        # read twice: imported once
    missing = _experiment(tmp_path, "zz_keyed", experiment='models = ["nowhere.py"]')
    with pytest.raises(PluginError) as e:
        load_experiment(missing)
    assert str(e.value).startswith(f"{missing}:4: experiment.models: 'nowhere.py': no such file")


def test_models_folders_plain_and_package(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    _model_file(plain, "zz_folder_a")
    _model_file(plain, "zz_folder_b")
    (plain / "_private.py").write_text("raise RuntimeError('not imported')\n")
    load_models([plain])
    assert "zz_folder_a" in MODELS and "zz_folder_b" in MODELS
    pkg = tmp_path / "my-pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import helpers\n")
    (pkg / "helpers.py").write_text("WIDTH = 8\n")
    _model_file(pkg, "zz_package_model")
    load_models([pkg])
    assert "zz_package_model" in MODELS


def test_a_model_file_that_fails_to_import_is_one_line(tmp_path, capsys):
    f = tmp_path / "broken.py"
    f.write_text("import torch\n\nx = 1 / 0\n")
    exp = _experiment(tmp_path, "transformer")
    assert main(["run", str(exp), "--models", str(f), "--dry-run", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{f}:3: importing this model file failed (ZeroDivisionError" in err


def test_entry_point_group_registers_installed_models(tmp_path, monkeypatch):
    """A package that declares ``[project.entry-points."seq2seq_zoo.models"]``: its module is imported
    when the registry is first asked (the installed metadata is faked with a .dist-info folder)."""
    from seq2seq_zoo.registry import Registry
    _model_file(tmp_path, "zz_entry_point_model").rename(tmp_path / "zz_ep_module.py")
    info = tmp_path / "zz_ep_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-ep-dist\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[zz_test.models]\nmine = zz_ep_module\n\n"
                                           "[zz_test.broken]\nbad = zz_ep_missing_module\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert MODELS._entry_points == "seq2seq_zoo.models"
    reg = Registry("model", entry_points="zz_test.models")
    assert "zz_entry_point_model" not in MODELS._entries
    reg.names()                                   # first lookup loads the group
    assert "zz_entry_point_model" in MODELS._entries and "zz_ep_module" in sys.modules
    with pytest.raises(PluginError, match=r"entry point 'bad = zz_ep_missing_module' \(group zz_test.broken\)"):
        load_entry_points("zz_test.broken")


def test_an_unknown_model_name_says_how_to_register_an_outside_model():
    from seq2seq_zoo.errors import UnknownName
    with pytest.raises(UnknownName, match=r"unknown model 'qqq_unheard_of'.*pass its file with --models PATH"):
        MODELS.get("qqq_unheard_of")
    with pytest.raises(UnknownName) as e:
        MODELS.get("transfomer")              # a typo of a known name: did-you-mean only
    assert "Did you mean 'transformer'?" in str(e.value) and "--models" not in str(e.value)
