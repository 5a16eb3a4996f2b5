"""`zoo bench` at tiny shapes (structure and positive figures, no timing assertions), its FLOP model,
bounds and targets. The fast paths it measures are tested in test_kernels.py."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from conftest import tiny_experiment, write_dialogsum
from seq2seq_zoo import bench

CPU = torch.device("cpu")
TINY_PLAN = bench.Plan(warmup=1, iters=1, decode_iters=1, matmul_n=32, matmul_iters=1, scaling_steps=2,
                       beam_sizes=(1, 2), rnn_iters=1, eval_examples=6, pointer_rounds=0)


def test_bench_at_tiny_shapes_writes_json_and_table(tmp_path):
    rep = bench.run_bench(tmp_path / "bench", shape=bench.TINY, plan=TINY_PLAN, scaling=False, devices=["cpu"],
                          threads=1, progress=lambda s: None)
    saved = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert saved["shape"]["d_model"] == bench.TINY.d_model and saved["threads"] == 1
    (dev,) = rep["devices"]
    from seq2seq_zoo.utils import cpu_has_fast_bf16
    peaks = dev["matmul_peak_gflops"]
    assert dev["device"] == "cpu" and peaks["fp32"] > 0
    assert peaks["bf16"] > 0 if cpu_has_fast_bf16() else peaks["bf16"] is None   # no emulated bf16 peak
    train = dev["training"]
    assert "ours_fp32" in train and ("ours_bf16" in train) == cpu_has_fast_bf16()   # no emulated bf16
    for fig in list(train.values()) + list(dev["other_models"].values()):
        assert fig["tokens_per_s"] > 0 and fig["model_gflops"] > 0 and fig["step_s"] > 0
        assert fig["src_tgt_tokens_per_s"] > fig["tokens_per_s"]
        assert "peak_mem_mb" in fig and fig["process_max_rss_mb"] > 0
    assert {"gru", "bahdanau", "bilstm"} <= set(dev["other_models"])
    # the recurrent family: the fast implementation against the reference one, per precision, and decoding
    for name in ("gru", "bahdanau", "bilstm", "pointer_generator"):
        rec = dev["recurrent"][name]
        assert rec["params"] > 0 and "fp32" in rec["training"]
        assert ("bf16" in rec["training"]) == cpu_has_fast_bf16()
        fp32 = rec["training"]["fp32"]
        assert fp32["fast"]["tokens_per_s"] > 0 and fp32["reference"]["tokens_per_s"] > 0
        assert fp32["speedup"] == pytest.approx(fp32["reference"]["step_s"] / fp32["fast"]["step_s"])
        assert fp32["ceiling"] == pytest.approx(fp32["reference"]["step_s"] / fp32["output_s_at_peak"])
        dec = rec["decoding"]
        assert dec["speedup"] == pytest.approx(dec["reference"]["seconds"] / dec["fast"]["seconds"])
        assert dec["ceiling"] == pytest.approx(dec["reference"]["seconds"] / dec["output_s_at_peak"])
        assert dec["vocabulary_ceiling"] == pytest.approx(dec["reference"]["seconds"] / dec["vocabulary_s"])
    ec = dev["eval_cost"]
    assert ec["examples"] == 6 and ec["rouge"]["seconds"] > 0
    assert "seconds" in ec["bertscore"] or "error" in ec["bertscore"]
    for fig in dev["decoding"].values():
        assert fig["tokens"] == bench.TINY.dec_sources * bench.TINY.dec_len and fig["tokens_per_s"] > 0
    assert [r["beam_size"] for r in dev["decode_vs_beam"]] == [1, 2]
    bound = dev["decode_bound"]   # the least matmul work of a beam call at the measured peak
    assert bound["min_gflop"] == pytest.approx(bench.beam_decode_flops(bench.TINY, bench.TINY.beams) / 1e9)
    assert bound["min_s"] > 0 and all(0 < v["share_of_peak"] for v in bound["ours"].values())
    i8 = dev["int8_bound"]   # the int8 decoder with free linear layers, timed beside the others
    assert i8["seconds"] > 0 and 0 <= i8["linear_share"] < 1 and "int8_bound" not in dev["decoding"]
    if "peer_fp32" in train:  # transformers installed: the peer is measured and the targets are stated
        names = [t["target"] for t in dev["targets"]]
        assert any("peer" in n for n in names)
        for t in dev["targets"]:  # the verdict follows from the measured value
            assert t["met"] == (t["value"] <= t["goal"] if t["lower_is_better"] else t["value"] >= t["goal"])
            assert t["status"].startswith("met (" if t["met"] else "MISSED by ")
    md = (tmp_path / "bench" / "README.md").read_text()
    assert "| our Transformer | fp32 |" in md and "Hardware:" in md and "6 × params × tokens" in md
    assert "### Recurrent family" in md and "| bahdanau |" in md and "### Evaluation cost" in md
    assert "Bound: a call needs at least" in md and "Bound on the speed-up" in md
    assert "Bound on the decoding speed-up from the work both implementations share" in md


def test_flops_estimate_counts_matmul_params_per_stack():
    model, _ = bench.our_transformer(bench.TINY, CPU)
    fp = bench.flop_params(model)
    d, ff, V = bench.TINY.d_model, bench.TINY.d_ff, bench.TINY.vocab
    layer_enc = (3 * d * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d)
    assert fp["encoder"] == bench.TINY.layers * layer_enc
    assert fp["output"] == V * d + V          # the tied projection is a matmul even though shared
    assert bench.train_flops(fp, 10, 5) == 6 * (fp["encoder"] * 10 + (fp["decoder"] + fp["output"]) * 5)


def test_epoch_scaling_on_a_tiny_corpus(tmp_path):
    from seq2seq_zoo.config import load_experiment
    from seq2seq_zoo.runner import prepare_data
    write_dialogsum(tmp_path, n_train=24)
    exp = tmp_path / "e.toml"
    exp.write_text(tiny_experiment("t", '[[runs]]\nname = "a"\n', seeds=1, batch_size=4))
    spec = load_experiment(exp).runs[0]
    vocab, data, _ = prepare_data(spec, str(tmp_path), log=lambda s: None)
    res = bench.epoch_scaling(CPU, TINY_PLAN, prepared=(spec, vocab, data), progress=lambda s: None)
    assert [r["fraction"] for r in res["rows"]] == [0.25, 0.5, 1.0]
    assert [r["examples"] for r in res["rows"]] == [6, 12, 24]
    for r in res["rows"]:
        assert r["epoch_s"] > 0 and r["timed_updates"] == 2 and r["extrapolated"]
    assert res["rows"][0]["relative_time"] == 1.0


def test_targets_say_met_or_missed_by_how_much():
    res = {"default_precision": "bf16",
           "training": {"ours_bf16": {"tokens_per_s": 300.0}, "peer_bf16": {"tokens_per_s": 100.0},
                        "peer_fp32": {"tokens_per_s": 150.0}, "ours_fp32": {"tokens_per_s": 120.0}},
           "decoding": {"ours_bf16": {"tokens_per_s": 250.0}, "peer_fp32": {"tokens_per_s": 100.0}}}
    t = {x["target"].split(",")[0]: x for x in bench.targets(res)}
    train = t["training tokens/s"]
    assert train["met"] and train["value"] == pytest.approx(2.0)   # against the peer's best (fp32 here)
    fp32 = t["training tokens/s in fp32"]
    assert not fp32["met"] and "MISSED by 20%" in fp32["status"]
    dec = next(x for x in bench.targets(res) if x["target"].startswith("beam"))
    assert not dec["met"] and "MISSED by 17%" in dec["status"]


def test_target_verdicts_for_both_directions():
    assert bench.verdict("speed", 1.6, 1.5, "x")["status"] == "met (1.60x vs >= 1.5x)"
    slow = bench.verdict("epoch", 320.0, 300.0, " s", lower_is_better=True)
    assert not slow["met"] and slow["status"] == "MISSED by 7% (320.00 s vs 300 s)"
    fast = bench.verdict("epoch", 80.0, 300.0, " s", lower_is_better=True)
    assert fast["met"] and fast["status"] == "met (80.00 s vs <= 300 s)"
    aim = bench.verdict("speed", 1.6, 1.5, "x", aim=2.0)
    assert aim["met"] and aim["status"].endswith("aim 2x missed by 20%")


def test_peak_memory_sees_memory_the_block_allocates():
    """CPU: the peak is measured above the block's starting point, so a 64 MB tensor touched inside the
    block shows up (and memory that was already there does not)."""
    with bench.PeakMemory(CPU) as quiet:
        pass
    with bench.PeakMemory(CPU) as mem:
        x = torch.ones(16 * 2**20)          # 64 MB, written so the pages are resident
        assert float(x[-1]) == 1.0
    del x
    assert mem.peak_mb >= 56 and quiet.peak_mb < 32
    assert mem.process_max_rss_mb >= mem.peak_mb


@pytest.mark.skipif(bench.eole_available() is not None, reason="eole not installed (the optional second peer)")
def test_eole_peer_pairs_at_tiny_shapes():
    batch = bench.shaped_batch(bench.TINY, bench.TINY.batch, seed=1)
    res = bench.measure_eole(bench.TINY, CPU, TINY_PLAN, {"bf16": 1.0, "fp32": 1.0}, batch, None, lambda s: None)
    assert set(res["pairs"]) == {"transformer", "gru", "bahdanau", "bilstm", "pointer_generator"}
    assert res["pairs"].pop("pointer_generator") == {"eole_model": None, "none": bench.EOLE_NONE["pointer_generator"]}
    gru = bench.eole_model("gru_none", bench.TINY, CPU)   # ours' shape: no attention, no input feeding
    assert type(gru.decoder).__name__ == "StdRNNDecoder" and not gru.decoder.attentional
    assert gru.decoder.rnn.input_size == bench.TINY.rnn_emb
    for name, p in res["pairs"].items():
        assert "error" not in p, p.get("error")
        assert p["ratio"] == pytest.approx(p["ours"]["tokens_per_s"] / p["eole"]["tokens_per_s"])
        assert p["ours_params"] > 0 and p["eole_params"] > 0 and p["difference"]
        assert sum(bench.flop_params(bench.eole_model(p["eole_model"], bench.TINY, CPU)).values()) > 0
        trainer = bench.EoleTrainer(bench.eole_model(p["eole_model"], bench.TINY, CPU), batch, CPU, None)
        assert math.isfinite(trainer().detach().item())   # initialised weights, a real loss
    md = "\n".join(bench.eole_markdown(res))
    assert "| bilstm | brnn_lstm_mlp |" in md


def test_eole_markdown_names_models_without_a_counterpart():
    """Every family gets a row, also one eole cannot build (runs without eole installed)."""
    res = {"version": "0.6.4", "precision": "fp32",
           "pairs": {"gru": {"eole_model": "gru_none", "error": "ImportError: x"},
                     "pointer_generator": {"eole_model": None, "none": bench.EOLE_NONE["pointer_generator"]}}}
    md = "\n".join(bench.eole_markdown(res))
    assert "| gru | gru_none | — | — | not measured: ImportError: x |" in md
    assert "| pointer_generator | — |" in md and "no copy attention" in md


SMALL = bench.Shape(vocab=500, d_model=32, d_ff=64, heads=4, layers=2, batch=2, src_len=20, tgt_len=8, dec_sources=3,
                    dec_len=6, beams=3, dropout=0.0)


@pytest.mark.skipif(bench.peer_available() is not None, reason="transformers not installed (the HF peer)")
@pytest.mark.parametrize("attention", [False, True])
def test_beam_decode_flops_equal_what_hf_generate_multiplies(attention):
    """The decoding bound's FLOP count, in its every-beam form, equals torch's FLOP counter run over HF
    `generate` at a small shape: its linear layers alone under SDPA (whose CPU kernel the counter does not
    see), and linear layers plus the score and value products under eager attention (batched matmuls)."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import BartConfig, BartForConditionalGeneration
    torch.manual_seed(0)
    cfg = BartConfig(**bench.peer_config(SMALL))
    cfg._attn_implementation = "eager" if attention else "sdpa"
    peer = BartForConditionalGeneration(cfg)
    dec = bench.PeerDecoder(peer, bench.shaped_batch(SMALL, SMALL.dec_sources, seed=2), CPU, None, SMALL.beams,
                            SMALL.dec_len)
    with FlopCounterMode(display=False) as counter:
        dec()
    counted = counter.get_total_flops()
    assert counted == bench.beam_decode_flops(SMALL, SMALL.beams, per_hypothesis=True, attention=attention)
    # the least work: the first step with one hypothesis per source, keys/values of the sources once
    least = bench.beam_decode_flops(SMALL, SMALL.beams, attention=attention)
    d, L, S, n, k, V = SMALL.d_model, SMALL.layers, SMALL.src_len, SMALL.dec_sources, SMALL.beams, SMALL.vocab
    first_row = 2 * (L * (6 * d * d + 2 * d * SMALL.d_ff + (2 * (d + S * d) if attention else 0)) + d * V)
    assert counted - least == n * (k - 1) * first_row + 2 * n * (k - 1) * L * S * 2 * d * d


