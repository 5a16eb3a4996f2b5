"""The registry: `zoo list`, discovery by pattern, and the "a new model is one file" promise."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from conftest import tiny_encoded
from seq2seq_zoo.cli import main
from seq2seq_zoo.config import DecodeConfig, TrainConfig
from seq2seq_zoo.data.batching import collate
from seq2seq_zoo.decode import beam_search, greedy
from seq2seq_zoo.models.base import Seq2Seq, StepOutput, build_model
from seq2seq_zoo.registry import MODELS, Registry, UnknownName, create_model, list_models, register_model
from seq2seq_zoo.train.loop import fit, validation_loss


@register_model("zz_test_bag_of_words")
class BagOfWords(Seq2Seq):
    """A test model: the mean source embedding plus the previous word predicts the next word."""

    def __init__(self, vocab_size: int, d_model: int = 16, max_tgt_len: int = 32):
        super().__init__()
        self.vocab_size, self.d_model = vocab_size, d_model
        self.src_emb = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.tgt_emb = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.out = nn.Linear(2 * d_model, vocab_size)
        self.max_tgt_len = max_tgt_len

    def _context(self, src):
        m = (src != 0).float().unsqueeze(-1)
        return (self.src_emb(src) * m).sum(1) / m.sum(1).clamp(min=1)

    def forward(self, batch, need_attention=False):
        ctx = self._context(batch.src)
        h = torch.cat([self.tgt_emb(self.feed(batch.tgt_in)), ctx[:, None].expand(-1, batch.tgt_in.size(1), -1)], -1)
        return StepOutput(self.out(torch.tanh(h)).log_softmax(-1))

    def encode(self, batch):
        return {"ctx": self._context(batch.src)}

    def decode_step(self, state, prev):
        h = torch.cat([self.tgt_emb(self.feed(prev)), state["ctx"]], -1)
        return self.out(torch.tanh(h)).log_softmax(-1), state


def test_zoo_list_shows_the_registries(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for section in ("models:", "datasets:", "metrics:", "schedules:", "objectives:"):
        assert section in out
    for name in ("transformer", "dialogsum", "samsum", "gigaword", "rouge", "noam", "constant", "ce"):
        assert f"  {name} " in out, name
    assert main(["list", "models", "--pattern", "trans*"]) == 0
    out = capsys.readouterr().out
    assert "transformer" in out and "dialogsum" not in out and "zz_test_bag_of_words" not in out


def test_names_pattern_filters():
    assert "transformer" in list_models()
    assert list_models("zz_test_*") == ["zz_test_bag_of_words"]
    assert list_models("nothing-like-this*") == []
    assert MODELS.names("*former") == ["transformer"]
    assert MODELS.doc("zz_test_bag_of_words").startswith("A test model")


def test_registry_errors_suggest_the_nearest_name():
    r = Registry("thing")
    r.register("alpha")(lambda: 1)
    with pytest.raises(UnknownName, match="Did you mean 'alpha'"):
        r.get("alpah")
    with pytest.raises(ValueError, match="registered twice"):
        r.register("alpha")(lambda: 2)
    assert r.create("alpha") == 1 and "alpha" in r


def test_new_model_builds_trains_and_decodes(tmp_path):
    vocab, data = tiny_encoded(12)
    model = build_model("zz_test_bag_of_words", {"vocab_size": len(vocab), "max_src_len": 64, "max_tgt_len": 24},
                        {"d_model": 12})
    assert isinstance(model, BagOfWords) and model.vocab_size == len(vocab) and model.d_model == 12
    assert model.max_tgt_len == 24  # context keys the model asks for are filled in
    assert isinstance(create_model("zz_test_bag_of_words", vocab_size=10), BagOfWords)
    with pytest.raises(TypeError, match="d_model"):
        build_model("zz_test_bag_of_words", {"vocab_size": 10}, {"d_modle": 3})
    before = validation_loss(model, data, 8, torch.device("cpu"), None)
    cfg = TrainConfig(epochs=6, batch_size=4, lr=0.02, precision="fp32", clip_norm=1.0)
    st = fit(model, data, data, cfg, seed=0, ckpt_dir=tmp_path / "ck", device=torch.device("cpu"), progress=False,
             log=lambda s: None)
    assert st.finished and len(st.history) == 6
    assert st.history[-1]["val_loss"] < 0.7 * before
    batch = collate(data[:3])
    cfg_d = DecodeConfig(beam_size=1, max_len=10)
    assert greedy(model.eval(), batch, cfg_d) == beam_search(model, batch, cfg_d)


def test_new_model_is_accepted_by_experiment_files(tmp_path):
    from seq2seq_zoo.config import ConfigError, load_experiment
    p = tmp_path / "e.toml"
    p.write_text('[experiment]\nname = "x"\n[defaults]\nmodel = "zz_test_bag_of_words"\nd_model = 8\n'
                 '[[runs]]\nname = "a"\n', encoding="utf-8")
    assert load_experiment(p).runs[0].model_options == {"d_model": 8}
    p.write_text('[experiment]\nname = "x"\n[defaults]\nmodel = "zz_test_bag_of_words"\nheads = 8\n'
                 '[[runs]]\nname = "a"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="heads"):
        load_experiment(p)
