"""Self-critical policy gradient (SCST) as an objective: gradient sign, gamma = 0 is cross-entropy,
masking after EOS, rewards equal rouge-score on the decoded strings, config checks, and a tiny run
through the shared loop with ROUGE-1 validation picking best.pt."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import tiny_encoded
from rouge_score import rouge_scorer

from seq2seq_zoo.config import TrainConfig
from seq2seq_zoo.data.batching import collate
from seq2seq_zoo.data.vocab import EOS_ID, PAD_ID, UNK_ID
from seq2seq_zoo.registry import MODELS, OBJECTIVES
from seq2seq_zoo.train.loop import fit
from seq2seq_zoo.decode import rollout
from seq2seq_zoo.train.objectives import CrossEntropy, SelfCritical, scst_loss
from seq2seq_zoo.train.rewards import RewardFunction, parse_reward, row_text

CPU = torch.device("cpu")


def setup(name="pointer_generator", seed=0, **cfg_kw):
    vocab, data = tiny_encoded(8)
    torch.manual_seed(seed)
    model = MODELS.create(name, vocab_size=len(vocab), emb_dim=8, hidden=16)
    cfg = TrainConfig(objective="scst", rl_max_len=12, **cfg_kw)
    return vocab, data, model, cfg


def seq_mean_logp(model, batch, ids):
    """Teacher-forced mean log p of the given (B, T) ids (PAD after EOS), via forward."""
    b = dataclasses.replace(batch)
    tgt_in = torch.cat([torch.full_like(ids[:, :1], 2), ids[:, :-1]], 1).masked_fill(ids == PAD_ID, PAD_ID)
    tgt_in = tgt_in.masked_fill(tgt_in == EOS_ID, PAD_ID)
    b.tgt_in = tgt_in.masked_fill(tgt_in >= model.vocab_size, UNK_ID)
    b.tgt_out = ids
    lp = model(b).log_probs.float()   # the sampling distribution: without <pad>/<bos>, renormalised
    lp = lp.index_fill(-1, torch.tensor([PAD_ID, 2]), float("-inf")).log_softmax(-1)
    real = ids != PAD_ID
    tok = lp.gather(-1, ids.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (tok * real).sum(1) / real.sum(1)


@pytest.mark.parametrize("sign", [+1, -1])
def test_gradient_raises_logp_of_sample_that_beats_greedy(sign):
    vocab, data, model, cfg = setup()
    model.eval()  # no dropout: the teacher-forced check below sees the same function
    batch = collate(data[:3])
    g = torch.Generator().manual_seed(0)
    ids, logp = rollout(model, batch, 10, sample=True, generator=g)
    with torch.no_grad():
        before = seq_mean_logp(model, batch, ids)
    assert torch.allclose(before, (logp * (ids != PAD_ID)).sum(1) / (ids != PAD_ID).sum(1), atol=1e-5)
    r_s = torch.full((3,), 0.5 + 0.25 * sign)   # sign +1: the sample beats the greedy reward 0.5
    r_g = torch.full((3,), 0.5)
    loss = scst_loss(logp, ids, r_s, r_g)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= 0.05 * p.grad
        after = seq_mean_logp(model, batch, ids)
    if sign > 0:
        assert (after > before).all(), (before, after)
    else:
        assert (after < before).all(), (before, after)


def test_gamma_zero_is_exactly_cross_entropy():
    """With ``rl_ml_scale = "token"``; the default scale is checked in test_decoding_objectives.py."""
    vocab, data, model, cfg = setup(rl_gamma=0.0, rl_ml_scale="token")
    model.eval()
    batch = collate(data[:4])
    torch.manual_seed(1)
    loss, stats = SelfCritical.from_config(dataclasses.replace(cfg, label_smoothing=0.1), vocab)(model, batch)
    ce, ce_stats = CrossEntropy(0.1)(model, batch)
    assert torch.equal(loss, ce)
    assert stats["tokens"] == ce_stats["tokens"]


def test_gamma_ramp():
    vocab, _, _, cfg = setup(rl_gamma=0.9, rl_gamma_end=1.0)
    obj = SelfCritical.from_config(cfg, vocab)
    obj.progress = 0.0
    assert obj.gamma == pytest.approx(0.9)
    obj.progress = 0.5
    assert obj.gamma == pytest.approx(0.95)
    obj.progress = 2.0
    assert obj.gamma == pytest.approx(1.0)
    # rl_gamma_ramp 0.25: the same ramp in the first quarter of the run, then held at rl_gamma_end
    held = SelfCritical.from_config(setup(rl_gamma=0.9, rl_gamma_end=1.0, rl_gamma_ramp=0.25)[3], vocab)
    for progress, want in ((0.0, 0.9), (0.125, 0.95), (0.25, 1.0), (0.6, 1.0), (1.0, 1.0)):
        held.progress = progress
        assert held.gamma == pytest.approx(want), progress
    assert held.summary()["gamma_ramp"] == 0.25


def test_masking_after_eos_is_exact():
    logp = torch.tensor([[-1.0, -2.0, -3.0, 0.0], [-0.5, -0.5, -0.5, -0.5]], requires_grad=True)
    ids = torch.tensor([[7, 8, EOS_ID, PAD_ID], [5, 6, 7, EOS_ID]])
    r_s, r_g = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    loss = scst_loss(logp, ids, r_s, r_g)
    # ex 0: (0 - 1) * sum(-1, -2, -3) = 6; ex 1: (1 - 0) * sum(-.5 x4) = -2; batch mean 2
    assert float(loss.detach()) == pytest.approx(2.0)
    garbage = logp.detach().clone()
    garbage[0, 3] = -1e6                               # whatever sits after EOS cannot matter
    assert float(scst_loss(garbage, ids, r_s, r_g)) == pytest.approx(2.0)
    assert float(scst_loss(garbage, ids, r_s, r_g, reduce="mean")) == pytest.approx(0.75)
    loss.backward()
    assert logp.grad[0, 3] == 0.0 and logp.grad[0, 2] != 0.0


def test_loss_sums_log_p_over_tokens_by_default_and_means_by_option():
    """Paulus et al. eq. 15 / Rennie et al.: (r(y^) - r(y^s)) * sum_t log p(y^s_t)."""
    logp = torch.tensor([[-1.0, -2.0, -3.0, 0.0], [-0.5, -0.5, -0.5, -0.5]])
    ids = torch.tensor([[7, 8, EOS_ID, PAD_ID], [5, 6, 7, EOS_ID]])
    r_s, r_g = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    # ex 0: (0 - 1) * (-6) = 6; ex 1: (1 - 0) * (-2) = -2; batch mean 2
    assert float(scst_loss(logp, ids, r_s, r_g)) == pytest.approx(2.0)
    assert float(scst_loss(logp, ids, r_s, r_g, reduce="sum")) == pytest.approx(2.0)
    assert float(scst_loss(logp, ids, r_s, r_g, reduce="mean")) == pytest.approx(0.75)
    assert TrainConfig().rl_logp == "sum"


def test_sampling_never_draws_pad_or_bos():
    """<pad> and <bos> are never valid outputs: they are masked out of the sampling distribution, and
    log p is that of the distribution sampled from (renormalised without them)."""
    from seq2seq_zoo.data.vocab import BOS_ID
    vocab, data, model, cfg = setup(seed=1)
    with torch.no_grad():
        model.output[-1].bias[PAD_ID] += 10.0           # P_vocab's second layer (See et al.'s eq. 4)
        model.output[-1].bias[BOS_ID] += 10.0
    batch = collate(data[:8])
    ids, logp = rollout(model.eval(), batch, 12, sample=True, generator=torch.Generator().manual_seed(0))
    for row in ids.tolist():
        k = row.index(EOS_ID) if EOS_ID in row else len(row)
        assert PAD_ID not in row[:k] and BOS_ID not in row
    # the first step's log p is log_softmax over the distribution without <pad>/<bos>
    with torch.no_grad():
        lp0, _ = model.decode_step(model.encode(batch), torch.full((8,), BOS_ID))
        lp0 = lp0.float()
        assert lp0[:, [PAD_ID, BOS_ID]].exp().sum(-1).min() > 0.3       # without the mask they would be drawn
        lp0[:, [PAD_ID, BOS_ID]] = float("-inf")
        want = torch.log_softmax(lp0, -1).gather(1, ids[:, :1]).squeeze(1)
    torch.testing.assert_close(logp[:, 0].detach(), want)


def test_rollout_pads_after_eos_and_zeroes_logp():
    vocab, data, model, cfg = setup(seed=3)
    batch = collate(data[:4])
    ids, logp = rollout(model.eval(), batch, 15, sample=True, generator=torch.Generator().manual_seed(2))
    for row, lrow in zip(ids.tolist(), logp.tolist()):
        if EOS_ID in row:
            k = row.index(EOS_ID)
            assert all(t == PAD_ID for t in row[k + 1:])
            assert all(v == 0.0 for v in lrow[k + 1:])
        assert all(v <= 0.0 for v in lrow)


def test_reward_equals_rouge_score_on_decoded_strings():
    vocab, data, model, cfg = setup(rl_reward="0.25*rouge1+0.75*rougeL")
    batch = collate(data[:4])
    obj = SelfCritical.from_config(cfg, vocab)
    ids, _ = rollout(model.eval(), batch, 12, sample=True, generator=torch.Generator().manual_seed(0))
    got = obj.rewards(ids, batch)
    sc = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    for i in range(4):
        text = row_text(vocab, ids[i].tolist(), batch.oovs[i])
        s = sc.score(batch.references[i][0], text)
        assert float(got[i]) == pytest.approx(0.25 * s["rouge1"].fmeasure + 0.75 * s["rougeL"].fmeasure, abs=1e-6)


def test_reward_function_and_repetition_penalty():
    r = RewardFunction("rouge1")
    ref = "the cat sat on the mat"
    assert r(["the cat sat on the mat"], [ref]) == [pytest.approx(1.0)]
    plain = r(["cat cat cat sat"], [ref])[0]
    pen = RewardFunction("rouge1", repetition_penalty=0.5)(["cat cat cat sat"], [ref])[0]
    assert pen == pytest.approx(plain - 0.5 * 0.5)   # 2 of 4 words repeat an earlier one


def test_parse_reward():
    assert parse_reward("rouge1") == {"rouge1": 1.0}
    assert parse_reward("0.5*rouge1 + 0.5 * rougeL") == {"rouge1": 0.5, "rougeL": 0.5}
    for bad in ("", "bleu", "0.5*rouge1+x", "2**rouge1"):
        with pytest.raises(ValueError):
            parse_reward(bad)


def test_config_rejects_bad_reward_and_gamma(tmp_path):
    from seq2seq_zoo.config import ConfigError, load_experiment
    for body, match in (('train.rl_reward = "bleu"', r"exp.toml:\d+: .*rl_reward.*cannot read 'bleu'"),
                        ("train.rl_gamma = 1.5", r"exp.toml:\d+: .*rl_gamma.*must be in \[0, 1\]"),
                        ('train.val_metric = "rouge"', r"exp.toml:\d+: .*val_metric.*rouge1"),
                        ('train.rl_logp = "men"', r"exp.toml:\d+: .*rl_logp: 'men' is not one of sum, mean\. Did you "
                                                  r"mean 'mean'\?"),
                        ("train.rl_gamma_ramp = 0.0", r"exp.toml:\d+: .*rl_gamma_ramp: 0.0 must be in \(0, 1\]")):
        p = tmp_path / "exp.toml"
        p.write_text(f'[defaults]\nmodel = "gru"\ntrain.objective = "scst"\n{body}\n')
        with pytest.raises(ConfigError, match=match):
            load_experiment(p)


def test_scst_owns_its_settings():
    """SCST's options are declared by the objective (the keyword arguments it is built with, their defaults,
    types and rules); the configuration schema keeps them under their stored keys (train.rl_*) with the same
    defaults and types, and no rule of them."""
    import typing

    from seq2seq_zoo.config import schema
    from seq2seq_zoo.registry import objective_options, objective_stored_keys
    assert objective_options()["scst"] == SelfCritical.options
    hints = typing.get_type_hints(TrainConfig)
    for name, opt in SelfCritical.options.items():
        assert objective_stored_keys()[opt.stored] == ("scst", name, opt)
        assert getattr(TrainConfig(), opt.stored) == opt.default and hints[opt.stored] == opt.kind, name
    assert not [k for k in (*schema.RANGES, *schema.CHOICES) if k.startswith("rl_")]
    vocab, _, _, cfg = setup(rl_gamma=0.5, rl_gamma_end=0.7, rl_logp="mean")
    assert SelfCritical.settings(cfg) == {"reward": "rouge1", "gamma": 0.5, "gamma_end": 0.7, "gamma_ramp": 1.0,
                                          "max_len": 12, "repetition_penalty": 0.0, "logp": "mean",
                                          "ml_scale": "sequence"}
    obj = SelfCritical.from_config(cfg, vocab)
    assert (obj.gamma0, obj.gamma1, obj.logp_reduce, obj.max_len) == (0.5, 0.7, "mean", 12)


# the end of [defaults], then the runs
SCST_OLD = """
train.objective = "scst"
train.rl_gamma = 0.8
[profiles.small]
train.rl_max_len = 20
[[runs]]
name = "a"
train.rl_reward = "rougeL"
train.rl_gamma_end = 1.0
[[runs]]
name = "b"
like = "a"
train.rl_gamma_ramp = 0.5
train.rl_logp = "mean"
[runs.profiles.small]
train.rl_ml_scale = "token"
[grid]
"train.rl_repetition_penalty" = [0.0, 0.5]
"""
# the same runs in the objective's own table: inline, dotted keys and a table header
SCST_NEW = """
train.objective = "scst"
train.scst = { gamma = 0.8 }
[profiles.small]
train.scst.max_len = 20
[[runs]]
name = "a"
train = { scst = { reward = "rougeL", gamma_end = 1.0 } }
[[runs]]
name = "b"
like = "a"
[runs.train.scst]
gamma_ramp = 0.5
logp = "mean"
[runs.profiles.small]
train.scst.ml_scale = "token"
[grid]
"train.scst.repetition_penalty" = [0.0, 0.5]
"""


def test_scst_table_gives_the_runs_the_old_keys_give(tmp_path, monkeypatch):
    """``train.scst = {...}`` in every layer of a file (defaults, a profile, a run, ``like``, a run's profile, a
    grid) resolves to the very spec.json the old ``train.rl_*`` keys give; the objective is built with its
    own options only."""
    from conftest import tiny_experiment

    from seq2seq_zoo.config import load, load_experiment
    monkeypatch.setattr(load, "_try_build", lambda *a, **k: None)   # the meta-device builds: not what is compared
    from seq2seq_zoo.utils.io import dumps_json
    specs = {}
    for tag, runs in (("old", SCST_OLD), ("new", SCST_NEW)):
        p = tmp_path / f"{tag}.toml"
        p.write_text(tiny_experiment("e", runs, seeds=1), encoding="utf-8")
        specs[tag] = {prof: load_experiment(p, profile=prof).runs for prof in (None, "small")}
    for prof in (None, "small"):
        old, new = specs["old"][prof], specs["new"][prof]
        assert [s.name for s in new] == ["a-repetition_penalty0.0", "a-repetition_penalty0.5",
                                         "b-repetition_penalty0.0", "b-repetition_penalty0.5"]
        assert [s.name.replace("-rl_", "-") for s in old] == [s.name for s in new]   # a grid key names the runs
        assert [dumps_json({**s.to_dict(), "name": ""}) for s in old] == [dumps_json({**s.to_dict(), "name": ""}) for s in new]
    b = SelfCritical.settings(specs["new"]["small"][3].train)
    assert b == {"reward": "rougeL", "gamma": 0.8, "gamma_end": 1.0, "gamma_ramp": 0.5, "max_len": 20,
                 "repetition_penalty": 0.5, "logp": "mean", "ml_scale": "token"}
    assert SelfCritical.settings(specs["new"][None][0].train)["max_len"] == 48   # the profile's own


def test_a_later_layer_overrides_either_spelling(tmp_path):
    """A run's ``train.scst.gamma`` overrides the defaults' ``train.rl_gamma`` and the other way round; one
    layer giving both spellings of an option is refused."""
    from conftest import tiny_experiment

    from seq2seq_zoo.config import ConfigError, load_experiment
    p = tmp_path / "e.toml"
    p.write_text(tiny_experiment("e", '[[runs]]\nname = "a"\ntrain.scst.gamma = 0.5\n[[runs]]\nname = "b"\n'
                                 'train.rl_gamma = 0.25\n', seeds=1,
                                 extra_defaults='train.rl_gamma = 0.9\ntrain.scst.gamma_end = 1.0'), encoding="utf-8")
    assert [(s.train.rl_gamma, s.train.rl_gamma_end) for s in load_experiment(p).runs] == [(0.5, 1.0), (0.25, 1.0)]
    p.write_text(tiny_experiment("e", '[[runs]]\nname = "a"\ntrain.rl_gamma = 0.5\ntrain.scst.gamma = 0.4\n',
                                 seeds=1), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"e\.toml:\d+: runs\[0\]\.train\.scst\.gamma: given twice, also as "
                                          r"train\.rl_gamma"):
        load_experiment(p)


@pytest.mark.parametrize("body,line,key,words", [
    ('train.scst = { reward = "rouge1", gamm = 0.9 }', 26, "runs[0].train.scst.gamm", "Did you mean 'gamma'?"),
    ("[runs.train.scst]\nmax_len = 8\nmax_lenn = 9", 28, "runs[0].train.scst.max_lenn", "Did you mean 'max_len'?"),
    ("train.scst.gamma = 1.5", 26, "runs[0].train.scst.gamma", "1.5 must be in [0, 1]"),
    ('train.scst = { logp = "men" }', 26, "runs[0].train.scst.logp", "'men' is not one of sum, mean. Did you mean 'mean'?"),
    ('train.scst = { max_len = "8" }', 26, "runs[0].train.scst.max_len", "expected int, got str '8'"),
    ("train.scst = 3", 26, "runs[0].train.scst", "must be a table of the objective's options"),
    ('[grid]\n"train.scst.gama" = [0.5]', 27, "grid.train.scst.gama", "Did you mean 'gamma'?"),
])
def test_a_bad_key_in_the_objective_table_names_file_line_and_key(tmp_path, capsys, body, line, key, words):
    """Keys and values under ``train.scst`` are checked by the objective's declarations: one line naming the
    file, the line, the key as written and what to do; exit status 2 (line 24 is the run's header)."""
    from conftest import run_cli, tiny_experiment
    p = tmp_path / "e.toml"
    p.write_text(tiny_experiment("e", f'[[runs]]\nname = "r"\n{body}\n', seeds=1), encoding="utf-8")
    assert p.read_text().splitlines()[23] == "[[runs]]"
    assert run_cli(["run", str(p), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"zoo run: error: {p}:{line}: {key}: "), err
    assert words in err[0]


def test_a_committed_record_with_the_old_keys_is_the_run_the_table_gives(tmp_path, capsys):
    """A committed SCST record (train.rl_* in its spec) loads, gives the objective the same options, and is
    the run experiments/scst.toml (written with train.scst tables) plans: ``zoo run`` skips it as done."""
    import json
    import shutil
    from pathlib import Path

    from conftest import run_cli

    from seq2seq_zoo import reuse
    from seq2seq_zoo.config import RunSpec, load_experiment
    root = Path(__file__).resolve().parent.parent
    rec_path = root / "results" / "scst" / "rl-seed2" / "record.json"
    record = json.loads(rec_path.read_text(encoding="utf-8"))
    assert "rl_gamma" in record["spec"]["train"] and "scst" not in record["spec"]["train"]
    assert "train.scst" in (root / "experiments" / "scst.toml").read_text(encoding="utf-8")
    old = RunSpec.from_dict(record["spec"])
    spec = next(s for s in load_experiment(root / "experiments" / "scst.toml", profile="cpu").runs
                if s.name == "rl-seed2")
    assert SelfCritical.settings(old.train) == SelfCritical.settings(spec.train)
    assert SelfCritical.settings(spec.train)["max_len"] == 32 and SelfCritical.settings(spec.train)["gamma"] == 0.9
    assert reuse.drift(spec.to_dict(), record) == []
    results = tmp_path / "results"
    (results / "scst" / "rl-seed2").mkdir(parents=True)
    shutil.copy(rec_path, results / "scst" / "rl-seed2" / "record.json")
    assert run_cli(["run", str(root / "experiments" / "scst.toml"), "--profile", "cpu", "--only", "rl-seed2",
                    "--results", str(results), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "seed 2: done, skipped" in out and "train.scst.max_len = 32" in out


def test_scst_through_the_loop_with_rouge_validation(tmp_path):
    vocab, data, model, cfg = setup(rl_gamma=0.5, epochs=2, batch_size=4, val_every=2, val_metric="rouge1",
                                    val_max=4, precision="fp32", lr=1e-3)
    assert "scst" in OBJECTIVES.names()
    st = fit(model, data, data[:4], cfg, seed=0, ckpt_dir=tmp_path, device=CPU, progress=False,
             log=lambda *a: None, vocab=vocab)
    assert st.step == 4
    scores = [p["val_rouge1"] for p in st.val_curve]
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)
    assert st.best_score == max(scores)
    assert (tmp_path / "best.pt").exists()
    s = st.objective_stats
    assert s["steps"] == 4 and s["reward_seconds"] > 0 and 0 <= s["mean_greedy_reward"] <= 1


def test_fine_tuning_scores_the_starting_point_first(tmp_path):
    vocab, data, model, cfg = setup(rl_gamma=0.5, epochs=1, batch_size=4, val_every=2, val_metric="rouge1",
                                    val_max=4, precision="fp32", init_from="some-run")
    st = fit(model, data, data[:4], cfg, seed=0, ckpt_dir=tmp_path, device=CPU, progress=False,
             log=lambda *a: None, vocab=vocab)
    assert [p["step"] for p in st.val_curve] == [0, 2]
    assert st.best_score == max(p["val_rouge1"] for p in st.val_curve)


def test_an_objective_without_stored_keys_keeps_its_table_in_the_spec(tmp_path, monkeypatch):
    """A new objective's options (no stored field) are its table in the file, in spec.json and records (only
    where given, so every other spec keeps its bytes), read back and checked by its declarations, and the
    objective is built with them."""
    from conftest import tiny_experiment

    from seq2seq_zoo.config import ConfigError, RunSpec, load_experiment
    from seq2seq_zoo.models.base import at_least
    from seq2seq_zoo.registry import OBJECTIVES
    from seq2seq_zoo.train.objectives import Option

    class Weighted(CrossEntropy):
        options = {"weight": Option(1.0, "the loss times this", at_least(0)), "note": Option("", "words")}

        def __init__(self, label_smoothing=0.0, vocab=None, *, weight, note, **_):
            super().__init__(label_smoothing)
            self.weight, self.note = weight, note

    Weighted._registry_name = "zz_weighted"
    monkeypatch.setitem(OBJECTIVES._entries, "zz_weighted", Weighted)
    p = tmp_path / "e.toml"
    p.write_text(tiny_experiment("e", '[[runs]]\nname = "a"\ntrain.zz_weighted = { weight = 2.5 }\n'
                                 '[[runs]]\nname = "b"\n', seeds=1,
                                 extra_defaults='train.objective = "zz_weighted"\ntrain.zz_weighted.note = "x"'),
                 encoding="utf-8")
    a, b = load_experiment(p).runs
    assert a.to_dict()["train"]["zz_weighted"] == {"note": "x", "weight": 2.5}
    assert list(a.to_dict()["train"])[-1] == "zz_weighted"        # after the fields: the rest keeps its order
    assert RunSpec.from_dict(a.to_dict()).to_dict() == a.to_dict()
    assert Weighted.settings(b.train) == {"weight": 1.0, "note": "x"}
    obj = Weighted.from_config(a.train)
    assert (obj.weight, obj.note) == (2.5, "x")
    ce = tiny_experiment("e", '[[runs]]\nname = "a"\n', seeds=1)
    p.write_text(ce, encoding="utf-8")
    assert "zz_weighted" not in load_experiment(p).runs[0].to_dict()["train"]
    p.write_text(tiny_experiment("e", '[[runs]]\nname = "a"\ntrain.zz_weighted = { weight = -1.0 }\n', seeds=1),
                 encoding="utf-8")
    with pytest.raises(ConfigError, match=r"e\.toml:26: runs\[0\]\.train\.zz_weighted\.weight: -1\.0 must be >= 0"):
        load_experiment(p)
    bad = {**a.to_dict(), "train": {**a.to_dict()["train"], "zz_weighted": {"wieght": 2.0}}}
    with pytest.raises(ConfigError, match=r"train\.zz_weighted\.wieght: unknown option of objective 'zz_weighted'\. "
                                          r"Did you mean 'weight'\?"):
        RunSpec.from_dict(bad)