def test_decode_bound_is_the_least_work_at_the_peak():
    dec = {"ours_fp32": {"precision": "fp32", "seconds": 2.0}, "peer_fp32": {"precision": "fp32", "seconds": 3.0},
           "peer_bf16": {"precision": "bf16", "seconds": 6.0}}
    gflop = bench.beam_decode_flops(SMALL, SMALL.beams) / 1e9
    b = bench.decode_bound(SMALL, dec, gflop, "fp32")   # a rate of one call's least work a second
    assert b["min_s"] == pytest.approx(1.0)
    assert b["ours"]["ours_fp32"]["share_of_peak"] == pytest.approx(0.5)
    assert b["peer_best"] == "peer_fp32" and b["ceiling_vs_peer"] == pytest.approx(3.0)
    assert bench.decode_bound(SMALL, dec, None, "fp32") is None
    assert bench.decode_bound(SMALL, dec, gflop, "bf16") is None      # none of ours timed in bf16
    res = {"default_precision": "fp32", "decoding": {k: {**v, "tokens_per_s": 1 / v["seconds"]} for k, v in dec.items()},
           "decode_bound": b}
    row = next(x for x in bench.targets(res) if x["target"].startswith("beam"))
    assert row["ceiling"] == pytest.approx(3.0) and "allows at most 3x" in row["status"]
    text = "\n".join(bench.decode_bound_markdown(b))
    assert "**3x**" in text and "50% of that rate" in text


