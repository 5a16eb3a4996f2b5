"""Your own files (jsonl / csv / tsv) and Hugging Face datasets as sources, their options in experiment
files, their errors, and `zoo data info`."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from seq2seq_zoo.cli import main
from seq2seq_zoo.config import ConfigError, load_experiment
from seq2seq_zoo.data.corpora import DataError, ReadStats, load_split, resolve_data_dir

SPLITS = ("train", "validation", "test")


def write_jsonl(folder: Path, n: int = 6) -> dict:
    """Files with custom field names, two references per example (one field holds a list)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for s in SPLITS:
        rows = [{"doc_id": f"{s}{i}", "document": f"the {s} document number {i} is here .",
                 "abstract": f"{s} doc {i} .", "more": [f"another summary {i} ."]} for i in range(n)]
        p = folder / f"{s}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        files[s] = str(p)
    return files


def opts(files, **kw):
    return {**files, "source": "document", "target": ["abstract", "more"], "id": "doc_id", **kw}


def test_jsonl_custom_fields_and_two_references(tmp_path):
    files = write_jsonl(tmp_path / "c")
    st = ReadStats()
    ex = load_split("jsonl", tmp_path, "validation", stats=st, options=opts(files))
    assert [e.id for e in ex] == [f"validation{i}" for i in range(6)]
    assert ex[2].source == "the validation document number 2 is here ."
    assert ex[2].references == ["validation doc 2 .", "another summary 2 ."]
    assert st.notes["fields"] == {"source": "document", "target": ["abstract", "more"], "id": "doc_id"}
    # one target field, no id field: ids are <file>-<line>
    one = load_split("jsonl", tmp_path, "test", options={**files, "source": "document", "target": "abstract"})
    assert one[0].id == "test-1" and one[0].references == ["test doc 0 ."]


def test_jsonl_missing_field_malformed_line_empty_source_latin1(tmp_path):
    files = write_jsonl(tmp_path / "c")
    p = Path(files["train"])
    with open(p, "ab") as f:
        f.write(b'{"doc_id": "m", "document": "text without a summary"}\n')
    with pytest.raises(DataError) as e:
        load_split("jsonl", tmp_path, "train", options=opts(files))
    assert f"{p}:7: missing field 'abstract'" in str(e.value)
    with open(p, "ab") as f:
        f.write(b'{"doc_id": "x", "document": \n')
        f.write('{"doc_id": "l", "document": "caf\u00e9", "abstract": "a", "more": []}\n'.encode("latin-1"))
        f.write(b'{"doc_id": "e", "document": "", "abstract": "a", "more": []}\n')
    st = ReadStats()
    ex = load_split("jsonl", tmp_path, "train", "skip", st, opts(files))
    assert len(ex) == 6 and st.skipped == {"missing field": 1, "malformed line": 2, "empty or missing source": 1}
    # latin-1 file read with the encoding option
    q = tmp_path / "l.jsonl"
    q.write_bytes('{"document": "caf\u00e9 au lait", "abstract": "caf\u00e9"}\n'.encode("latin-1"))
    o = {**files, "train": str(q), "source": "document", "target": "abstract"}
    with pytest.raises(DataError, match=rf"{q}:1: bytes that are not utf-8.*data.options.encoding"):
        load_split("jsonl", tmp_path, "train", options=o)
    assert load_split("jsonl", tmp_path, "train", options={**o, "encoding": "latin-1"})[0].source == "caf\u00e9 au lait"


@pytest.mark.parametrize("fmt, sep", [("csv", ","), ("tsv", "\t")])
def test_csv_tsv_columns_errors_and_encoding(tmp_path, fmt, sep):
    files = {}
    for s in SPLITS:
        p = tmp_path / f"{s}.{fmt}"
        lines = [sep.join(["key", "body", "gist1", "gist2"])]
        lines += [sep.join([f"{s}{i}", f'"body {i}{sep} with the delimiter"', f"gist {i}", f"other {i}"]) for i in range(4)]
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        files[s] = str(p)
    o = {**files, "source": "body", "target": ["gist1", "gist2"], "id": "key"}
    ex = load_split(fmt, tmp_path, "test", options=o)
    assert [e.id for e in ex] == [f"test{i}" for i in range(4)]
    assert ex[1].source == f"body 1{sep} with the delimiter" and ex[1].references == ["gist 1", "other 1"]
    with pytest.raises(DataError, match=rf"{files['test']}:2: missing field 'summary'"):
        load_split(fmt, tmp_path, "test", options={**o, "target": "summary"})
    p = Path(files["train"])
    with open(p, "ab") as f:
        f.write(sep.join(["bad", "only two"]).encode() + b"\n")
    with pytest.raises(DataError, match=rf"{p}:6: malformed row"):
        load_split(fmt, tmp_path, "train", options=o)
    st = ReadStats()
    assert len(load_split(fmt, tmp_path, "train", "skip", st, o)) == 4 and st.skipped == {"malformed line": 1}
    with open(p, "ab") as f:
        f.write(sep.join(["l", "caf\u00e9", "g", "h"]).encode("latin-1") + b"\n")
    with pytest.raises(DataError, match=rf"{p}:7: bytes that are not utf-8.*encoding"):
        load_split(fmt, tmp_path, "train", "skip", options=o)
    ex = load_split(fmt, tmp_path, "train", "skip", options={**o, "encoding": "latin-1"})
    assert ex[-1].source == "caf\u00e9"


