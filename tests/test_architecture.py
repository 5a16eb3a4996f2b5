"""The package's structure: no import cycles, one base class for user-facing errors, one selection of
the examples a run uses, one decode-and-score path, one greedy decoder, one decode-length check."""
from __future__ import annotations

import ast
import inspect

import pytest
import torch

from import_graph import FILES, PKG, import_edges
from seq2seq_zoo import errors



def import_graph() -> dict[str, set[str]]:
    """module -> package modules it imports, at module level or inside functions alike (a function-level
    import that closes a cycle is still a cycle, only a hidden one); an import from a package is an edge
    to the package, whose __init__ runs first."""
    top, lazy = import_edges(resolve=False)
    graph: dict[str, set[str]] = {m: set() for m in FILES}
    for a, b in top | lazy:
        graph[a].add(b)
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
    assert "seq2seq_zoo.runner" in g["seq2seq_zoo.cli.run"]        # imported inside cmd_run
    assert "seq2seq_zoo.errors" in g["seq2seq_zoo.cli.app"]
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
    monkeypatch.setitem(cli.COMMANDS, "list", boom)
    assert cli.main(["list"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["zoo list: error: embeddings = \"pretrained:x.txt\": file not found; "
                                        "give the path of a GloVe file"]

    def bug(args):
        raise ValueError("a bug, not a user error")
    monkeypatch.setitem(cli.COMMANDS, "list", bug)
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
    shown, n_train, _, sample, test, _ = _load_eval_data(spec, vocab, str(dialogsum_dir), None)
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
    from seq2seq_zoo.config import decoding, load, schema, values
    # the comparison itself is written once
    assert sum(src(m).count("max_len >") for m in (config, decoding, load, schema, values, evaluation)) == 1


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
def test_runs_trained_before_the_correctness_fixes_load_with_their_own_rules(tmp_path, model, opts, legacy):
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
    (tmp_path / "record.json").write_text(json.dumps({"run": "r"}))            # made before the correctness fixes
    run = load_trained_run(tmp_path)
    if model == "transformer":
        assert run.model.decoder.pe.base == 13.0 and run.model.encoder.pe.base == 40.0
    else:
        assert run.model.variant == "bahdanau"
    (tmp_path / "record.json").write_text(json.dumps({"run": "r", "model_rules": {}}))   # made after
    if model == "transformer":
        assert load_trained_run(tmp_path).model.decoder.pe.base == 40.0


# ------------------------------------------------------------------------ the model interface's hooks
def _bare_model(with_d_model: bool, with_embedding: bool):
    from seq2seq_zoo.models.base import Seq2Seq, StepOutput

    class Bare(Seq2Seq):
        def __init__(self):
            super().__init__()
            self.vocab_size = 11
            if with_d_model:
                self.d_model = 24
            if with_embedding:
                self.emb = torch.nn.Embedding(11, 6)
            self.out = torch.nn.Linear(6, 11)

        def forward(self, batch, need_attention=False):
            return StepOutput(self.out(torch.zeros(batch.tgt_in.shape + (6,))).log_softmax(-1))
    return Bare()


def test_hook_defaults_say_what_a_model_need_not_provide():
    from conftest import random_batch
    from seq2seq_zoo.models.base import token_losses
    m = _bare_model(with_d_model=False, with_embedding=True)
    assert m.schedule_dim() == 6                       # the first embedding's width
    assert _bare_model(True, True).schedule_dim() == 24
    assert _bare_model(False, False).schedule_dim() == 512
    assert m.cross_attention is None and m.positional_tables() == {} and m.attention_coverage({"cov": 1}) is None
    batch = random_batch(11, [3, 2], [4, 2])
    out = m(batch)
    got = out.token_losses(batch.tgt_out, 0.1, 11)
    want = token_losses(out.log_probs, batch.tgt_out, 0.1, 11)
    assert torch.equal(got[0], want[0]) and got[2] == want[2] == (4 + 1) + (2 + 1)  # tokens + EOS


def test_models_name_their_cross_attention_positional_tables_and_coverage():
    from conftest import random_batch, tiny_transformer
    from seq2seq_zoo.models.base import build_model
    batch = random_batch(30, [5, 4], [3, 2])
    tr = tiny_transformer(vocab_size=30, layers=3)
    att = tr(batch, need_attention=True).attention
    assert tr.cross_attention == "decoder_layer3_block2_decenc_att" and tr.cross_attention in att
    assert att[tr.cross_attention].shape[-2:] == (batch.tgt_in.size(1), batch.src.size(1))
    assert set(tr.positional_tables()) == {"encoder.pe", "decoder.pe"}
    ctx = {"vocab_size": 30, "max_src_len": 16, "max_tgt_len": 16}
    for name in ("bahdanau", "pointer_generator"):
        m = build_model(name, ctx, {"hidden": 8, "emb_dim": 8})
        assert m.cross_attention in m(batch, need_attention=True).attention
        state = m.encode(batch)
        cov, mask = m.attention_coverage(state)
        assert cov is state["cov"] and mask is state["mask"]
        assert m.positional_tables() == {}
    gru = build_model("gru", ctx, {"hidden": 8, "emb_dim": 8})
    assert gru.cross_attention is None and gru.attention_coverage(gru.encode(batch)) is None
    assert gru(batch, need_attention=True).attention == {}


def test_a_real_error_in_forward_is_not_swallowed_when_saving_the_plots(tmp_path):
    """The attention plot's forward used to run inside ``except TypeError``, which hid real bugs."""
    from conftest import tiny_encoded, tiny_transformer
    from seq2seq_zoo.runner import _save_artifacts
    vocab, data = tiny_encoded(2)
    model = tiny_transformer(vocab_size=len(vocab), max_src_len=64)

    def broken(batch, need_attention=False):
        raise TypeError("a bug inside forward")
    model.forward = broken
    with pytest.raises(TypeError, match="a bug inside forward"):
        _save_artifacts(model, data, vocab, [[5, 6]], tmp_path, torch.device("cpu"), None, 24)


def test_attention_json_names_the_map_the_plot_draws(tmp_path):
    import json

    from conftest import tiny_encoded, tiny_transformer
    from seq2seq_zoo.runner import _save_artifacts
    vocab, data = tiny_encoded(2)
    model = tiny_transformer(vocab_size=len(vocab), max_src_len=64, layers=2)
    _save_artifacts(model, data, vocab, [[5, 6, 7]], tmp_path, torch.device("cpu"), None, 24)
    a = json.loads((tmp_path / "attention.json").read_text())
    assert a["cross_attention"] == "decoder_layer2_block2_decenc_att" and a["cross_attention"] in a["maps"]
    assert len(a["maps"][a["cross_attention"]]) == 4                      # 3 tokens + EOS rows
    pos = json.loads((tmp_path / "positional.json").read_text())   # lean: the table the plot draws
    assert pos["format"] == "lean-1" and set(pos["tables"]) == {"encoder.pe"} and pos["positions"] >= 64


def test_the_loop_and_the_record_use_the_same_schedule_dim(tmp_path):
    """A model without ``d_model``: the loop's learning rates and the record's lr curve both use
    ``schedule_dim`` (they used to guess differently: first embedding vs 512)."""
    from conftest import tiny_encoded
    from seq2seq_zoo.config import TrainConfig
    from seq2seq_zoo.train.loop import fit, lr_at
    from seq2seq_zoo.models.base import build_model
    vocab, data = tiny_encoded(4)
    model = build_model("gru", {"vocab_size": len(vocab)}, {"hidden": 8, "emb_dim": 6})
    del model.d_model
    assert model.schedule_dim() == 6
    cfg = TrainConfig(epochs=1, batch_size=4, schedule="noam", warmup=10, lr_factor=1.0, device="cpu",
                      precision="fp32")
    st = fit(model, data, data, cfg, seed=0, ckpt_dir=tmp_path, device=torch.device("cpu"), progress=False,
             log=lambda *_: None)
    assert st.history[-1]["lr"] == pytest.approx(lr_at(cfg, st.step, model.schedule_dim()))


# ------------------------------------------------------------------------------ loop and data parallel
def test_data_parallel_training_uses_only_public_torch_apis():
    """The objective runs inside DDP's forward, so nothing averages gradients by hand, flips DDP's sync
    flag or unwraps ``model.module``."""
    from seq2seq_zoo.train import distributed, loop, objectives
    src = inspect.getsource(distributed) + inspect.getsource(loop) + inspect.getsource(objectives)
    for private in ("torch._utils", "_execution_engine", "require_backward_grad_sync", ".module"):
        assert private not in src.replace("ObjectiveModule", ""), private


def test_objectives_share_a_base_class_the_loop_relies_on():
    from seq2seq_zoo.registry import OBJECTIVES
    from seq2seq_zoo.train import loop
    from seq2seq_zoo.train.objectives import Objective
    for name in OBJECTIVES.names():
        assert issubclass(OBJECTIVES.get(name), Objective), name
    assert "hasattr(" not in inspect.getsource(loop)


def test_bench_times_the_loops_own_train_step():
    from conftest import random_batch, tiny_transformer
    from seq2seq_zoo import bench
    from seq2seq_zoo.train.loop import TrainStep
    model = tiny_transformer(vocab_size=30).train()
    tr = bench.Trainer(model, random_batch(30, [5, 4], [3, 3]), torch.device("cpu"), None)
    assert isinstance(tr.step, TrainStep) and tr.step.cfg.label_smoothing == 0.1 and tr.step.cfg.clip_norm == 1.0
    before = [p.detach().clone() for p in model.parameters()]
    loss = tr()
    assert isinstance(loss, float) and loss > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))   # one update happened


