"""Text normalisation, vocabulary, extended (copy) ids, collate, bucketing, and the corpus readers."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import make_encoded, tiny_encoded, write_dialogsum
from seq2seq_zoo.data.batching import bucket_batches, collate, encode_examples, iterate, unk_mapped
from seq2seq_zoo.data.corpora import DataError, Example, ReadStats, load_split, resolve_data_dir
from seq2seq_zoo.data.text import TextConfig, detokenize, normalise, tokenize
from seq2seq_zoo.data.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID, Vocab

NUM = TextConfig(num_token=True)


# ------------------------------------------------------------------------------------------------ text
def test_speaker_tags_stay_whole_and_other_text_is_lowercased():
    toks = tokenize("#Person1#: Hello THERE, Mr. Smith!\n#Person2#: I'm FINE.")
    assert toks == ["#Person1#", ":", "hello", "there", ",", "mr", ".", "smith", "!",
                    "#Person2#", ":", "i'm", "fine", "."]
    assert tokenize("Hello", TextConfig(lowercase=False)) == ["Hello"]


def test_normalise_collapses_whitespace_and_nfkc():
    assert normalise("  A\r\n\tB  ｃ ") == "a b c"          # full-width c -> c (NFKC), CRLF/tab -> space
    assert normalise("#Person1#: HI #Person2#") == "#Person1#: hi #Person2#"


def test_num_token_maps_digits_and_gigaword_hash_runs():
    assert tokenize("it cost 12 dollars", NUM) == ["it", "cost", "<num>", "dollars"]
    assert tokenize("it cost ## dollars", NUM) == ["it", "cost", "<num>", "dollars"]
    assert tokenize("up #### in 1999", NUM) == ["up", "<num>", "in", "<num>"]
    assert tokenize("rose 3.5 percent", NUM) == ["rose", "<num>", "percent"]
    # speaker tags are not numbers
    assert tokenize("#Person1#: 7 apples", NUM) == ["#Person1#", ":", "<num>", "apples"]
    # without the switch digits stay
    assert tokenize("it cost 12 dollars") == ["it", "cost", "12", "dollars"]


def test_gigaword_decimal_hash_run_is_one_number_like_a_digit_decimal():
    """Gigaword writes 3.5 as #.#; both must give the same tokens."""
    assert tokenize("rose #.# percent", NUM) == tokenize("rose 3.5 percent", NUM) == ["rose", "<num>", "percent"]


def test_corpus_unk_spelling_becomes_the_unk_token():
    """Gigaword writes unknown words as UNK; with the default lower-casing it must still map to <unk>."""
    assert tokenize("nec UNK in computer sales", TextConfig(lowercase=False)) == \
        ["nec", "<unk>", "in", "computer", "sales"]
    assert tokenize("nec UNK in computer sales") == ["nec", "<unk>", "in", "computer", "sales"]


def test_num_token_is_written_in_gigaword_digit_form_and_scores_like_the_reference():
    """With num_token the model writes <num>; predictions write it as '#', Gigaword's own digit form,
    which rouge-score drops like the references' '#' runs, instead of scoring a word "num"."""
    from rouge_score import rouge_scorer
    cfg = TextConfig(num_token=True)
    ref = "australian stocks close down #.# percent"
    toks = tokenize(ref, cfg)
    assert toks == ["australian", "stocks", "close", "down", "<num>", "percent"]
    pred = detokenize(toks)
    assert pred == "australian stocks close down # percent"
    score = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True).score(ref, pred)["rouge1"]
    assert score.precision == 1.0 and score.recall == 1.0


def test_detokenize_readable():
    assert detokenize(["hello", ",", "world", "!", "(", "yes", ")"]) == "hello, world! (yes)"


# ----------------------------------------------------------------------------------------------- vocab
def test_vocab_order_max_size_min_freq():
    docs = [["b", "a", "c", "a"], ["c", "a", "d", "<unk>"], ["e", "b"]]
    # counts: a 3, b 2, c 2, d 1, e 1 -> frequency then alphabetical
    v = Vocab.build(docs)
    assert v.itos == list(SPECIALS) + ["a", "b", "c", "d", "e"]
    assert Vocab.build(reversed(docs)).itos == v.itos          # corpus order does not matter
    assert Vocab.build(docs, max_size=6).itos == list(SPECIALS) + ["a", "b"]
    assert Vocab.build(docs, min_freq=2).itos == list(SPECIALS) + ["a", "b", "c"]
    assert len(Vocab.build(docs, max_size=6)) == 6
    assert v.encode(["a", "zzz", "e"]) == [4, UNK_ID, 8]