def test_int8_bound_is_the_peers_time_over_the_int8_decoder_without_linear_work():
    dec = {"ours_int8": {"precision": "int8", "seconds": 2.0}, "peer_fp32": {"precision": "fp32", "seconds": 6.0},
           "peer_bf16": {"precision": "bf16", "seconds": 4.0}}
    b = bench.int8_bound(dec, 0.5)
    assert b["peer_best"] == "peer_bf16" and b["ceiling_vs_peer"] == pytest.approx(8.0)
    assert b["linear_share"] == pytest.approx(0.75)
    res = {"default_precision": "fp32", "decoding": {k: {**v, "tokens_per_s": 1 / v["seconds"]} for k, v in dec.items()},
           "int8_bound": b}
    row = next(x for x in bench.targets(res) if "(int8)" in x["target"])
    assert not row["met"] and row["value"] == pytest.approx(2.0) and row["ceiling"] == pytest.approx(8.0)
    assert "allows at most 8x" in row["status"]
    text = "\n".join(bench.int8_bound_markdown(b))
    assert "**8x**" in text and "75% of its time" in text


def test_linears_free_answers_zeros_of_the_output_shape_and_restores_the_layers():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 5))
    x = torch.randn(2, 7, 4)
    before = model(x)
    with bench.linears_free(model):
        y = model[0](x)
        assert y.shape == (2, 7, 3) and not y.any()
        assert model(x).shape == (2, 7, 5) and not model(x).any()
    assert all("forward" not in m.__dict__ for m in model) and torch.equal(model(x), before)


