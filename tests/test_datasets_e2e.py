"""`zoo run` end to end on each new dataset at a tiny size: fixture corpora for cnn_dailymail, inshorts,
your own jsonl / tsv files and a saved Hugging Face dataset; and the two experiment files on the staged
corpora with a tiny profile appended."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from conftest import figures_unrendered, tiny_pairs

from seq2seq_zoo.cli import main
from seq2seq_zoo.data.corpora import DataError, resolve_data_dir

REPO = Path(__file__).resolve().parents[1]

EXP = """[experiment]
name = "ds_{tag}"
dataset = "{dataset}"
metrics = ["rouge"]
seeds = [2]
{data_dir}

[defaults]
model = "bahdanau"
emb_dim = 16
hidden = 16
data.max_src_len = 48
data.max_tgt_len = 20
data.options = {options}
train.epochs = 3
train.batch_size = 8
train.lr = 0.01
train.precision = "fp32"
train.threads = 1
decode.beam_size = 2
decode.max_len = 16

[[runs]]
name = "tiny"
"""


def _fixture(tag: str, root: Path) -> tuple[str, str, str]:
    """(dataset, data.options as inline TOML, data_dir line) for a tiny corpus of the given kind."""
    pairs = {s: tiny_pairs(n, off) for s, n, off in (("train", 24, 0), ("validation", 4, 1), ("test", 4, 2))}
    root.mkdir(parents=True, exist_ok=True)
    if tag == "cnn_dailymail":
        d = root / "cnn_dailymail"
        d.mkdir()
        for s, ps in pairs.items():
            rows = [{"id": f"{s}{i}", "article": "(CNN) -- " + a, "highlights": b + "\nsecond line ."}
                    for i, (a, b) in enumerate(ps)]
            (d / f"cnn_dailymail.{s}.part1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return "cnn_dailymail", "{ cnn_only = true, max_highlights = 1 }", f'data_dir = "{root}"'
    if tag == "inshorts":
        import csv
        d = root / "inshorts"
        d.mkdir()
        with open(d / "news_summary.utf8.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["author", "date", "headlines", "read_more", "text", "ctext"])
            for a, b in tiny_pairs(60):
                w.writerow(["a", "d", "h", "u", b, a])
            w.writerow(["a", "d", "h", "u", "summary of an empty article", ""])
        return "inshorts", "{ split_fractions = [0.6, 0.2, 0.2], split_seed = 3 }", f'data_dir = "{root}"'
    if tag in ("jsonl", "csv", "tsv"):
        import csv
        files = {}
        for s, ps in pairs.items():
            p = root / f"{s}.{tag}"
            if tag == "jsonl":
                p.write_text("".join(json.dumps({"text": a, "gist": b, "alt": b.upper()}) + "\n" for a, b in ps))
            else:
                with open(p, "w", newline="", encoding="utf-8") as f:
                    w = csv.writer(f, delimiter="," if tag == "csv" else "\t")
                    w.writerow(["text", "gist", "alt"])
                    w.writerows([a, b, b.upper()] for a, b in ps)   # multi-line dialogues: quoted fields
            files[s] = str(p)
        opts = ", ".join(f'{s} = "{files[s]}"' for s in files)
        return tag, f'{{ {opts}, source = "text", target = ["gist", "alt"] }}', ""
    if tag == "hf":
        datasets = pytest.importorskip("datasets")
        dd = datasets.DatasetDict({s: datasets.Dataset.from_dict({"doc": [a for a, _ in ps], "sum": [b for _, b in ps]})
                                   for s, ps in pairs.items()})
        dd.save_to_disk(str(root / "saved"))
        return "hf", f'{{ path = "{root / "saved"}", source = "doc", target = "sum" }}', ""
    raise AssertionError(tag)


@pytest.mark.parametrize("tag", ["cnn_dailymail", "inshorts", "jsonl", "csv", "tsv", "hf"])
def test_zoo_run_end_to_end_on_each_new_dataset(tmp_path, tag):
    dataset, options, data_dir = _fixture(tag, tmp_path / "data")
    toml = tmp_path / f"{tag}.toml"
    toml.write_text(EXP.format(tag=tag, dataset=dataset, options=options, data_dir=data_dir), encoding="utf-8")
    threads = torch.get_num_threads()
    with figures_unrendered():   # template text: the staged corpora below render their real words
        rc = main(["run", str(toml), "--results", str(tmp_path / "R"), "--no-progress"])
    torch.set_num_threads(threads)
    assert rc == 0
    run = tmp_path / "R" / f"ds_{tag}" / "tiny"
    rec = json.loads((run / "record.json").read_text())
    hist = rec["train"]["history"]
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]          # it learns
    preds = [json.loads(x) for x in (run / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == rec["data"]["sizes"]["test"] > 0
    assert "rouge1" in rec["eval"]["scores"]
    reader = rec["data"]["reader"]["train"]
    assert reader["files"] and reader["fields"]
    if tag in ("jsonl", "csv", "tsv"):
        assert all(len(p["references"]) == 2 for p in preds)
    if tag == "inshorts":
        assert rec["data"]["skipped"] == {"test": {"empty or missing source": 1}} or \
            sum(sum(v.values()) for v in rec["data"]["skipped"].values()) == 1
        assert rec["data"]["reader"]["test"]["split"]["seed"] == 3
    if tag == "cnn_dailymail":
        assert all("\n" not in r for p in preds for r in p["references"])   # first highlight only
    assert (tmp_path / "R" / f"ds_{tag}" / "table.md").is_file()
    # train and validation loss per epoch, as a training-log table (loss.csv)
    import csv
    rows = list(csv.DictReader(open(tmp_path / "R" / f"ds_{tag}" / "loss.csv")))
    assert [(r["run"], int(r["epoch"])) for r in rows] == [("tiny", h["epoch"]) for h in hist]
    assert [float(r["train_loss"]) for r in rows] == pytest.approx([h["train_loss"] for h in hist])
    assert [float(r["val_loss"]) for r in rows] == pytest.approx([h["val_loss"] for h in hist])


SIZES = {"train": 32, "validation": 4, "test": 4}
TINY = f"""
[profiles.tiny]
{{extra}}
data.max_train = {SIZES["train"]}
data.max_valid = {SIZES["validation"]}
data.max_test = {SIZES["test"]}
data.vocab_size = 2000
train.epochs = 2
train.threads = 1
eval.metrics = ["rouge"]
eval.examples_per_split = 1
decode.beam_size = 2
"""


E2E = {  # experiment: (tiny profile settings (no model options: the runs mix models), dataset, LEAD rows,
         # trained models in file order)
    "inshorts_transformer": ('data.max_src_len = 48\ndata.max_tgt_len = 24\ntrain.accum_steps = 2\n'
                             'train.batch_size = 8\ntrain.warmup = 8\ndecode.min_len = 5\ndecode.max_len = 16',
                             "inshorts", ("lead60", "lead"),
                             ["transformer", "transformer_pointer", "pointer_generator", "pointer_generator"]),
    "inshorts_headline": ('train.batch_size = 8\ntrain.warmup = 4\ndecode.max_len = 12', "inshorts", ("lead",),
                          ["transformer", "transformer_pointer", "pointer_generator"]),
    "cnn_pointer": ('hidden = 32\nemb_dim = 32\ndata.max_src_len = 48\ndata.max_tgt_len = 24\n'
                    'train.batch_size = 8\ndecode.min_len = 3\ndecode.max_len = 16',
                    "cnn_dailymail_see", ("lead",),
                    ["bilstm"] + ["pointer_generator"] * 5),
}


def tiny_version(text: str) -> str:
    """An experiment file's text made to run at the tiny profile: one seed; the runs' own cpu-profile
    tables (their model sizes) read under the tiny profile, less what would outweigh it there: their epoch
    counts (30 epochs until validation stops improving), warm-ups and batch sizes (400 updates, 32 pairs:
    32 pairs would be one update an epoch at a near-zero learning rate) and the SCST phases' 48-token
    rollouts (16 here: the test runs the phases, not their length)."""
    text = re.sub(r"(?m)^seeds = \[[0-9, ]*\]", "seeds = [1]", text).replace("[runs.profiles.cpu]", "[runs.profiles.tiny]")
    text = re.sub(r"(?m)^train\.(warmup|batch_size|accum_steps) = .*\n", "", text)
    text = re.sub(r"(scst = \{[^}]*\bmax_len = )[0-9]+", r"\g<1>16", text)
    out, table = [], ""
    for line in text.splitlines(keepends=True):
        if line.startswith("["):
            table = line.split("#")[0].strip()
        if not (table == "[runs.profiles.tiny]" and re.match(r"train\.epochs\s*=", line)):
            out.append(line)
    return "".join(out)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(E2E))
def test_experiment_file_runs_end_to_end_on_the_staged_corpus(tmp_path, name):
    """The committed experiment file, every run (seed 1), with a tiny profile appended (the staged data)."""
    extra, dataset, leads, models = E2E[name]
    try:
        resolve_data_dir(dataset)
    except DataError:
        pytest.skip(f"staged {dataset} not available")
    text = tiny_version((REPO / "experiments" / f"{name}.toml").read_text(encoding="utf-8"))
    toml = tmp_path / f"{name}.toml"
    toml.write_text(text + TINY.format(extra=extra), encoding="utf-8")
    threads = torch.get_num_threads()
    rc = main(["run", str(toml), "--profile", "tiny", "--results", str(tmp_path / "R"), "--no-progress"])
    torch.set_num_threads(threads)
    assert rc == 0
    recs = {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "R" / name).glob("*/record.json")}
    for lead_name in leads:
        lead = recs.pop(lead_name)
        assert lead["spec"]["model"] == "lead" and lead["eval"]["scores"]["rouge1"] > 0   # the LEAD rows
    assert (tmp_path / "R" / name / "findings.json").is_file()
    recs = [recs[k] for k in sorted(recs, key=lambda k: recs[k]["order"])]
    assert [r["spec"]["model"] for r in recs] == models
    for rec in recs:
        hist = rec["train"]["history"]
        assert all(math.isfinite(h["train_loss"]) for h in hist) and 1 <= len(hist) <= 2   # the tiny profile holds
        if rec["spec"]["train"].get("objective", "ce") == "ce":
            assert hist[-1]["train_loss"] < hist[0]["train_loss"]
        assert rec["data"]["sizes"] == SIZES
        assert rec["spec"]["data"]["options"]                       # the reader's options are recorded
    if name == "inshorts_transformer":
        assert recs[0]["spec"]["train"]["accum_steps"] == 2 and recs[0]["spec"]["model_options"]["pre_ln"]
        assert recs[0]["data"]["reader"]["test"]["split"]["rows_in_split"] == 226
    elif name == "inshorts_headline":
        assert recs[0]["data"]["reader"]["train"]["fields"]["target"] == "headlines"
    else:
        assert "cnn stories only" in recs[0]["data"]["reader"]["train"]["filter"]
        assert recs[3]["spec"]["train"]["objective"] == recs[4]["spec"]["train"]["objective"] == "scst"
        assert recs[4]["spec"]["train"]["max_steps"] == 2 * recs[3]["spec"]["train"]["max_steps"]   # the longer phase
        held = recs[5]["spec"]["train"]
        assert held["objective"] == "scst" and held["rl_gamma_ramp"] == 0.5                       # the held gamma
        assert held["max_steps"] == recs[3]["spec"]["train"]["max_steps"]