def test_vocab_save_load_roundtrip(tmp_path):
    v = Vocab.build([["x", "y", "y"]])
    v.save(tmp_path / "v.json")
    assert Vocab.load(tmp_path / "v.json").itos == v.itos
    with pytest.raises(ValueError):
        Vocab(["a", "b", "c", "d"])


def test_encode_ext_assigns_oov_ids_in_first_appearance_order():
    v = Vocab.build([["the", "cat", "sat"]])
    n = len(v)  # 7
    ids, oovs = v.encode_ext(["the", "zebra", "cat", "yak", "zebra", "sat", "ant"])
    assert oovs == ["zebra", "yak", "ant"]
    assert ids == [v.stoi["the"], n, v.stoi["cat"], n + 1, n, v.stoi["sat"], n + 2]
    tgt = v.encode_target_ext(["yak", "the", "owl", "ant", "zebra"], oovs)
    assert tgt == [n + 1, v.stoi["the"], UNK_ID, n + 2, n]
    assert v.decode(ids, oovs) == ["the", "zebra", "cat", "yak", "zebra", "sat", "ant"]
    assert v.decode([n + 5], oovs) == ["<unk>"]
    assert v.decode([BOS_ID, v.stoi["cat"], EOS_ID, v.stoi["the"]]) == ["cat"]


# ------------------------------------------------------------------------------------------- batching
def test_encode_examples_and_collate():
    v = Vocab.build([["hello", "world", "bob"]])
    n = len(v)
    exs = [Example("a", "hello zed world", ["zed says hello"]), Example("b", "bob", ["bob"])]
    enc = encode_examples(exs, v, TextConfig(), max_src=10, max_tgt=10)
    assert enc[0].oovs == ["zed"] and enc[0].src.tolist() == [v.stoi["hello"], UNK_ID, v.stoi["world"]]
    assert enc[0].src_ext.tolist() == [v.stoi["hello"], n, v.stoi["world"]]
    assert enc[0].tgt.tolist() == [UNK_ID, UNK_ID, v.stoi["hello"]]          # "says" unknown, not in source
    assert enc[0].tgt_ext.tolist() == [n, UNK_ID, v.stoi["hello"]]
    b = collate(enc)
    assert b.src.shape == (2, 3) and b.src_ext.shape == (2, 3)
    assert b.tgt_in.shape == b.tgt_out.shape == (2, 4)                         # max target 3 + 1
    assert b.src_len.tolist() == [3, 1]
    assert b.tgt_in[:, 0].tolist() == [BOS_ID, BOS_ID]
    assert b.tgt_in[0].tolist() == [BOS_ID, UNK_ID, UNK_ID, v.stoi["hello"]]  # extended id fed as <unk>
    assert b.tgt_out[0].tolist() == [n, UNK_ID, v.stoi["hello"], EOS_ID]
    assert b.tgt_in[1].tolist() == [BOS_ID, v.stoi["bob"], PAD_ID, PAD_ID]
    assert b.tgt_out[1].tolist() == [v.stoi["bob"], EOS_ID, PAD_ID, PAD_ID]
    assert b.src[1].tolist() == [v.stoi["bob"], PAD_ID, PAD_ID]
    assert b.n_oov == 1 and b.oovs == [["zed"], []]
    assert b.references == [["zed says hello"], ["bob"]]
    assert b.n_tokens() == 3 + 1 + 4 + 2
    assert unk_mapped(b.tgt_out, n).tolist()[0] == [UNK_ID, UNK_ID, v.stoi["hello"], EOS_ID]


def test_truncation_leaves_room_for_eos():
    v = Vocab.build([["a"]])
    enc = encode_examples([Example("x", "a a a a a a", ["a a a a a a a"])], v, TextConfig(), max_src=4, max_tgt=5)
    assert len(enc[0].src) == 4 and len(enc[0].tgt) == 4
    assert collate(enc).tgt_out.shape == (1, 5)


def _var_data(n=200, seed=0):
    g = np.random.default_rng(seed)
    return [make_encoded([5] * int(g.integers(1, 60)), [6] * int(g.integers(1, 20)), str(i)) for i in range(n)]


def _padding(data, batches):
    pad = 0
    for b in batches:
        c = collate([data[i] for i in b])
        pad += int((c.src == PAD_ID).sum() + (c.tgt_out == PAD_ID).sum())
    return pad


