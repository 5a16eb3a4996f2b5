"""Confidence intervals, paired tests, seed aggregation and findings verdicts (scipy.stats underneath)."""
from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
from scipy import stats as sps

from seq2seq_zoo import stats
from seq2seq_zoo.cli import main
from seq2seq_zoo.findings import Finding, parse_claim
from seq2seq_zoo.report import build_report


def test_bootstrap_ci_covers_the_known_mean():
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(60):  # a 95% interval: about 57 of 60 samples cover the true mean
        x = rng.normal(35.0, 8.0, size=200)
        lo, hi = stats.ci(x, n_resamples=2000)
        covered += lo < 35.0 < hi
        assert lo < x.mean() < hi
        assert hi - lo == pytest.approx(2 * 1.96 * 8.0 / np.sqrt(200), rel=0.3)  # ~ normal-theory width
    assert 52 <= covered <= 60
    assert stats.ci([3.0, 3.0, 3.0]) == (3.0, 3.0)
    assert stats.ci(np.arange(100.0)) == stats.ci(np.arange(100.0))  # fixed seed: reproducible


def test_paired_test_verdicts():
    rng = np.random.default_rng(1)
    b = rng.normal(30, 10, size=300)
    better = b + rng.normal(1.0, 2.0, size=300)           # +1 on average, strongly paired
    c = stats.paired_test(better, b)
    assert c.p < 0.05 and c.verdict(">") == "holds" and c.verdict("<") == "reversed"
    assert c.ci_low < c.diff < c.ci_high and c.ci_low > 0
    same = stats.paired_test(b, b.copy())
    assert same.p > 0.05 and same.verdict(">") == "not shown"
    noise = stats.paired_test(b + rng.normal(0.0, 2.0, size=300), b)  # no true difference
    assert noise.p > 0.05 and noise.verdict(">") == "not shown"
    # a ratio claim: a < 0.1 * b where a is 5% of b
    ratio = stats.paired_test(0.05 * b, b, scale=0.1)
    assert ratio.verdict("<") == "holds" and ratio.mean_b == pytest.approx(0.1 * b.mean())
    with pytest.raises(ValueError, match="same examples"):
        stats.paired_test([1.0, 2.0], [1.0])


def test_paired_test_constant_difference():
    """The same gain on every example is the strongest evidence there is, not 'no variation'."""
    c = stats.paired_test(np.arange(9.0) + 1.0, np.arange(9.0))
    assert c.diff == 1.0 and (c.ci_low, c.ci_high) == (1.0, 1.0)
    assert c.p == pytest.approx(2 / 2 ** 9)           # exact sign-flip p of 9 pairs, all positive
    assert stats.paired_test(np.ones(9), np.ones(9)).p == 1.0


def test_seed_test_needs_two_seeds():
    one = stats.seed_test([3.5], [3.6, 3.7])
    assert np.isnan(one.p) and one.verdict("<") == "not shown"
    two = stats.seed_test([3.50, 3.51, 3.49], [3.70, 3.71, 3.69])
    assert two.p < 0.05 and two.verdict("<") == "holds"


def test_pair_by_seed():
    a = {1: {"x": 1.0, "y": 2.0}, 2: {"x": 3.0, "y": 4.0}}
    b = {1: {"x": 0.0, "y": 0.0}, 2: {"x": 1.0, "y": 1.0}}
    assert stats.pair_by_seed(a, b) == ([1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 1.0, 1.0])
    lead = {1: {"x": 10.0, "y": 20.0, "z": 5.0}}          # one deterministic baseline run
    xs, ys = stats.pair_by_seed(a, lead)   # unequal seeds: one pair per example, never a seed against a mean
    assert xs == [2.0, 3.0] and ys == [10.0, 20.0]
    ys2, xs2 = stats.pair_by_seed(lead, a)
    assert (xs2, ys2) == (xs, ys)


def test_parse_claim():
    assert parse_claim("tmax > learned") == ("tmax", ">", "learned", "rouge1", 1.0)
    assert parse_claim("pg unk_ratio < 0.1 * bilstm unk_ratio") == ("pg", "<", "bilstm", "unk_ratio", 0.1)
    assert parse_claim("a < b", "best_val_loss") == ("a", "<", "b", "best_val_loss", 1.0)
    assert parse_claim("a/beam8 > b/greedy")[::2] == ("a/beam8", "b/greedy", 1.0)
    with pytest.raises(ValueError, match="itself"):
        parse_claim("a > a")


EXP = """
[experiment]
name = "sig"
dataset = "dialogsum"
metrics = ["rouge"]
data_dir = "{data}"

[defaults]
data.max_test = 3

[[runs]]
name = "lead"
model = "lead"
unit = "turn"
k = 1
"""