def test_matmul_probe_is_timed_among_the_compared_calls():
    calls = []
    probe = bench.MatmulProbe(CPU, None, n=64)
    decs = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    for d in decs.values():
        d.device, d.dtype, d.tokens = CPU, None, 1
    out = bench.measure_decoding(decs, bench.Plan(decode_iters=3), lambda s: None, probe=probe)
    assert set(out) == {"a", "b"} and len(probe.times) == 3 and calls == ["a", "b"] * 4   # warm-up + 3 rounds
    assert probe.gflops == pytest.approx(2 * 64 ** 3 / bench.median(probe.times) / 1e9)


@pytest.mark.parametrize("output_layers", [1, 2])
def test_vocabulary_work_runs_the_output_layer_on_each_steps_hypotheses(output_layers, monkeypatch):
    """What the decoding bound times: the model's own output layer(s) on one row per source at the first step
    and ``beams`` rows per source after it, then log-softmax and top 2K; the model's mode is restored."""
    from seq2seq_zoo.registry import MODELS
    model = MODELS.create("bahdanau", vocab_size=50, emb_dim=6, hidden=8, output_layers=output_layers)
    rows, picks = [], []
    last = model.output[-1] if output_layers == 2 else model.output
    last.register_forward_hook(lambda m, i, o: rows.append(i[0].shape[0]))
    real_topk = torch.Tensor.topk
    monkeypatch.setattr(torch.Tensor, "topk", lambda self, k, *a, **kw: picks.append((self.dtype, k)) or
                        real_topk(self, k, *a, **kw))
    model.train()
    t = bench.vocabulary_work(model, sources=3, beams=4, steps=5, device=torch.device("cpu"), dtype=None, iters=2)
    assert t > 0 and model.training
    assert rows == [3, 12, 12, 12, 12] * 3                        # one untimed pass and two timed ones
    assert picks == [(torch.float32, 8)] * 15                     # the fp32 log-probs' top 2K