def test_model_options_are_checked_by_the_model_that_owns_them(tmp_path):
    """The config package holds no tables of model options; a model's own ValueError becomes the file's error,
    pointing at the line of the option it names."""
    from seq2seq_zoo import config
    from seq2seq_zoo.config import ConfigError, load_experiment, values
    from seq2seq_zoo.models.base import Seq2Seq
    from seq2seq_zoo.registry import register_model
    for model_option in ("pe", "activation", "dropout", "attn_dropout", "cov_loss_weight", "embeddings"):
        assert model_option not in config.RANGES and model_option not in config.CHOICES
        assert f'"{model_option}"' not in inspect.getsource(values._check_value)

    @register_model("zz_arch_checked")
    class Checked(Seq2Seq):
        def __init__(self, vocab_size: int, width: int = 4, depth: int = 1):
            super().__init__()
            self.vocab_size = vocab_size
            if width < 2:
                raise ValueError(f"width must be >= 2, not {width}")

        def forward(self, batch, need_attention=False): ...
        def encode(self, batch): ...
        def decode_step(self, state, prev): ...
    p = tmp_path / "e.toml"
    p.write_text('[experiment]\nname = "x"\ndataset = "dialogsum"\n[defaults]\nmodel = "zz_arch_checked"\n'
                 'depth = 3\n[[runs]]\nname = "a"\nwidth = 1\n', encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    assert str(e.value).startswith(f"{p}:9: runs[0].width:") and "width must be >= 2, not 1" in str(e.value)