def _fake_seeds(exp, name: str, shift) -> None:
    """Copies of the lead run as a 'trained' run with three seeds whose scores are shifted per seed."""
    for seed in (1, 2, 3):
        d = exp / f"{name}-seed{seed}"
        shutil.copytree(exp / "lead", d)
        rec = json.loads((d / "record.json").read_text())
        rec.update(run=f"{name}-seed{seed}", seed=seed, baseline=None, order=seed)
        rec["eval"]["scores"]["rouge1"] += shift(seed)
        (d / "record.json").write_text(json.dumps(rec))
        lines = (d / "scores.jsonl").read_text().splitlines()
        rows = [json.loads(x) for x in lines[1:]]
        for r in rows:
            r["rouge1"] += shift(seed)
        (d / "scores.jsonl").write_text("\n".join([lines[0]] + [json.dumps(r) for r in rows]) + "\n")


def _lead_experiment(tmp_path, dialogsum_dir):
    """The EXP file run for real (its lead row), in tmp_path/res/sig."""
    f = tmp_path / "e.toml"
    f.write_text(EXP.format(data=dialogsum_dir), encoding="utf-8")
    res = tmp_path / "res"
    assert main(["run", str(f), "--results", str(res), "--no-progress"]) == 0
    return res / "sig"


def _declare(exp, findings) -> None:
    """The findings as `zoo run` stores them for a file that declares them (its runs are faked here)."""
    meta = json.loads((exp / "experiment.json").read_text())
    meta["findings"] = [f.to_dict() for f in findings]
    (exp / "experiment.json").write_text(json.dumps(meta))