def test_bucket_batches_cover_each_index_once_and_are_deterministic():
    data = _var_data()
    b1 = bucket_batches(data, 8, seed=3, epoch=0)
    flat = sorted(i for b in b1 for i in b)
    assert flat == list(range(len(data)))
    assert all(1 <= len(b) <= 8 for b in b1)
    assert bucket_batches(data, 8, seed=3, epoch=0) == b1
    assert bucket_batches(data, 8, seed=3, epoch=1) != b1
    assert bucket_batches(data, 8, seed=4, epoch=0) != b1
    assert sorted(i for b in bucket_batches(data, 8, seed=3, epoch=1) for i in b) == flat


def test_bucket_batches_pad_less_than_random_batches():
    data = _var_data()
    bucketed = bucket_batches(data, 8, seed=0, epoch=0)
    perm = np.random.default_rng(0).permutation(len(data)).tolist()
    random_b = [perm[i:i + 8] for i in range(0, len(perm), 8)]
    assert _padding(data, bucketed) < 0.5 * _padding(data, random_b)


def test_bucket_batches_max_tokens_and_no_shuffle():
    data = _var_data(100, seed=1)
    bs = bucket_batches(data, 64, max_tokens=200, seed=0)
    assert sorted(i for b in bs for i in b) == list(range(100))
    for b in bs:
        longest = max(len(data[i].src) + len(data[i].tgt) for i in b)
        assert len(b) == 1 or longest * len(b) <= 200
    fixed = bucket_batches(data, 10, shuffle=False)
    assert fixed == bucket_batches(data, 10, shuffle=False, seed=9, epoch=5)
    ks = [k for k, _ in iterate(data, fixed, start=3)]
    assert ks == list(range(3, len(fixed)))


def test_token_batches_alone_fill_up_to_max_tokens_with_no_example_cap():
    data = _var_data(300, seed=2)
    lengths = [len(e.src) + len(e.tgt) for e in data]
    bs = bucket_batches(data, 0, max_tokens=1000, seed=0)
    assert sorted(i for b in bs for i in b) == list(range(300))
    padded = [max(lengths[i] for i in b) * len(b) for b in bs]
    assert all(len(b) == 1 or p <= 1000 for b, p in zip(bs, padded))
    # no example cap: the short examples make batches larger than the default 32, and every batch but
    # the last of its sorted pool (here one pool) is full: one more example would pass the budget
    assert max(len(b) for b in bs) > 32
    full = [p + max(lengths[i] for i in b) > 1000 for b, p in zip(bs, padded)]
    assert sum(full) >= len(bs) - 1
    assert bucket_batches(data, 0, max_tokens=1000, seed=0) == bs
    with pytest.raises(ValueError, match="max_tokens"):
        bucket_batches(data, 0)


# ---------------------------------------------------------------------------------------------- corpora
def test_dialogsum_reader_on_fixture(dialogsum_dir):
    train = load_split("dialogsum", dialogsum_dir, "train")
    val = load_split("dialogsum", dialogsum_dir, "validation")
    test = load_split("dialogsum", dialogsum_dir, "test")
    assert (len(train), len(val), len(test)) == (16, 4, 3)
    assert train[0].id == "train_0" and len(train[0].references) == 1
    assert train[0].source.startswith("#Person1#: Hello Amy")
    assert all(len(e.references) == 3 for e in test)
    assert test[0].references[1] == test[0].references[0].replace("buys", "gets")
    with pytest.raises(ValueError):
        load_split("dialogsum", dialogsum_dir, "dev")


def _write_jsonl(path: Path, lines: list[str]):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_malformed_json_line_names_file_and_line(tmp_path):
    p = tmp_path / "dialogsum" / "dialogsum.train.jsonl"
    good = json.dumps({"fname": "t0", "dialogue": "#Person1#: hi", "summary": "greeting"})
    _write_jsonl(p, [good, "", '{"fname": "t1", "dialogue": "oops"', good])
    with pytest.raises(DataError) as e:
        load_split("dialogsum", tmp_path, "train")
    assert f"{p}:3" in str(e.value)
    st = ReadStats()
    ok = load_split("dialogsum", tmp_path, "train", on_bad="skip", stats=st)
    assert len(ok) == 2 and st.skipped == {"malformed line": 1}


