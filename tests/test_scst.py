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
    """SCST's rl_* settings are declared by the objective (the keys it is built with, and their rules); the
    configuration schema keeps their defaults for the record but no rule of them."""
    from seq2seq_zoo.config import schema
    from seq2seq_zoo.registry import objective_option_rules
    assert set(SelfCritical.options) == set(SelfCritical.option_rules) <= set(objective_option_rules())
    assert not [k for k in (*schema.RANGES, *schema.CHOICES) if k.startswith("rl_")]
    vocab, _, _, cfg = setup(rl_gamma=0.5, rl_gamma_end=0.7, rl_logp="mean")
    obj = SelfCritical.from_config(cfg, vocab)
    assert (obj.gamma0, obj.gamma1, obj.logp_reduce) == (0.5, 0.7, "mean")


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