def test_seed_rows_aggregate_and_findings(tmp_path, dialogsum_dir):
    exp = _lead_experiment(tmp_path, dialogsum_dir)
    _fake_seeds(exp, "sys", lambda s: 5.0 + s)      # 6, 7, 8 above the lead on every example
    _fake_seeds(exp, "sys2", lambda s: 0.0)         # the lead itself three times
    _declare(exp, [Finding(c, c.split()[0], "lead", ">", "rouge1", source="made up")
                   for c in ("sys > lead", "sys2 > lead")])
    build_report(exp)
    # table.csv: one row per seed; table.md: their mean ± sd, with a CI
    with open(exp / "table.csv") as fh:
        rows = list(csv.DictReader(fh))
    sys_r1 = [float(r["R-1"]) for r in rows if r["run"].startswith("sys-")]
    assert len(sys_r1) == 3
    md = (exp / "table.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("| sys |"))
    cell = next(c.strip() for c in line.split("|") if "±" in c)
    mean, rest = cell.split(" ± ")
    sd, ci = rest.split(" [")
    assert float(mean) == pytest.approx(np.mean(sys_r1), abs=0.006)
    assert float(sd) == pytest.approx(np.std(sys_r1, ddof=1), abs=0.006)
    lo, hi = (float(v) for v in ci.rstrip("]").split(", "))
    assert lo <= float(mean) <= hi
    assert "| 1, 2, 3 |" in line  # the seeds column
    judged = {j["claim"]: j for j in json.loads((exp / "findings.json").read_text())}
    # the seed is the unit: a one-sample t of sys's 3 seed means against the deterministic LEAD row
    j = judged["sys > lead"]
    assert j["verdict"] == "holds" and (j["n_a"], j["n_b"]) == (3, 1) and j["deterministic"] == ["lead"]
    assert j["diff"] == pytest.approx(7.0)
    assert j["p"] == pytest.approx(sps.ttest_1samp([6.0, 7.0, 8.0], 0.0).pvalue)
    assert j["perm_min_p"] == pytest.approx(0.25) and j["pooled"]["n"] == 3   # pooled: one pair per example
    assert judged["sys2 > lead"]["verdict"] == "not shown" and judged["sys2 > lead"]["p"] == 1.0
    assert "below LEAD" in next(x for x in md.splitlines() if x.startswith("| sys2 |"))
    assert any("undertrained" in x for x in judged["sys2 > lead"]["flags"])


def test_init_finding_pairs_each_seed_with_its_own_start(tmp_path, dialogsum_dir):
    """"ft > ft@init": seed s of the fine-tuned run is compared with seed s of the run it started from."""
    exp = _lead_experiment(tmp_path, dialogsum_dir)
    _fake_seeds(exp, "base", lambda s: 10.0 * s)     # parents: 10, 20, 30 above the lead
    _fake_seeds(exp, "ft", lambda s: 10.0 * s + 1)   # each seed 1 above its own parent
    for seed in (1, 2, 3):
        rec_f = exp / f"ft-seed{seed}" / "record.json"
        rec = json.loads(rec_f.read_text())
        rec["init_from"] = {"checkpoint": str(exp / f"base-seed{seed}" / "checkpoints" / "best.pt")}
        rec_f.write_text(json.dumps(rec))
    _declare(exp, [Finding("ft > ft@init", "ft", "ft@init", ">", "rouge1", source="made up")])
    build_report(exp)
    j = json.loads((exp / "findings.json").read_text())[0]
    # paired per seed the gap is exactly 1 on every example (3 examples x 3 seeds); against seed 1's parent
    # alone (the old rule) it would be 1, 11 and 21
    assert j["n"] == 9 and j["diff"] == pytest.approx(1.0)
    assert j["verdict"] == "holds", {k: j[k] for k in ("verdict", "p", "flags", "detail") if k in j}


def test_report_scores_old_records_from_predictions(tmp_path, dialogsum_dir):
    exp = _lead_experiment(tmp_path, dialogsum_dir)
    res, run = exp.parent, exp / "lead"
    before = (run / "scores.jsonl").read_text().splitlines()[1:]
    (run / "scores.jsonl").unlink()                      # a record made before per-example scores
    assert main(["report", "--results", str(res)]) == 0
    after = (run / "scores.jsonl").read_text().splitlines()
    assert "predates per-example scores" in after[0]
    old = {json.loads(x)["id"]: json.loads(x)["rouge1"] for x in before}
    new = {json.loads(x)["id"]: json.loads(x)["rouge1"] for x in after[1:]}
    assert new == pytest.approx(old)                      # the same rouge-score settings as the record
    assert (res / "FINDINGS.md").is_file()


def test_findings_index_names_the_results_folder(tmp_path, dialogsum_dir):
    """results/archive/X_before_fixes and results/X are different runs of experiment X: FINDINGS.md says which."""
    from seq2seq_zoo.report.significance import write_findings_index
    exp = _lead_experiment(tmp_path, dialogsum_dir)
    _declare(exp, [Finding("lead > lead", "lead", "lead", ">", "rouge1", source="made up")])
    build_report(exp)
    old = exp.parent / "archive" / "sig_before_fixes"
    shutil.copytree(exp, old)
    text = write_findings_index(exp.parent).read_text()
    rows = [x for x in text.splitlines() if x.startswith("| lead > lead")]
    assert len(rows) == 2
    assert {r.split("|")[-3].strip() for r in rows} == {"sig", "archive/sig_before_fixes"}   # the experiment column


def test_convergence_label():
    from seq2seq_zoo.report.tables import convergence

    def rec(vals, early=False, metric="loss", best=None, steps=10):
        return {"train": {"stopped_early": early, "val_metric": metric, "best_step": best, "steps": steps,
                          "history": [{"epoch": i + 1, "val_loss": v} for i, v in enumerate(vals)]}}
    assert convergence(rec([4.0, 3.5, 3.2])) == "not converged"       # still falling at the cap
    assert convergence(rec([4.0, 3.5, 3.6])) == "cap reached"         # turned up before the cap
    assert convergence(rec([4.0, 3.5, 3.6, 3.7], early=True)) == "early-stopped"
    assert convergence(rec([4.0], metric="rouge1", best=10, steps=10)) == "not converged"
    assert convergence(rec([4.0], metric="rouge1", best=4, steps=10)) == "cap reached"


# ------------------------------------------------------------------------------ method-level tests
def test_method_test_matches_scipy():
    rng = np.random.default_rng(3)
    A = rng.normal(36, 9, (3, 200)) + rng.normal(0, 0.8, (3, 1))
    B = rng.normal(35, 9, (4, 200))
    c = stats.method_test(A, B)
    ref = sps.ttest_ind(A.mean(1), B.mean(1), equal_var=False)
    assert c.p == pytest.approx(ref.pvalue) and c.diff == pytest.approx(A.mean() - B.mean())
    assert c.t_ci == pytest.approx(tuple(ref.confidence_interval(0.95)))
    assert (c.n_a, c.n_b) == (3, 4) and c.perm_min_p == pytest.approx(2 / 35)
    perm = sps.permutation_test((A.mean(1), B.mean(1)), lambda x, y, axis: x.mean(axis) - y.mean(axis),
                                permutation_type="independent", n_resamples=np.inf, vectorized=True)
    assert c.perm_p == pytest.approx(perm.pvalue)
    assert c.ci_low < c.diff < c.ci_high
    # against a deterministic row: one-sample t of A's seed means
    L = rng.normal(30, 9, (1, 200))
    d = stats.method_test(A, L, fixed_b=True)
    assert d.p == pytest.approx(sps.ttest_1samp(A.mean(1) - L.mean(), 0.0).pvalue) and d.n_b == 1
    assert d.perm_min_p == pytest.approx(0.25)
    mirrored = stats.method_test(L, A, fixed_a=True)
    assert mirrored.p == pytest.approx(d.p) and mirrored.diff == pytest.approx(-d.diff)
    # matched seeds: paired t
    P = A + rng.normal(0.5, 0.2, (3, 1))
    e = stats.method_test(P, A, paired=True)
    assert e.p == pytest.approx(sps.ttest_rel(P.mean(1), A.mean(1)).pvalue)
    # per-run values (validation loss): one value per seed
    f = stats.method_test([3.3, 3.31, 3.29], [3.4, 3.42, 3.41])
    assert f.p == pytest.approx(sps.ttest_ind([3.3, 3.31, 3.29], [3.4, 3.42, 3.41], equal_var=False).pvalue)
    assert f.verdict("<") == "holds" and f.verdict(">") == "reversed"
    # one seed a side: no seed-level test
    g = stats.method_test(A[:1], B[:1])
    assert g.verdict(">") == "too few seeds" and np.isnan(g.p)


def test_exact_permutation_and_its_floor():
    assert stats.exact_permutation_p([1.0, 2.0, 3.5], [0.1, 0.4, 0.2, 0.3]) == pytest.approx(2 / 35)
    x, y = [1.0, 2.0, 3.5], [0.1, 0.4, 0.2]
    ref = sps.permutation_test((x, y), lambda a, b, axis: np.mean(a, axis) - np.mean(b, axis),
                               permutation_type="independent", n_resamples=np.inf, vectorized=True).pvalue
    assert stats.exact_permutation_p(x, y) == pytest.approx(ref) == pytest.approx(0.1)
    d = [0.5, 1.0, -0.2, 0.7]
    ref = sps.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf).pvalue
    assert stats.exact_permutation_p(d) == pytest.approx(ref)
    assert stats.min_permutation_p(3, 3) == pytest.approx(0.1)        # 3 v 3 can never reach 0.05
    assert stats.min_permutation_p(5, 5) == pytest.approx(2 / 252)
    assert stats.min_permutation_p(3) == pytest.approx(0.25)          # 3 seeds against a fixed row