def test_output_bound_is_the_output_layers_matmuls_at_the_peak():
    # 3 MFLOP at 0.003 GFLOP/s take 1 s: a 1.5 s reference allows 1.5x
    b = bench.output_bound(3e6, 0.003, 1.5)
    assert b["output_s_at_peak"] == pytest.approx(1.0) and b["ceiling"] == pytest.approx(1.5)
    assert bench.output_bound(3e6, None, 1.5) == {}     # no peak at this precision: no bound
    # beam decoding scores one hypothesis per source at the first step, then every beam
    assert bench.decode_rows(bench.Shape(beams=4, dec_len=48), 8) == 8 + 47 * 32


# ------------------------------------------------------------------------------------ allocator settings
_RSS_PROBE = """
import os
from seq2seq_zoo.cli import keep_freed_memory
applied = keep_freed_memory()
import numpy as np
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
a = np.ones(24 << 20, dtype=np.uint8)      # touched: 24 MiB resident
before = rss()
del a
print(applied, (before - rss()) >> 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_keeps_a_freed_24_mib_buffer_for_reuse():
    """With ``keep_freed_memory`` a freed 24 MiB buffer stays in the heap for the next step's allocation;
    with glibc's defaults (ZOO_MALLOC=default) it goes back to the system (its pages fault in again)."""
    def probe(**env):
        out = subprocess.run([sys.executable, "-c", _RSS_PROBE], capture_output=True, text=True, check=True,
                             env={**os.environ, **env}).stdout.split()
        return out[0] == "True", int(out[1])
    applied, released = probe()
    if not applied:
        pytest.skip("libc is not glibc")
    assert released <= 2
    applied, released = probe(ZOO_MALLOC="default")
    assert not applied and released >= 20
