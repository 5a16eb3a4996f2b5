"""Rows are chosen on stored validation scores: a run and every decoding variant store their validation
ROUGE, `zoo tune` stores its grid, and perturbing every test score of a results tree changes no chosen row."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from conftest import run_cli, trained_tiny_experiment
from seq2seq_zoo.report import leaderboard as lb

ROOT = Path(__file__).resolve().parents[1]


def _perturb_test_scores(root: Path, seed: int = 0) -> int:
    """Add noise to every stored test score under ``root`` (record means and per-example scores of runs and
    decoding variants); returns the number of files changed."""
    rng = np.random.default_rng(seed)
    changed = 0
    for rec in root.rglob("record.json"):
        r = json.loads(rec.read_text(encoding="utf-8"))
        r["eval"]["scores"] = {k: v + float(rng.normal(0, 5)) for k, v in r["eval"]["scores"].items()}
        rec.write_text(json.dumps(r), encoding="utf-8")
        changed += 1
        sc = rec.parent / "scores.jsonl"
        if sc.is_file():
            lines = sc.read_text(encoding="utf-8").splitlines()
            out = [lines[0]] + [json.dumps({k: (v + float(rng.normal(0, 0.2)) if isinstance(v, float) else v)
                                            for k, v in json.loads(x).items()}) for x in lines[1:]]
            sc.write_text("\n".join(out) + "\n", encoding="utf-8")
    return changed


def _chosen(root: Path) -> list[tuple]:
    return [(r["dataset"], r["task"], r["family"], r["folder"], r["run"], r["decoding"], r["validation_mean"])
            for r in lb.choose_rows(lb.collect(root), root, intervals=False)]


def _copy_committed(dest: Path, folders: list[str]) -> None:
    """The records, per-example scores, decoding variants and experiment.json of committed folders."""
    for f in folders:
        src = ROOT / "results" / f
        for p in src.rglob("*"):
            if p.is_file() and p.name in ("record.json", "scores.jsonl", "experiment.json"):
                q = dest / f / p.relative_to(src)
                q.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(p, q)


def test_perturbed_test_scores_change_no_chosen_row_of_the_committed_results(tmp_path):
    root = tmp_path / "results"
    _copy_committed(root, ["scst", "cpu_long/cnn_pointer", "rnn_progression"])
    before = _chosen(root)
    assert sum(1 for c in before if c[4] is not None) >= 5
    tests_before = {(r["family"], r["dataset"]): r["test_mean"]
                    for r in lb.choose_rows(lb.collect(root), root, intervals=False)}
    assert _perturb_test_scores(root) > 20
    rows = lb.choose_rows(lb.collect(root), root, intervals=False)
    assert _chosen(root) == before
    moved = [r for r in rows if r["test_mean"] is not None and r["family"] != "LEAD"
             and abs(r["test_mean"] - tests_before[(r["family"], r["dataset"])]) > 1e-9]
    assert moved, "the perturbation did not reach the test means"


def test_runs_and_variants_store_validation_and_the_choice_reads_it(tmp_path):
    """End to end on a tiny experiment: records and decoding variants hold the whole validation split's ROUGE
    with their own decoding; the chosen row is the validation winner and survives perturbed test scores;
    `zoo tune` stores its grid in the run's tune.json."""
    runs = ('[[runs]]\nname = "a"\n\n[[runs]]\nname = "b"\nd_model = 24\n\n'
            '[[decode]]\nname = "greedy"\nmethod = "greedy"\n')
    data_dir, toml, results = trained_tiny_experiment(tmp_path, "sel", runs.replace("[[runs]]", "[[runs]]", 2))
    run_a = next(p.parent for p in (results / "sel").glob("a*/record.json"))
    rec = json.loads((run_a / "record.json").read_text(encoding="utf-8"))
    val = rec["validation"]
    assert val["split"] == "validation" and val["n_examples"] == 4 and val["decode"] == rec["eval"]["decode"]
    assert 0.0 <= val["scores"]["rouge1"] <= 100.0
    var = json.loads((run_a / "decodes" / "greedy" / "record.json").read_text(encoding="utf-8"))
    assert var["validation"]["decode"]["method"] == "greedy" and var["validation"]["n_examples"] == 4
    rows = lb.choose_rows(lb.collect(results), results, intervals=False)
    (row,) = [r for r in rows if r["family"] == "Transformer"]
    assert row["validation_basis"] == "decoded"
    cands = {(c["run"], c["decoding"]): c["validation_mean"] for c in row["candidates"]}
    assert len(cands) == 4 and all(v is not None for v in cands.values())
    assert row["validation_mean"] == max(cands.values())
    before = _chosen(results)
    _perturb_test_scores(results, seed=1)
    assert _chosen(results) == before
    # zoo tune: the grid is stored with the run; trying a setting again replaces its row
    run_dir = next(p.parent for p in (results / "sel").glob("b*/record.json"))
    for _ in range(2):
        assert run_cli(["tune", str(run_dir), "--grid", "beam_size=1,2", "--data-dir", str(data_dir),
                        "--no-progress"]) == 0
    grid = json.loads((run_dir / "tune.json").read_text(encoding="utf-8"))
    assert grid["split"] == "validation" and len(grid["rows"]) == 2
    assert {r["decode"]["beam_size"] for r in grid["rows"]} == {1, 2}