def test_empty_dialogue_is_skipped_and_counted(tmp_path):
    p = tmp_path / "dialogsum" / "dialogsum.train.jsonl"
    rows = [{"fname": "t0", "dialogue": "#Person1#: hi", "summary": "greeting"},
            {"fname": "t1", "dialogue": "   ", "summary": "nothing"},
            {"fname": "t2", "dialogue": "#Person1#: bye", "summary": ""}]
    _write_jsonl(p, [json.dumps(r) for r in rows])
    st = ReadStats()
    out = load_split("dialogsum", tmp_path, "train", stats=st)
    assert [e.id for e in out] == ["t0"]
    assert st.read == 1
    assert sum(st.skipped.values()) == 2 and st.skipped.get("empty or missing source") == 1
    with pytest.raises(DataError, match=r"dialogsum\.train\.jsonl:2"):
        load_split("dialogsum", tmp_path, "train", on_bad="error")


def test_samsum_reader(tmp_path):
    rows = [{"id": "13818513", "dialogue": "Amanda: I baked cookies.", "summary": "Amanda baked cookies."},
            {"id": "x", "dialogue": "", "summary": "empty"}]
    _write_jsonl(tmp_path / "samsum" / "samsum.val.jsonl", [json.dumps(r) for r in rows])
    st = ReadStats()
    out = load_split("samsum", tmp_path, "validation", stats=st)
    assert [(e.id, e.source, e.references) for e in out] == [("13818513", "Amanda: I baked cookies.",
                                                             ["Amanda baked cookies."])]
    assert sum(st.skipped.values()) == 1
    with pytest.raises(DataError, match="samsum.train.jsonl"):
        load_split("samsum", tmp_path, "train")


def test_gigaword_reader(tmp_path):
    d = tmp_path / "gigaword"
    d.mkdir()
    (d / "test.article.txt").write_text("japan 's nec corp. said ## UNK\nsecond article\n", encoding="utf-8")
    (d / "test.title.txt").write_text("nec UNK tie-up\nsecond title\n", encoding="utf-8")
    out = load_split("gigaword", tmp_path, "test")
    assert [(e.id, e.source, e.references) for e in out] == [
        ("test-0", "japan 's nec corp. said ## UNK", ["nec UNK tie-up"]),
        ("test-1", "second article", ["second title"])]
    (d / "valid.article.txt").write_text("a\nb\nc\n", encoding="utf-8")
    (d / "valid.title.txt").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(DataError, match="parallel"):
        load_split("gigaword", tmp_path, "validation")


def test_missing_data_dir_says_where_it_looked(tmp_path, monkeypatch):
    nowhere = tmp_path / "nowhere"
    with pytest.raises(DataError) as e:
        resolve_data_dir("dialogsum", flag=str(nowhere))
    msg = str(e.value)
    assert str(nowhere / "dialogsum") in msg and "--data-dir" in msg
    assert "zoo data download" in msg
    monkeypatch.setenv("ZOO_DATA", str(tmp_path / "env"))
    with pytest.raises(DataError, match="ZOO_DATA"):
        resolve_data_dir("dialogsum")
    monkeypatch.delenv("ZOO_DATA")
    with pytest.raises(DataError, match="data_dir in the experiment file"):
        resolve_data_dir("dialogsum", config=str(tmp_path / "cfg"))


def test_data_dir_resolution_order(tmp_path, monkeypatch):
    a, b = write_dialogsum(tmp_path / "a", 1, 1, 1), write_dialogsum(tmp_path / "b", 1, 1, 1)
    monkeypatch.setenv("ZOO_DATA", str(b))
    assert resolve_data_dir("dialogsum", flag=str(a), config=str(b)) == a
    assert resolve_data_dir("dialogsum", config=str(a)) == b          # the environment outranks the file
    monkeypatch.delenv("ZOO_DATA")
    monkeypatch.chdir(tmp_path)
    write_dialogsum(tmp_path / "data", 1, 1, 1)
    assert resolve_data_dir("dialogsum") == tmp_path / "data"          # ./data next