def test_csv_field_longer_than_csv_default_limit(tmp_path):
    """A whole article in one field (csv's default limit is 131,072 characters)."""
    files = {}
    for s in SPLITS:
        p = tmp_path / f"{s}.csv"
        p.write_text("body,gist\n" + '"' + "word " * 40000 + '",short\n', encoding="utf-8")
        files[s] = str(p)
    ex = load_split("csv", tmp_path, "train", options={**files, "source": "body", "target": "gist"})
    assert len(ex[0].source) == 200000


# ------------------------------------------------------------------------------ experiment-file options
EXP = """[experiment]
name = "own"
dataset = "{dataset}"

[defaults]
model = "gru"
hidden = 8
emb_dim = 8

[defaults.data.options]
{options}
"""


def _exp(tmp_path, dataset, options: str) -> Path:
    p = tmp_path / "own.toml"
    p.write_text(EXP.format(dataset=dataset, options=options), encoding="utf-8")
    return p


def test_options_in_experiment_file_checked_with_file_line_and_key(tmp_path):
    files = write_jsonl(tmp_path / "c")
    good = "\n".join(f'{s} = "{files[s]}"' for s in SPLITS) + '\nsource = "document"\ntarget = ["abstract", "more"]'
    spec = load_experiment(_exp(tmp_path, "jsonl", good)).runs[0]
    assert spec.data.options["target"] == ["abstract", "more"]
    assert resolve_data_dir("jsonl", None, None, spec.data.options) == Path.cwd()
    cases = [
        ("jsonl", good + '\nsorce = "x"', "own.toml:16: runs[0].data.options.sorce", "Did you mean 'source'?"),
        ("jsonl", good.replace(files["test"], str(tmp_path / "nope.jsonl")), "own.toml:13: runs[0].data.options.test",
         "not found"),
        ("jsonl", good + "\nid = 3", "runs[0].data.options.id", "expected str"),
        ("inshorts", "split_fractions = [0.8, 0.1]", "data.options.split_fractions", "sum to 1"),
        ("inshorts", 'target = "title"', "data.options.target", "text, headlines"),
        ("dialogsum", "x = 1", "data.options.x", "takes no options"),
        ("cnn_dailymail", 'cnn_ids = "ids.txt"', "data.options.cnn_ids", "goes with cnn_only = true"),
        ("cnn_dailymail", 'cnn_only = true\ncnn_ids = "nope.txt"', "data.options.cnn_ids", "not found"),
        ("hf", 'source = "a"\ntarget = "b"', "data.options.path", "save_to_disk"),
    ]
    for dataset, options, where, what in cases:
        with pytest.raises(ConfigError) as e:
            load_experiment(_exp(tmp_path, dataset, options))
        assert where in str(e.value) and what in str(e.value), str(e.value)