def test_group_ci_includes_seed_variance():
    rng = np.random.default_rng(5)
    ex = rng.normal(35, 8, 400)
    seeds = ex + np.array([[-1.5], [0.0], [1.5]])            # three seeds, 1.5 points apart
    lo, hi = stats.group_ci(seeds)
    lo1, hi1 = stats.ci(seeds.mean(0), n_resamples=2000)   # examples only (the old rule)
    assert lo < seeds.mean() < hi and (hi - lo) > 1.5 * (hi1 - lo1)
    assert stats.group_ci(seeds[:1]) == pytest.approx(stats.group_ci(seeds[:1]))   # fixed seed
    assert stats.group_ci([[2.0, 2.0]]) == (2.0, 2.0)


def test_seeds_for_power_known_answers():
    # statsmodels TTestIndPower().solve_power(d, alpha=0.05, power=0.8): 63.77 (d 0.5), 16.71 (d 1);
    # TTestPower (one sample): 33.37 (d 0.5), 9.94 (d 1)
    assert stats.seeds_for_power(0.5) == 64 and stats.seeds_for_power(1.0) == 17
    assert stats.seeds_for_power(0.5, one_sample=True) == 34 and stats.seeds_for_power(1.0, one_sample=True) == 10
    assert stats.seeds_for_power(0.0) is None
    assert stats.power(17, 1.0) >= 0.8 > stats.power(16, 1.0)


def test_verdict_categories_on_synthetic_records(tmp_path, dialogsum_dir):
    """too few seeds (1 v 1 trained), not judged: degenerate (one summary for every input), reversed."""
    exp = _lead_experiment(tmp_path, dialogsum_dir)
    _fake_seeds(exp, "hi", lambda s: 5.0 + 0.3 * s)
    _fake_seeds(exp, "lo", lambda s: 1.0 + 0.2 * s)
    _fake_seeds(exp, "deg", lambda s: 9.0 + s)
    for name in ("one", "two"):                            # single-seed trained runs
        d = exp / f"{name}-seed1"
        shutil.copytree(exp / "hi-seed1", d)
        rec = json.loads((d / "record.json").read_text())
        rec["run"] = f"{name}-seed1"
        (d / "record.json").write_text(json.dumps(rec))
    preds = (exp / "deg-seed2" / "predictions.jsonl").read_text().splitlines()
    same = [json.dumps({**json.loads(x), "prediction": "#Person1# talks."}) for x in preds]
    (exp / "deg-seed2" / "predictions.jsonl").write_text("\n".join(same) + "\n")
    _declare(exp, [Finding(c, c.split()[0], c.split()[2], c.split()[1], "rouge1", source="made up")
                   for c in ("hi > lo", "lo > hi", "one > two", "deg > lead")]
             + [Finding("hi > lead", "hi", "lead", ">", "rouge1", test_informed=True)])
    build_report(exp)
    judged = {j["claim"]: j for j in json.loads((exp / "findings.json").read_text())}
    assert judged["hi > lo"]["verdict"] == "holds" and judged["lo > hi"]["verdict"] == "reversed"
    assert judged["one > two"]["verdict"] == "too few seeds" and judged["one > two"]["perm_min_p"] == 1.0
    assert judged["deg > lead"]["verdict"] == "not judged: degenerate"
    assert "deg seed 2: one summary for 3 of 3 inputs" in judged["deg > lead"]["detail"]
    assert judged["hi > lead"]["test_informed"] is True
    from seq2seq_zoo.report.significance import write_findings_index
    text = write_findings_index(exp.parent).read_text()
    assert "4 judged: 2 hold, 0 not shown, 1 reversed, 1 too few seeds; not judged: 1 degenerate" in text
    assert "1 test-informed" in text