def test_cli_data_info_missing_dir_is_one_clear_line(tmp_path, capsys):
    from seq2seq_zoo.cli import main
    assert main(["data", "info", "dialogsum", "--data-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "zoo data download" in err[0] and "Traceback" not in err[0]


# ------------------------------------------------------------------------------------------ real data
def _real_dialogsum():
    try:
        return resolve_data_dir("dialogsum")
    except DataError as e:
        pytest.skip(f"real DialogSum not available ({e})")


def test_real_dialogsum_test_split_has_three_references():
    root = _real_dialogsum()
    test = load_split("dialogsum", root, "test")
    assert len(test) == 500
    assert all(len(e.references) == 3 and all(r.strip() for r in e.references) for e in test)
    assert len({e.id for e in test}) == 500
    toks = tokenize(test[0].source)
    assert toks[0] == "#Person1#" and "#Person2#" in toks


def test_real_dialogsum_first_32_encode():
    root = _real_dialogsum()
    val = load_split("dialogsum", root, "validation")[:32]
    vocab, _ = tiny_encoded(4)
    enc = encode_examples(val, vocab, TextConfig(), max_src=50, max_tgt=20)
    b = collate(enc)
    assert b.src.shape == (32, 50) and b.tgt_in.shape[1] <= 20
    assert (b.src_ext >= len(vocab)).any()  # plenty of words outside a tiny vocabulary get extended ids


# ------------------------------------------------------------------------------------ turn separators
def test_tokenize_source_puts_the_separator_between_non_empty_lines_only():
    from seq2seq_zoo.data.text import tokenize_source
    text = "Amanda: I baked cookies.\r\nJerry: Sure!\n\n  \rAmanda: OK\n"
    sep = TextConfig(turn_separator="<eot>")
    assert tokenize_source(text, sep) == ["amanda", ":", "i", "baked", "cookies", ".", "<eot>", "jerry", ":", "sure",
                                          "!", "<eot>", "amanda", ":", "ok"]
    assert tokenize_source(text, TextConfig()) == tokenize(text)            # no separator: lines are whitespace
    assert tokenize_source("one line only", sep) == ["one", "line", "only"]
    assert tokenize_source("\n\n", sep) == []


@pytest.mark.parametrize("sep, ok", [("<eot>", True), ("<turn_end>", True), ("|", True), ("<EOT>", False),
                                     ("two words", False), ("<unk>", False), ("<num>", False), ("<e0t>", False),
                                     ("", False)])
def test_separator_problem_accepts_only_a_lower_case_token_of_its_own(sep, ok):
    from seq2seq_zoo.data.text import separator_problem
    assert (separator_problem(sep) is None) == ok
    assert separator_problem(None) is None


def test_turn_separator_reaches_vocabulary_encoding_and_summarize_but_not_lead(tmp_path):
    """A tiny `zoo run` with data.turn_separator: the token is in the vocabulary and between the turns of
    every encoded source (tiny dialogues have 3 turns: 2 separators), the record says so, `zoo summarize`
    (Summarizer) and an exported copy encode new text the same way; the LEAD row still picks whole turns."""
    from conftest import run_cli, tiny_experiment
    from seq2seq_zoo.inference import Summarizer
    data_dir = write_dialogsum(tmp_path / "data", n_train=8, n_dev=2, n_test=2)
    runs = '[[runs]]\nname = "sep"\n\n[[runs]]\nname = "lead"\nmodel = "lead"\nunit = "turn"\nk = 1\n'
    toml = tmp_path / "sep.toml"
    toml.write_text(tiny_experiment("sep", runs, seeds=1, data_dir=data_dir, epochs=1,
                                    extra_defaults='data.turn_separator = "<eot>"'), encoding="utf-8")
    assert run_cli(["run", str(toml), "--results", str(tmp_path / "R"), "--no-progress"]) == 0
    run = tmp_path / "R" / "sep" / "sep"
    rec = json.loads((run / "record.json").read_text())
    assert rec["spec"]["data"]["turn_separator"] == "<eot>"
    vocab = Vocab.load(run / "checkpoints" / "vocab.json")
    assert "<eot>" in vocab.stoi
    src = json.loads((run / "attention.json").read_text())["source_tokens"]
    assert src.count("<eot>") == 2 and src[src.index("<eot>") + 1] == "#Person2#"
    assert run_cli(["export", str(run), str(tmp_path / "exported")]) == 0
    for summarizer in (Summarizer.from_run(run), Summarizer.load(tmp_path / "exported")):
        enc = summarizer._encode("#Person1#: hello\n#Person2#: hi")
        assert list(enc.src).count(vocab.stoi["<eot>"]) == 1
    lead = json.loads((tmp_path / "R" / "sep" / "lead" / "predictions.jsonl").read_text().splitlines()[0])
    assert "<eot>" not in json.dumps(lead) and lead["prediction"].startswith("#Person1#")


def test_a_turn_separator_that_is_not_one_token_is_one_line_naming_the_key(tmp_path, capsys):
    from conftest import run_cli, tiny_experiment
    toml = tmp_path / "bad.toml"
    toml.write_text(tiny_experiment("bad", '[[runs]]\nname = "a"\n', seeds=1,
                                    extra_defaults='data.turn_separator = "end of turn"'), encoding="utf-8")
    assert run_cli(["run", str(toml), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "data.turn_separator" in err and "<eot>" in err and "bad.toml" in err
