"""The meta-device build (models.base.build_on_meta) that checks an experiment file's models: the same
shapes and parameter counts as a real build, no random initialisation (so no torch._dynamo import, which
torch's reference implementations of the initialisers pull in), and initialisers restored afterwards."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

from seq2seq_zoo.config.schema import DataConfig
from seq2seq_zoo.models.base import build_model, build_on_meta, count_parameters, model_context

MODELS = {"transformer": {"d_model": 16, "d_ff": 32, "heads": 2, "layers": 1},
          "transformer_pointer": {"d_model": 16, "d_ff": 32, "heads": 2, "layers": 1, "pe": "sinusoidal"},
          "pointer_generator": {"hidden": 16, "emb_dim": 8, "coverage": True},
          "gru": {"hidden": 16, "emb_dim": 8}}


def _shapes(model: nn.Module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in model.state_dict().items()}


def test_meta_build_has_the_real_builds_shapes_and_counts_and_fills_nothing():
    ctx = model_context(50, DataConfig(max_src_len=12, max_tgt_len=8))
    for name, opts in MODELS.items():
        torch.manual_seed(0)
        real = build_model(name, ctx, opts)
        meta = build_on_meta(name, ctx, opts)
        assert all(p.is_meta for p in meta.parameters()), name
        assert _shapes(meta) == _shapes(real) and count_parameters(meta) == count_parameters(real), name
    # the initialisers are the originals again: a real tensor is filled, and the RNG stream is the usual one
    torch.manual_seed(3)
    a = nn.init.normal_(torch.empty(4, 4))
    torch.manual_seed(3)
    assert torch.equal(a, torch.empty(4, 4).normal_()) and a.std() > 0
    assert nn.init.normal_.__module__ == "torch.nn.init" and torch.Tensor.uniform_.__qualname__.endswith("uniform_")


def test_checking_an_experiment_file_imports_no_torch_dynamo():
    smoke = Path(__file__).resolve().parents[1] / "experiments" / "smoke.toml"   # README's first command's
    code = ("import json, sys\nfrom seq2seq_zoo.config import load_experiment\n"
            f"exp = load_experiment({str(smoke)!r})\n"
            "print(json.dumps(['torch._dynamo' in sys.modules, 'torch' in sys.modules, len(exp.runs)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    dynamo, torch_loaded, runs = json.loads(out.stdout.strip().splitlines()[-1])
    assert torch_loaded and runs >= 1 and not dynamo   # the models were built on meta, without dynamo