def test_findings_index_keeps_archived_results_out_of_the_tally(tmp_path, dialogsum_dir):
    from seq2seq_zoo.report.significance import write_findings_index
    exp = _lead_experiment(tmp_path, dialogsum_dir)
    _fake_seeds(exp, "sys", lambda s: 5.0 + s)
    _declare(exp, [Finding("sys > lead", "sys", "lead", ">", "rouge1", source="made up")])
    build_report(exp)
    shutil.copytree(exp, exp.parent / "archive" / "sig_before_fixes")
    shutil.copytree(exp, exp.parent / "archive" / "sig_raw")
    text = write_findings_index(exp.parent).read_text()
    head, archive = text.split("## Archive: superseded results (not counted)")
    assert "Current results: 1 finding(s), 1 judged: 1 hold" in head
    for old in ("archive/sig_before_fixes", "archive/sig_raw"):
        assert old in archive and old not in head


def test_zoo_power_plans_seeds(tmp_path, capsys):
    """`zoo power`: per current finding the seeds for 80% power, from findings.json; archive/ is left out."""
    for exp in ("e", "archive/e_before_fixes", "archive/e"):
        (tmp_path / exp).mkdir(parents=True)
        (tmp_path / exp / "findings.json").write_text(json.dumps([
            {"claim": "a > b", "metric": "rouge1", "verdict": "not shown", "n_a": 3, "n_b": 3,
             "power": {"effect": 0.5, "seed_sd": 0.5, "one_sample": False}},
            {"claim": "a > lead", "metric": "rouge1", "verdict": "holds", "n_a": 3, "n_b": 1,
             "power": {"effect": 1.0, "seed_sd": 1.0, "one_sample": True}},
            {"claim": "c > d", "metric": "rouge1", "verdict": "too few seeds", "n_a": 1, "n_b": 1,
             "power": {"effect": 0.3, "seed_sd": None, "one_sample": False}}]))   # written as null, not NaN
    assert main(["power", "--results", str(tmp_path)]) == 0
    plan = json.loads((tmp_path / "seed_plan.json").read_text())
    got = {(r["experiment"], r["claim"]): r for r in plan["findings"]}
    assert set(got) == {("e", "a > b"), ("e", "a > lead"), ("e", "c > d")}
    assert got[("e", "a > b")]["seeds_for_power"] == 17          # d = 1, two arms (statsmodels: 16.71)
    assert got[("e", "a > lead")]["seeds_for_power"] == 10       # d = 1 against a fixed row (9.94)
    assert got[("e", "c > d")]["seeds_for_power"] is None        # one seed: no sd to plan with
    assert got[("e", "a > b")]["power_now"] == pytest.approx(stats.power(3, 1.0))
    assert "a > lead" in capsys.readouterr().out
    assert main(["power", "--results", str(tmp_path), "--power", "1.5"]) == 2


def test_zoo_power_notes_rewrites_the_table_and_keeps_the_written_plan(tmp_path):
    """`zoo power --notes`: the table under "## Seed plan" is rebuilt from findings.json, the plan written
    below it and the sections after it are kept, a second run changes nothing, and NOTES.md without the
    section gets it appended."""
    for exp in ("e", "f"):
        (tmp_path / exp).mkdir()
        (tmp_path / exp / "findings.json").write_text(json.dumps([
            {"claim": "a > b", "metric": "rouge1", "verdict": "not shown", "n_a": 3, "n_b": 3,
             "power": {"effect": 0.5, "seed_sd": 0.5, "one_sample": False}}]))
    (tmp_path / "e" / "NOTES.md").write_text(
        "# e\n\nRuns.\n\n## Seed plan\n\nold intro\n\n| finding | verdict |\n|---|---|\n| a > b | holds |\n\n"
        "**Plan.** two more seeds of b.\n\n## Later\n\nkept too.\n")
    (tmp_path / "f" / "NOTES.md").write_text("# f\n\nRuns.\n")
    assert main(["power", "--results", str(tmp_path), "--notes"]) == 0
    e = (tmp_path / "e" / "NOTES.md").read_text()
    assert "| a > b | not shown (3 v 3) | +0.5 | 0.5 | " in e and "| a > b | holds |" not in e
    assert "old intro" not in e and "seeds for 80%" in e
    assert e.index("| a > b | not shown") < e.index("**Plan.** two more seeds of b.") < e.index("## Later")
    assert e.startswith("# e\n\nRuns.\n\n## Seed plan\n") and e.endswith("## Later\n\nkept too.\n")
    f = (tmp_path / "f" / "NOTES.md").read_text()
    assert f.startswith("# f\n\nRuns.\n\n## Seed plan\n") and "| a > b | not shown (3 v 3) |" in f
    assert main(["power", "--results", str(tmp_path), "--notes"]) == 0
    assert (tmp_path / "e" / "NOTES.md").read_text() == e and (tmp_path / "f" / "NOTES.md").read_text() == f


