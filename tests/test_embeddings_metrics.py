"""Pretrained / word2vec embeddings, UNK and repetition ratios, and `zoo params`."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import tiny_experiment, write_dialogsum
from seq2seq_zoo import embeddings
from seq2seq_zoo.data.vocab import Vocab
from seq2seq_zoo.metrics import STOP_WORDS, repetition, repetition_ratio, unk_ratio


@pytest.fixture
def vocab():
    return Vocab.build([["cat", "dog", "sat", "mat", "zebra"]])


def test_glove_file_rows_are_copied_and_coverage_counted(tmp_path, vocab):
    glove = tmp_path / "glove.4d.txt"  # exact GloVe text format: word then floats, no header
    glove.write_text("cat 0.1 0.2 0.3 0.4\ndog -1 -2 -3 -4\nunrelated 9 9 9 9\nmat 0.5 0.5 0.5 0.5\n")
    mat, info = embeddings.resolve(f"pretrained:{glove}", vocab, 4, None)
    assert mat.shape == (len(vocab), 4)
    assert torch.allclose(mat[vocab.stoi["cat"]], torch.tensor([0.1, 0.2, 0.3, 0.4]))
    assert torch.allclose(mat[vocab.stoi["dog"]], torch.tensor([-1.0, -2.0, -3.0, -4.0]))
    assert torch.equal(mat[0], torch.zeros(4))                     # <pad> row stays zero
    assert info["found"] == 3 and info["vocab"] == 5
    assert info["coverage"] == pytest.approx(3 / 5)


def test_glove_dimension_mismatch_and_missing_file_are_clear(tmp_path, vocab):
    glove = tmp_path / "g.txt"
    glove.write_text("cat 0.1 0.2 0.3\n")
    with pytest.raises(embeddings.EmbeddingError, match="3-dimensional.*emb_dim = 3"):
        embeddings.resolve(f"pretrained:{glove}", vocab, 4, None)
    with pytest.raises(embeddings.EmbeddingError, match="not found"):
        embeddings.resolve(f"pretrained:{tmp_path / 'nope.txt'}", vocab, 4, None)
    with pytest.raises(embeddings.EmbeddingError, match="word2vec"):
        embeddings.resolve("glove", vocab, 4, None)


def test_word2vec_trains_on_the_corpus_and_is_reused_from_cache(tmp_path, monkeypatch, vocab):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    sents = [["the", "cat", "sat", "on", "the", "mat"], ["the", "dog", "sat"]] * 20
    m1, i1 = embeddings.resolve("word2vec", vocab, 8, sents, seed=3)
    assert not i1["from_cache"] and i1["found"] == 4            # zebra never occurs in the corpus
    assert len(list((tmp_path / "cache").glob("word2vec-*.txt"))) == 1
    m2, i2 = embeddings.resolve("word2vec", vocab, 8, sents, seed=3)
    assert i2["from_cache"] and i2["cache"] == i1["cache"]
    assert torch.allclose(m1, m2, atol=1e-5)
    # another corpus is another cache entry
    embeddings.resolve("word2vec", vocab, 8, sents[:10], seed=3)
    assert len(list((tmp_path / "cache").glob("word2vec-*.txt"))) == 2


def test_unk_ratio_pools_word_tokens():
    s, _ = unk_ratio(["the <unk> sat .", "<unk> <unk> dog"], [["x"], ["y"]])
    assert s["unk_ratio"] == pytest.approx(3 / 6)               # punctuation is not a word token


def test_repetition_ratio_with_and_without_stop_words():
    assert repetition_ratio(["a", "b", "a", "a"]) == pytest.approx(2 / 4)
    assert repetition_ratio([]) == 0.0
    assert {"the", "of", "is"} <= STOP_WORDS
    s, st = repetition(["the cat and the cat", "dog dog dog"], [["the cat"], ["a dog"]])
    # 1: 5 words, 3 distinct -> 2/5; content: cat cat -> 1/2. 2: 3 words, 1 distinct -> 2/3 (both)
    assert s["repetition"] == pytest.approx((2 / 5 + 2 / 3) / 2)
    assert s["repetition_content"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert s["ref_repetition"] == 0.0
    assert "stop-words" in st["definition"]


def test_zoo_params_prints_per_component_counts(tmp_path, capsys):
    from seq2seq_zoo.cli import main
    from seq2seq_zoo.models.base import build_model, count_parameters
    from seq2seq_zoo.runner import prepare_data
    from seq2seq_zoo.config import load_experiment
    data = write_dialogsum(tmp_path / "data")
    toml = tmp_path / "p.toml"
    toml.write_text(tiny_experiment("p", '[[runs]]\nname = "tied"\n[[runs]]\nname = "untied"\ntie_embeddings = false\n',
                                    seeds=1))
    assert main(["params", str(toml), "--data-dir", str(data), "--profile", "none"]) == 0
    out = capsys.readouterr().out
    spec = load_experiment(toml).runs[1]
    vocab = prepare_data(spec, str(data), log=lambda *_: None)[0]
    m = build_model("transformer", {"vocab_size": len(vocab), "max_src_len": 64, "max_tgt_len": 24},
                    spec.model_options)
    counts = count_parameters(m)
    row = next(line for line in out.splitlines() if line.startswith("| untied"))
    assert f"{counts['total']:,}" in row and f"{counts['embedding']:,}" in row
    assert counts["embedding"] == 2 * len(vocab) * 16               # separate source and target tables
    assert np.isclose(counts["total"], sum(p.numel() for p in m.parameters()))