def test_written_json_is_standard(tmp_path):
    """NaN and Infinity are written as null: Python's reader with NaN refused accepts every file."""
    from seq2seq_zoo.utils import atomic_write_json
    atomic_write_json(tmp_path / "x.json", {"a": float("nan"), "b": [np.float64("inf"), 1.5], "c": np.nan})
    got = json.loads((tmp_path / "x.json").read_text(encoding="utf-8"),
                     parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert got == {"a": None, "b": [None, 1.5], "c": None}


def test_no_committed_json_holds_nan():
    import subprocess
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "*.json"], capture_output=True, text=True)
    if listed.returncode != 0:
        return   # not a git checkout: the files are checked where the repository is
    bad = []
    for name in listed.stdout.split():
        try:
            json.loads((ROOT / name).read_text(encoding="utf-8"), parse_constant=lambda c: (_ for _ in ()).throw(
                ValueError(c)))
        except ValueError as e:
            bad.append(f"{name}: {e}")
    assert not bad, "non-standard JSON (NaN/Infinity): " + "; ".join(bad[:5])


def test_only_tracked_records_enter_the_suite_wide_reports(tmp_path):
    """In a git work tree the leaderboard is built from the records git tracks: a user's own runs (an
    untracked or ignored folder such as results/smoke/) never change the committed leaderboard."""
    import subprocess
    from seq2seq_zoo.report.scope import forget
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        return
    src = ROOT / "results" / "inshorts_transformer"
    for exp in ("committed_exp", "users_own"):
        for run in ("transformer", "lead60"):
            (tmp_path / "results" / exp / run).mkdir(parents=True)
            for name in ("record.json", "scores.jsonl"):
                shutil.copy(src / run / name, tmp_path / "results" / exp / run / name)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "results/committed_exp"], cwd=tmp_path, check=True)
    forget()
    assert {e.folder for e in lb.collect(tmp_path / "results")} == {"committed_exp"}
    lb.write_leaderboard(tmp_path / "results")
    board = json.loads((tmp_path / "results" / "leaderboard.json").read_text(encoding="utf-8"))
    assert {c["folder"] for r in board["rows"] for c in r["candidates"]} == {"committed_exp"}
    forget()


def _trained_row(score: float, val_max: int, n_val: int = 500) -> dict:
    """A seed's record as the selection reads it: a run trained with validation ROUGE-1 as its metric."""
    return {"spec": {"train": {"val_max": val_max}}, "data": {"sizes": {"validation": n_val}},
            "train": {"val_metric": "rouge1", "best_score": score}}


def test_training_scores_on_fewer_validation_examples_are_another_class():
    """The training loop scores the first ``train.val_max`` validation examples, so a run scored on 200
    of 500 dialogues is not compared with one scored on all 500: with two candidates of each class, the
    larger set's class is compared, and its best wins though the smaller set's best scores higher."""
    from seq2seq_zoo.report import selection
    assert selection.seed_value(_trained_row(0.42, 200), "training") == (42.0, 200)
    assert selection.seed_value(_trained_row(0.42, 0), "training") == (42.0, 500)
    assert selection.seed_value(_trained_row(0.42, 900), "training") == (42.0, 500)
    cands = {"small-a": [_trained_row(s, 200) for s in (0.43, 0.44, 0.45)],
             "small-b": [_trained_row(s, 200) for s in (0.40, 0.41, 0.42)],
             "full-a": [_trained_row(s, 500) for s in (0.41, 0.42, 0.43)],
             "full-b": [_trained_row(s, 0) for s in (0.40, 0.40, 0.41)]}
    win, basis, _ = selection.choose(list(cands), cands.__getitem__, str)
    assert (win, basis) == ("full-a", "training")
    # with the smaller class the more common, it is the one compared
    cands["small-c"] = [_trained_row(s, 200) for s in (0.30, 0.30, 0.30)]
    assert selection.choose(list(cands), cands.__getitem__, str)[0] == "small-a"