def test_lead_row_is_the_one_tuned_on_validation_when_a_file_has_two():
    """Inshorts keeps a fixed first-60-words row beside the tuned LEAD: margins and marks use the tuned one."""
    from seq2seq_zoo.report.significance import group_rows, lead_group

    def row(run, tuned):
        return {"run": run, "seed": 1, "model": "lead", "data": {"dataset": "inshorts"},
                "baseline": {"tuned": tuned}, "eval": {"scores": {"rouge1": 1.0}}}
    fixed, chosen = row("lead60", {"k": 60}), row("lead", {"k": 70, "chosen_by": "ROUGE-1 F1 on the validation split"})
    assert lead_group(group_rows([fixed, chosen])).label == "lead"
    assert lead_group(group_rows([fixed])).label == "lead60"          # no tuned row: the first LEAD row


def test_findings_flag_seeds_trained_in_different_precisions(tmp_path, dialogsum_dir):
    """precision = "auto" resolves per machine: a claim whose seeds ran in fp32 and bf16 says so, naming the
    seeds of each; one whose seeds share a precision carries no such flag."""
    exp = _lead_experiment(tmp_path, dialogsum_dir)
    _fake_seeds(exp, "sys", lambda s: 5.0 + s)
    _fake_seeds(exp, "sys2", lambda s: 1.0 + s)
    for name, precs in (("sys", ("fp32", "fp32", "bfloat16")), ("sys2", ("fp32",) * 3)):
        for seed, prec in zip((1, 2, 3), precs):
            path = exp / f"{name}-seed{seed}" / "record.json"
            rec = json.loads(path.read_text())
            rec["train"]["precision"] = prec
            path.write_text(json.dumps(rec))
    _declare(exp, [Finding(c, *c.split(" > "), ">", "rouge1", source="made up")
                   for c in ("sys > sys2", "sys2 > lead")])
    build_report(exp)
    judged = {j["claim"]: j for j in json.loads((exp / "findings.json").read_text())}
    assert "mixed precision (sys: bfloat16 seed 3, fp32 seeds 1-2; sys2: fp32 seeds 1-3)" in judged["sys > sys2"]["flags"]
    assert not any(x.startswith("mixed precision") for x in judged["sys2 > lead"]["flags"])
    assert "mixed precision (sys: bfloat16 seed 3" in (exp / "README.md").read_text()
    # with precision as a factor: sys's seed means 6, 7 (fp32) and 8 (bf16), sys2's 2, 3, 4 (fp32): the
    # shift is sys's bf16 seed against its fp32 seeds (8 - 6.5), the difference the fp32 contrast (6.5 - 3)
    adj = judged["sys > sys2"]["precision_adjusted"]
    assert adj["diff"] == pytest.approx(3.5) and adj["shift"] == pytest.approx(-1.5) and adj["df"] == 3
    assert adj["levels"] == ["bfloat16", "fp32"] and adj["diff_plain"] == pytest.approx(4.0)
    assert adj["p_plain"] == pytest.approx(sps.ttest_ind([6, 7, 8], [2, 3, 4]).pvalue)
    assert judged["sys2 > lead"]["precision_adjusted"] == {}
    assert "| diff 3.50 [" in (exp / "README.md").read_text()