def test_inline_options_table_errors_name_the_line(tmp_path):
    p = tmp_path / "e.toml"
    p.write_text('[experiment]\nname = "e"\n\n[defaults]\nmodel = "gru"\ndata.dataset = "inshorts"\n'
                 'data.options = { target = "text", min_source_chars = -1 }\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"e\.toml:7: runs\[0\]\.data\.options\.min_source_chars: -1 must be >= 0"):
        load_experiment(p)


def test_zoo_data_info_on_own_files_and_experiment(tmp_path, capsys):
    files = write_jsonl(tmp_path / "c")
    args = ["data", "info", "jsonl"] + [f"--option={s}={files[s]}" for s in SPLITS] + \
           ["--option", "source=document", "--option", 'target=["abstract", "more"]', "--option", "id=doc_id"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "train            6 examples" in out and f"from {files['test']}" in out
    assert "fields: source = document; target = ['abstract', 'more']; id = doc_id" in out
    assert main(["data", "info", "jsonl", "--option", "source=document"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "data option 'train'" in err
    toml = _exp(tmp_path, "jsonl", "\n".join(f'{s} = "{files[s]}"' for s in SPLITS) +
                '\nsource = "document"\ntarget = "abstract"')
    assert main(["data", "info", str(toml)]) == 0
    assert "test             6 examples" in capsys.readouterr().out


# ------------------------------------------------------------------------------------- Hugging Face
def test_hf_without_datasets_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)   # `import datasets` raises ImportError
    o = {"path": str(tmp_path / "saved"), "source": "a", "target": "b"}
    with pytest.raises(DataError, match=r'pip install -e "\.\[hf\]"'):
        load_split("hf", tmp_path, "train", options=o)
    with pytest.raises(DataError, match="datasets"):
        load_split("cnn_dailymail", tmp_path, "train", options={"hf": "abisee/cnn_dailymail"})
    assert main(["data", "info", "hf", "--option", f"path={tmp_path}", "--option", "source=a",
                 "--option", "target=b"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and '.[hf]' in err


@pytest.fixture
def saved_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    dd = datasets.DatasetDict({s: datasets.Dataset.from_dict({
        "document": [f"{s} text {i} about things ." for i in range(5)] + [""],
        "summary": [f"{s} sum {i}" for i in range(6)],
        "key": [f"{s}-k{i}" for i in range(6)]}) for s in ("train", "dev", "test")})
    path = tmp_path / "saved"
    dd.save_to_disk(str(path))
    return path


def test_hf_saved_to_disk_with_split_names_and_fields(saved_dataset, tmp_path):
    o = {"path": str(saved_dataset), "splits": {"validation": "dev"}, "source": "document", "target": "summary",
         "id": "key"}
    st = ReadStats()
    ex = load_split("hf", tmp_path, "validation", stats=st, options=o)
    assert [e.id for e in ex] == [f"dev-k{i}" for i in range(5)] and ex[0].references == ["dev sum 0"]
    assert st.skipped == {"empty or missing source": 1} and st.notes["sizes_in_source"] == {"validation": 6}
    with pytest.raises(DataError, match="no split 'validation'.*data.options.splits"):
        load_split("hf", tmp_path, "validation", options={**o, "splits": {}})
    with pytest.raises(DataError, match="no column 'abstract'.*columns: document, summary, key"):
        load_split("hf", tmp_path, "test", options={**o, "target": "abstract"})


def test_hf_load_dataset_json_data_files(tmp_path):
    pytest.importorskip("datasets")
    files = write_jsonl(tmp_path / "c", n=4)
    o = {"path": "json", "data_files": {"train": files["train"], "dev": files["validation"], "test": files["test"]},
         "splits": {"validation": "dev"}, "source": "document", "target": ["abstract", "more"], "id": "doc_id",
         "cache_dir": str(tmp_path / "cache")}
    ex = load_split("hf", tmp_path, "validation", options=o)
    assert [e.id for e in ex] == [f"validation{i}" for i in range(4)]
    assert ex[3].references == ["validation doc 3 .", "another summary 3 ."]
    assert (tmp_path / "cache").is_dir()


def test_cnn_dailymail_through_hf_option(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"article": ["(CNN) -- one story .", "By . Daily Mail Reporter . two ."],
            "highlights": ["first .\nsecond .\nthird .", "dm ."], "id": ["a1", "b2"]}
    dd = datasets.DatasetDict({s: datasets.Dataset.from_dict(rows) for s in SPLITS})
    dd.save_to_disk(str(tmp_path / "cnn"))
    o = {"hf": str(tmp_path / "cnn"), "hf_config": "", "cnn_only": True, "max_highlights": 2}
    assert resolve_data_dir("cnn_dailymail", None, None, o) == Path.cwd()   # no local cnn_dailymail/ needed
    st = ReadStats()
    ex = load_split("cnn_dailymail", tmp_path, "test", stats=st, options=o)
    assert [(e.id, e.references) for e in ex] == [("a1", ["first .\nsecond ."])]
    assert sum(st.skipped.values()) == 1


def test_zoo_list_datasets_shows_reader_options(capsys):
    assert main(["list", "datasets"]) == 0
    out = capsys.readouterr().out
    assert "options: source='ctext', target='text', min_source_chars=0" in out          # inshorts
    assert "options: cnn_only=False, cnn_ids='', max_highlights=0" in out   # cnn_dailymail
    assert "options: train='', validation='', test='', source=''" in out # jsonl / csv / tsv


def test_data_not_found_names_each_folder_once(tmp_path, monkeypatch):
    """Run from the repository itself, the working-directory and package defaults are one folder: the
    message lists it once."""
    from seq2seq_zoo.data import corpora
    monkeypatch.delenv("ZOO_DATA", raising=False)
    monkeypatch.setattr(corpora, "_REPO", tmp_path / "repo")
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    with pytest.raises(DataError) as e:
        resolve_data_dir("dialogsum")
    msg = str(e.value)
    listed = msg.split("looked in: ")[1].split(". Get it")[0].split("; ")
    assert listed == [f"{tmp_path / 'repo' / 'data' / 'dialogsum'} (default)",
                      f"{tmp_path / 'shared' / 'data' / 'dialogsum'} (default)"]