def test_a_difference_hidden_by_a_precision_shift_is_flagged_precision_sensitive(tmp_path, dialogsum_dir):
    """Two systems 2 points apart within each precision, whose bf16 seed sits 10 points above its fp32
    seeds: without the factor the spread hides the difference, with it the difference holds."""
    exp = _lead_experiment(tmp_path, dialogsum_dir)
    _fake_seeds(exp, "sys", {1: 3.0, 2: 3.2, 3: 13.1}.get)
    _fake_seeds(exp, "sys2", {1: 1.0, 2: 1.2, 3: 11.1}.get)
    for name in ("sys", "sys2"):
        for seed, prec in zip((1, 2, 3), ("fp32", "fp32", "bfloat16")):
            path = exp / f"{name}-seed{seed}" / "record.json"
            rec = json.loads(path.read_text())
            rec["train"]["precision"] = prec
            path.write_text(json.dumps(rec))
    _declare(exp, [Finding("sys > sys2", "sys", "sys2", ">", "rouge1", source="made up")])
    build_report(exp)
    j = json.loads((exp / "findings.json").read_text())[0]
    adj = j["precision_adjusted"]
    assert j["verdict"] == "not shown" and adj["verdict_plain"] == "not shown" and adj["verdict"] == "holds"
    assert adj["diff"] == pytest.approx(2.0) and adj["shift"] == pytest.approx(-10.0)
    assert any(x.startswith("precision-sensitive (not shown without precision as a factor, holds with it")
               for x in j["flags"])
    from seq2seq_zoo.report.significance import write_findings_index
    index = write_findings_index(exp.parent).read_text()
    assert "1 mixed precision (1 of them precision-sensitive)" in index


def test_factor_adjusted_known_answers():
    """The least squares with a factor against hand-computed answers and scipy's t-tests."""
    a, b = [10.0, 10.2, 11.0, 11.1], [8.0, 8.1, 9.0, 9.2]
    lv = ["fp32", "fp32", "bf16", "bf16"]
    two = stats.factor_adjusted(a, b, lv, lv)          # balanced: the mean of the within-level differences
    assert two.diff == pytest.approx(((10.1 - 8.05) + (11.05 - 9.1)) / 2)
    assert two.shift == pytest.approx((10.1 + 8.05 - 11.05 - 9.1) / 2) and two.levels == ("bf16", "fp32")
    assert two.ci_low < two.diff < two.ci_high and two.df == 5 and two.verdict(">") == "holds"
    assert two.p_plain == pytest.approx(sps.ttest_ind(a, b).pvalue) and two.diff_plain == pytest.approx(2.0)
    one = stats.factor_adjusted(a, [9.5], lv, fixed_b=True)   # the mean of the level means, weighted alike
    assert one.diff == pytest.approx(((10.1 - 9.5) + (11.05 - 9.5)) / 2) and one.df == 2
    assert one.p_plain == pytest.approx(sps.ttest_1samp(np.array(a) - 9.5, 0).pvalue)
    pair = stats.factor_adjusted(a, b, lv, lv, paired=True)
    assert pair.p_plain == pytest.approx(sps.ttest_rel(a, b).pvalue)
    assert pair.diff == pytest.approx(((2.0 + 2.1) / 2 + (2.0 + 1.9) / 2) / 2)   # gains 2.0, 2.1 / 2.0, 1.9
    # an unbalanced design against numpy's least squares
    X = np.array([[1, 1, -.5], [1, 1, -.5], [1, 1, .5], [1, 0, -.5], [1, 0, .5], [1, 0, .5]])
    y = np.array([5.0, 5.4, 6.9, 3.1, 4.6, 4.2])
    beta = np.linalg.lstsq(X, y, rcond=None)[0]
    r = stats.factor_adjusted(y[:3], y[3:], ["p", "p", "q"], ["p", "q", "q"])
    assert (r.diff, r.shift) == pytest.approx((beta[1], beta[2]))
    # three levels: an F-test of the factor, no single shift
    r3 = stats.factor_adjusted([1.0, 2.0, 3.1, 1.2], [0.1, 1.1, 2.0, 0.0], list("xyzx"), list("xyzx"))
    assert r3.shift is None and 0 <= r3.factor_p <= 1 and r3.levels == ("x", "y", "z")
    # why not
    assert stats.factor_adjusted(a, b, ["p"] * 4, ["q"] * 4) == "confounded with the arm"
    assert stats.factor_adjusted(a, b, ["p"] * 4, ["p"] * 4) == "one level"
    assert stats.factor_adjusted([1.0, 2.0], [3.0], ["p", "q"], fixed_b=True) == "too few seeds"


def test_precision_factor_removes_a_confounded_shift_simulation():
    """Known truth: two equally good methods, a precision that adds 5 seed sds, and arms that drew their
    seeds unevenly (A: 1 fp32 + 5 bf16, B: 5 fp32 + 1 bf16). Welch's t over the seed means mistakes the
    shift for a difference (72% of the time at this seed); with the precision as a factor the
    false-positive rate is back near 5% (4%)."""
    rng = np.random.default_rng(7)
    la, lb = ["fp32"] + ["bf16"] * 5, ["fp32"] * 5 + ["bf16"]
    shift_a, shift_b = np.array([0, 5, 5, 5, 5, 5.0]), np.array([0, 0, 0, 0, 0, 5.0])
    welch = adjusted = 0
    n = 400
    for _ in range(n):
        a, b = rng.normal(0, 1, 6) + shift_a, rng.normal(0, 1, 6) + shift_b
        welch += sps.ttest_ind(a, b, equal_var=False).pvalue < 0.05
        adjusted += stats.factor_adjusted(a, b, la, lb).p < 0.05
    assert welch / n > 0.5 and adjusted / n < 0.09


def _two_folders(tmp_path, dialogsum_dir):
    """Two results folders of the same runs (as two profiles of one experiment leave them): `sys` with three
    seeds in each, 5.1-5.3 above the lead in the first and 3.1-3.3 in the second, validation losses set."""
    exp = _lead_experiment(tmp_path, dialogsum_dir)
    other = tmp_path / "res2" / "sig"
    shutil.copytree(exp, other)
    for folder, base, losses in ((exp, 5.0, (3.90, 3.92, 3.91)), (other, 3.0, (4.00, 3.97, 4.05))):
        _fake_seeds(folder, "sys", lambda s, base=base: base + 0.1 * s)
        for seed, loss in zip((1, 2, 3), losses):
            f = folder / f"sys-seed{seed}" / "record.json"
            rec = json.loads(f.read_text())
            rec.setdefault("train", {})["best_val_loss"] = loss
            f.write_text(json.dumps(rec))
    return exp, other, (3.90, 3.92, 3.91), (4.00, 3.97, 4.05)


def test_zoo_compare_across_results_folders(tmp_path, dialogsum_dir, capsys):
    """`zoo compare FOLDER:RUN FOLDER:RUN`: the findings' seed-level test for runs of two folders."""
    exp, other, loss_a, loss_b = _two_folders(tmp_path, dialogsum_dir)
    capsys.readouterr()
    assert main(["compare", f"{exp}:sys", f"{other}:sys", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["verdict"] == "holds" and (j["n_a"], j["n_b"]) == (3, 3) and j["diff"] == pytest.approx(2.0)
    assert j["p"] == pytest.approx(sps.ttest_ind([5.1, 5.2, 5.3], [3.1, 3.2, 3.3], equal_var=False).pvalue)
    assert j["test"] == "Welch's t over per-seed means"
    # a per-run quantity: one value per seed, Welch's t over them
    assert main(["compare", f"{exp}:sys", f"{other}:sys", "--metric", "best_val_loss", "--op", "<", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["diff"] == pytest.approx(np.mean(loss_a) - np.mean(loss_b))
    assert j["p"] == pytest.approx(sps.ttest_ind(loss_a, loss_b, equal_var=False).pvalue)
    assert j["verdict"] == "holds"
    # a seed whose record lacks the quantity is left out of that side (and of its seed list)
    f = other / "sys-seed2" / "record.json"
    rec = json.loads(f.read_text())
    del rec["train"]["best_val_loss"]
    f.write_text(json.dumps(rec))
    assert main(["compare", f"{exp}:sys", f"{other}:sys", "--metric", "best_val_loss", "--op", "<", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["seeds"][f"{other}:sys"] == [1, 3] and j["n_b"] == 2
    assert j["p"] == pytest.approx(sps.ttest_ind(loss_a, loss_b[::2], equal_var=False).pvalue)
    # the other folder's deterministic LEAD row: a one-sample t of the seed means against it
    assert main(["compare", f"{exp}:sys", f"{other}:lead"]) == 0
    out = capsys.readouterr().out
    assert "one-sample t" in out and "verdict: holds" in out and "(deterministic; seeds 1)" in out
    assert "seeds per arm for 80% power" in out


def test_zoo_compare_errors_name_what_to_fix(tmp_path, dialogsum_dir, capsys):
    exp, other, _, _ = _two_folders(tmp_path, dialogsum_dir)
    capsys.readouterr()
    cases = [([f"{exp}:sys", f"{other}:sy"], "no run 'sy' there. Did you mean 'sys'?"),
             ([str(exp), f"{other}:sys"], "expected FOLDER:RUN"),
             ([f"{tmp_path}/nope:sys", f"{other}:sys"], "no such folder"),
             ([f"{exp}:sys", f"{exp}:sys"], "the same runs"),
             ([f"{exp}:sys", f"{other}:lead", "--metric", "best_score"], "no best_score in the records of"),
             ([f"{exp}:sys", f"{other}:sys", "--metric", "rouge9"], "unknown")]
    for argv, msg in cases:
        assert main(["compare", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err, (argv, err)
    # scored on other test examples: no per-example comparison
    for seed in (1, 2, 3):
        for name, skip in (("scores.jsonl", 1), ("predictions.jsonl", 0)):
            f = other / f"sys-seed{seed}" / name
            lines = f.read_text().splitlines()
            rows = [{**json.loads(x), "id": "other-" + str(json.loads(x)["id"])} for x in lines[skip:]]
            f.write_text("\n".join(lines[:skip] + [json.dumps(r) for r in rows]) + "\n")
    assert main(["compare", f"{exp}:sys", f"{other}:sys"]) == 2
    assert "share no test examples" in capsys.readouterr().err
