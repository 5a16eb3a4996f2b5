"""The bench report as Markdown (OUT/README.md)."""
from __future__ import annotations

from typing import Any

from seq2seq_zoo.bench.gpu import GPU_SHAPE_VARIANTS
from seq2seq_zoo.bench.int8 import int8_markdown
from seq2seq_zoo.bench.timing import number as _fmt


def markdown(report: dict[str, Any]) -> str:
    hw = report["hardware"]
    L = ["# zoo bench", ""]
    L.append(f"`{report['command']}` — {report['date']}, {report['wall_s']:.0f} s in all"
             + (" (quick: fewer iterations)" if report["quick"] else "") + ".")
    L.append("")
    L.append(f"Hardware: {hw.get('cpu')}, {hw.get('logical_cpus')} logical CPUs, bf16 matmul instructions: "
             f"{report.get('cpu_bf16_isa', 'unknown')}{', GPU ' + hw['gpu'] if hw.get('gpu') else ''}; "
             f"torch {hw.get('torch')}{', transformers ' + report['transformers'] if report.get('transformers') else ''}; "
             f"bf16 autocast by default on CPU: {'yes' if report['cpu_fast_bf16'] else 'no'}.")
    if report.get("load_before") is not None:
        L.append(f"torch threads: {report['threads']} — {report['threads_reason']}. Load average (1 min) before / after: "
                 f"{report['load_before']:.1f} / {report.get('load_after') or 0:.1f}"
                 + (f"; OMP_WAIT_POLICY={report['omp_wait_policy']}" if report.get("omp_wait_policy") else "") + ".")
    s = report["shape"]
    L.append(f"Shapes: Transformer d_model {s['d_model']}, d_ff {s['d_ff']}, {s['heads']} heads, {s['layers']}+"
             f"{s['layers']} layers, vocabulary {s['vocab']:,}, dropout {s['dropout']}; training batch "
             f"{s['batch']} x source {s['src_len']} x target {s['tgt_len']} (random tokens); decoding "
             f"{s['dec_sources']} sources x {s['dec_len']} generated tokens. Recurrent models: emb {s['rnn_emb']}, "
             f"hidden {s['rnn_hidden']}.")
    L.append("")
    L.append("These machines are shared and noisy: the timed iterations of compared models are interleaved "
             "and the median is taken; **ratios measured in the same run are the headline**, absolute "
             "figures vary from run to run.")
    for dev in report["devices"]:
        L += ["", f"## {dev['device']}", ""]
        if dev.get("targets"):
            L += ["### Targets", "", "| target | status |", "|---|---|"]
            L += [f"| {t['target']} | {'✅ ' if t['met'] else '❌ '}{t['status']} |" for t in dev["targets"]]
            L.append("")
        pk = dev["matmul_peak_gflops"]
        L += ["### Training (one full update: forward, loss, backward, clipping, optimizer step)", "",
              f"Matmul peak measured in this run ({dev['matmul_n']}³): bf16 "
              f"{_fmt(pk['bf16']) if pk.get('bf16') else '— (no bf16 matmul instructions)'} GFLOP/s, "
              f"fp32 {pk['fp32']:.0f} GFLOP/s. Model FLOP/s = 6 × params × tokens per stack: 6 × (encoder "
              "matmul params × source tokens + (decoder + output projection) matmul params × target tokens); "
              "embedding lookups and attention scores not counted. Tokens/s = non-pad target tokens.", "",
              "| model | precision | target tok/s | src+tgt tok/s | step (s) | model GFLOP/s | MFU vs bf16 peak "
              "| MFU vs fp32 peak | peak memory (MB) |", "|---|---|---|---|---|---|---|---|---|"]
        rows = [(k, v) for k, v in dev["training"].items()] + [(k, v) for k, v in dev.get("other_models", {}).items()]
        for name, f in rows:
            label = {"ours": "our Transformer", "peer": "HF BART (peer)"}.get(name.split("_")[0], name) \
                if name.startswith(("ours_", "peer_")) else name
            mfu_b = f"{100 * f['mfu_bf16']:.0f}%" if f.get("mfu_bf16") else "—"
            mfu_f = f"{100 * f['mfu_fp32']:.0f}%" if f.get("mfu_fp32") else "—"
            L.append(f"| {label} | {f['precision']} | {_fmt(f['tokens_per_s'])} | {_fmt(f['src_tgt_tokens_per_s'])} | "
                     f"{f['step_s']:.3f} | {_fmt(f['model_gflops'])} | {mfu_b} | {mfu_f} | {_fmt(f.get('peak_mem_mb'))} |")
        tr = dev["training"]
        ratios = []
        for p in ("fp32", "bf16", "fp16"):
            if f"ours_{p}" in tr and f"peer_{p}" in tr:
                ratios.append(f"{p} {tr[f'ours_{p}']['tokens_per_s'] / tr[f'peer_{p}']['tokens_per_s']:.2f}x")
        if ratios:
            L += ["", "Ours / peer at the same precision: " + ", ".join(ratios) + "."]
        L += gpu_shape_markdown(dev.get("gpu_shape"))
        L += ["", f"### Beam-{s['beams']} decoding ({s['dec_sources']} sources x {s['dec_len']} tokens, cached "
              "keys/values, all beams as one batch)", "",
              "| model | precision | generated tok/s | seconds | peak memory (MB) |", "|---|---|---|---|---|"]
        for name, f in dev["decoding"].items():
            label = "our Transformer" if name.startswith("ours_") else "HF BART `generate` (peer)"
            L.append(f"| {label} | {f['precision']} | {_fmt(f['tokens_per_s'])} | {f['seconds']:.2f} | "
                     f"{_fmt(f.get('peak_mem_mb'))} |")
        L += decode_bound_markdown(dev.get("decode_bound"))
        L += int8_bound_markdown(dev.get("int8_bound"))
        L += ["", f"### Decoding time against beam size (our Transformer, {dev['default_precision']})", "",
              "| beam | seconds | generated tok/s | time / beam-1 time |", "|---|---|---|---|"]
        b1 = dev["decode_vs_beam"][0]["seconds"]
        for r in dev["decode_vs_beam"]:
            L.append(f"| {r['beam_size']} | {r['seconds']:.2f} | {_fmt(r['tokens_per_s'])} | {r['seconds'] / b1:.2f} |")
        L += int8_markdown(dev.get("int8"), s)
        L += recurrent_markdown(dev, s)
        L += eole_markdown(dev.get("eole"))
        L += eval_cost_markdown(dev.get("eval_cost"))
        L += pointer_full_markdown(dev.get("pointer_full"))
        L += pointer_full_markdown(dev.get("pointer_full_bf16"))
        sc = dev.get("scaling")
        if sc:
            L += ["", f"### Epoch time against training-set size ({sc['experiment']} `{sc['profile']}` profile, run "
                  f"`{sc['run']}`, {sc['dataset']}, {sc['precision']})", "",
                  f"Method: {sc['method']}. Setup (reading, vocabulary, model) {sc['setup_s']:.0f} s, not counted.", "",
                  "| training set | dialogues | batches | epoch (s) | data (s) | data share | target tok/s "
                  "| time / 25% time | size / 25% size |", "|---|---|---|---|---|---|---|---|---|"]
            for r in sc["rows"]:
                L.append(f"| {int(100 * r['fraction'])}% | {r['examples']:,} | {r['batches']} | {r['epoch_s']:.0f} | "
                         f"{r['data_s']:.1f} | {100 * r['data_share']:.1f}% | {_fmt(r['tokens_per_s'])} | "
                         f"{r['relative_time']:.2f} | {r['relative_size']:.2f} |")
        cp = dev.get("compile")
        if cp:
            L += ["", "### torch.compile (our Transformer's encoder and decoder stacks, training step)", ""]
            if "error" in cp:
                L.append(f"Not measured: {cp['error']}.")
            else:
                L.append(f"Compile (first step) {cp['compile_s']:.0f} s; steady step eager {cp['eager_step_s']:.2f} s, "
                         f"compiled {cp['compiled_step_s']:.2f} s ({cp['speedup']:.2f}x): "
                         + (f"pays after {cp['pays_after_steps']:.0f} steps." if cp["pays_after_steps"]
                            else "never pays, so training does not use it."))
        if dev.get("notes"):
            L += ["", "Notes:"] + [f"- {n}" for n in dev["notes"]]
    L += ["", "Figures: `bench.json` beside this file (every timed iteration included). Re-run: `zoo bench`."]
    return "\n".join(L) + "\n"


def decode_bound_markdown(b: dict[str, Any] | None) -> list[str]:
    """The decoding bound (decode_bound): the least matmul work of a call at the rate of a product timed
    among the decoders."""
    if not b:
        return []

    def pct(x):
        return f"{100 * x:.0f}%" if x >= 0.01 else f"{100 * x:.2g}%"

    ours = ", ".join(f"{k[5:]} {v['seconds']:.2f} s = {pct(v['share_of_peak'])} of that rate"
                     for k, v in b["ours"].items())
    line = (f"Bound: a call needs at least {b['min_gflop']:.1f} GFLOP of matmuls (encoder and cross-attention "
            f"keys/values once per source, one hypothesis per source at the first step, then every beam; HF "
            f"`generate` does {b['peer_gflop']:.1f}, every beam from the first step), {1e3 * b['min_s']:.3g} ms at "
            f"the rate of a {b['precision']} square product timed among the decoders ({_fmt(b['peak_gflops'])} "
            f"GFLOP/s, median: the same load as theirs). Ours: {ours}.")
    if b.get("ceiling_vs_peer"):
        line += (f" The peer's {b['peer_best'][5:]} time over that least time, **{b['ceiling_vs_peer']:.3g}x**, is "
                 "the highest decoding ratio against the peer that this machine's matmul rate allows.")
    if b["ours"] and max(v["share_of_peak"] for v in b["ours"].values()) < 0.5:
        line += (" Ours is far from that rate, so the matmul rate is not what bounds decoding here: the many "
                 "small per-step operations are.")
    return ["", line]


def int8_bound_markdown(b: dict[str, Any] | None) -> list[str]:
    """The int8 bound (flops.int8_bound): the int8 decoder's time with its linear layers taking none."""
    if not b:
        return []
    line = (f"int8 bound: the int8 decoder with its linear layers answering zeros without computing them "
            f"(`bench.measure.linears_free`; everything else as in int8: attention products, softmax, "
            f"layer norms, beam bookkeeping, in fp32) takes {b['seconds']:.2f} s")
    if "linear_share" in b:
        line += f", so its linear layers are {100 * b['linear_share']:.0f}% of its time"
    if "ceiling_vs_peer" in b:
        line += (f". The peer's {b['peer_best'][5:]} time over it, **{b['ceiling_vs_peer']:.3g}x**, is the highest "
                 "ratio any int8 kernel for the linear layers could give this decoder")
    return ["", line + "."]


def gpu_shape_markdown(gs: dict[str, Any] | None) -> list[str]:
    """The GPU-sized training stage (CUDA only): model FLOP/s against the measured peak."""
    if not gs:
        return []
    o = gs["options"]
    mfu = "—" if gs["mfu"] is None else f"{100 * gs['mfu']:.0f}%"
    L = ["", f"### Training at a GPU-sized shape ({gs['precision']})", "",
         f"Our Transformer, d_model {o['d_model']}, d_ff {o['d_ff']}, {o['heads']} heads (head size "
         f"{o['d_model'] // o['heads']}), {o['layers']}+{o['layers']} layers, {gs['params']:,} parameters; "
         f"token batches (`train.batch_size = 0`, `train.max_tokens = {gs['max_tokens']}`) of "
         f"{min(gs['batch_examples'])}-{max(gs['batch_examples'])} examples with sources and targets of "
         "varied length. Median over the timed updates:", "",
         "| model GFLOP/s | peak GFLOP/s | MFU | target tok/s | peak memory (MB) |", "|---|---|---|---|---|",
         f"| {_fmt(gs['model_gflops'])} | {_fmt(gs['peak_gflops'])} ({gs['peak_kind']}) | {mfu} | "
         f"{_fmt(gs['tokens_per_s'])} | {_fmt(gs['peak_mem_mb'])} |"]
    if gs.get("variants"):
        L += ["", "The same model, seed and batches with one thing changed, timed interleaved with the runs' own "
              f"setting (cuDNN attention {'on' if gs.get('cudnn_attention') else 'off'}, eager). The first pass "
              "over the batches (every shape new) pays cuDNN's graph builds and compilation:", "",
              "| variant | model GFLOP/s | MFU | vs the runs' setting | first pass (s) |", "|---|---|---|---|---|",
              f"| the runs' setting | {_fmt(gs['model_gflops'])} | {mfu} | 1.00x | {gs.get('first_pass_s', 0):.1f} |"]
        for v, f in gs["variants"].items():
            what = GPU_SHAPE_VARIANTS.get(v, v)
            if "error" in f:
                L.append(f"| {what} | not measured: {f['error'][:100]} | | | |")
                continue
            vm = "—" if f["mfu"] is None else f"{100 * f['mfu']:.0f}%"
            L.append(f"| {what} | {_fmt(f['model_gflops'])} | {vm} | {f['vs_default']:.2f}x | {f['first_pass_s']:.1f} |")
    return L


def recurrent_markdown(dev: dict[str, Any], shape: dict[str, Any]) -> list[str]:
    """The recurrent family's table: each model's fast implementation against ``impl = "reference"``,
    timed interleaved in this run."""
    rec = dev.get("recurrent")
    if not rec:
        return []
    L = ["", "### Recurrent family: fast implementation against the previous one (`impl = \"reference\"`)", "",
         f"Same run, interleaved, same batch (training: {shape['batch']} x source {shape['src_len']} x target "
         f"{shape['tgt_len']}; decoding: beam {shape['beams']}, {shape['dec_sources']} sources x {shape['dec_len']} "
         f"tokens, {dev['default_precision']}). Speed-up = reference time / fast time.", "",
         "| model | params | precision | fast tok/s | reference tok/s | speed-up | fast peak memory (MB) "
         "| reference peak memory (MB) |", "|---|---|---|---|---|---|---|---|"]
    for name, r in rec.items():
        for p, row in r["training"].items():
            f, ref = row["fast"], row.get("reference")
            L.append(f"| {name} | {r['params']:,} | {p} training | {_fmt(f['tokens_per_s'])} | "
                     + (f"{_fmt(ref['tokens_per_s'])} | **{row['speedup']:.2f}x** | " if ref else
                        f"fails here ({row.get('reference_error', '')[:60]}) | — | ")
                     + f"{_fmt(f.get('peak_mem_mb'))} | {_fmt(ref.get('peak_mem_mb')) if ref else '—'} |")
        d = r.get("decoding", {})
        if "fast" in d:
            L.append(f"| {name} | {r['params']:,} | {d['fast']['precision']} beam-{shape['beams']} decoding | "
                     f"{_fmt(d['fast']['tokens_per_s'])} | {_fmt(d['reference']['tokens_per_s'])} | "
                     f"**{d['speedup']:.2f}x** | {_fmt(d['fast'].get('peak_mem_mb'))} | "
                     f"{_fmt(d['reference'].get('peak_mem_mb'))} |")
    bounds = [f"{name} {p} training {row['ceiling']:.2f}x ({row['output_s_at_peak']:.2f} of "
              f"{row['reference']['step_s']:.2f} s)"
              for name, r in rec.items() for p, row in r["training"].items() if row.get("ceiling")]
    bounds += [f"{name} decoding {r['decoding']['ceiling']:.2f}x ({r['decoding']['output_s_at_peak']:.2f} of "
               f"{r['decoding']['reference']['seconds']:.2f} s)"
               for name, r in rec.items() if r.get("decoding", {}).get("ceiling")]
    vocab = [f"{name} {r['decoding']['vocabulary_ceiling']:.2f}x ({r['decoding']['vocabulary_s']:.3g} of "
             f"{r['decoding']['reference']['seconds']:.3g} s)"
             for name, r in rec.items() if r.get("decoding", {}).get("vocabulary_ceiling")]
    if vocab:
        L += ["", "Bound on the decoding speed-up from the work both implementations share in the one beam decoder: "
              "per step the output layer, the fp32 log-softmax and each row's top 2K over the vocabulary, timed alone "
              "(first time in brackets; the reference's decoding time second): " + "; ".join(vocab) + "."]
    if bounds:
        L += ["", "Bound on the speed-up: both implementations do the same output-layer matmuls (training: 6 × output "
              "params × target tokens; beam decoding: 2 × output params × hypotheses, summed over the steps); at the "
              "rate of a square product timed among them (median) those alone take the first time in brackets (the "
              "reference's whole time second), so no fast path can beat the reference by more than: "
              + "; ".join(bounds) + "."]
    return L


def _table_head(title: str, columns: list[str]) -> list[str]:
    """A markdown section heading and the header rows of its table."""
    return ["", f"### {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def eole_markdown(eo: dict[str, Any] | None) -> list[str]:
    if not eo:
        return []
    L = _table_head(f"Second peer: eole {eo.get('version') or ''} (training, {eo['precision']}, interleaved)",
                    ["ours", "eole model", "ours tok/s", "eole tok/s", "ours / eole", "params ours / eole",
                     "shape difference"])
    for name, p in eo["pairs"].items():
        if "error" in p:
            L.append(f"| {name} | {p['eole_model']} | — | — | not measured: {p['error'][:80]} | | |")
            continue
        if "none" in p:
            L.append(f"| {name} | — | — | — | — | | {p['none']} |")
            continue
        L.append(f"| {name} | {p['eole_model']} | {_fmt(p['ours']['tokens_per_s'])} | {_fmt(p['eole']['tokens_per_s'])} "
                 f"| **{p['ratio']:.2f}x** | {p['ours_params']:,} / {p['eole_params']:,} | "
                 f"{p['difference']} |")
    return L


def eval_cost_markdown(ec: dict[str, Any] | None) -> list[str]:
    if not ec:
        return []
    L = _table_head(f"Evaluation cost: scoring {ec['examples']:,} summaries ({ec['words_per_summary']} words each, "
                    "one reference)", ["metric", "seconds", "summaries/s", "peak memory (MB)"])
    for name in ("rouge", "bertscore"):
        m = ec.get(name, {})
        label = {"rouge": "ROUGE-1/2/L/Lsum (rouge-score, stemmer)",
                 "bertscore": f"BERTScore ({m.get('backbone') or 'default backbone'})"}[name]
        if "error" in m:
            L.append(f"| {label} | not measured: {m['error']} | | |")
        else:
            L.append(f"| {label} | {m['seconds']:.1f} | {_fmt(m['examples_per_s'])} | {_fmt(m.get('peak_mem_mb'))} |")
    return L


def pointer_full_markdown(pf: dict[str, Any] | None) -> list[str]:
    """The full-size pointer-generator stage (``pointer_full``): seconds per update, the shared-work bound and
    the epoch projection."""
    if not pf:
        return []
    c = pf["shape"]
    prec = pf.get("precision", "fp32")
    L = _table_head(f"Full-size pointer-generator + coverage update, one thread, {prec} (batch {c['batch']}, source "
                    f"{c['src_len']}, target {c['tgt_len']}, vocabulary {c['vocab']:,}, hidden {c['hidden']}, "
                    f"embeddings {c['emb_dim']}; median of {pf['rounds']} interleaved updates)",
                    ["code", "s per update (CPU)", "s per update (wall)", "target tok/s (CPU)", "loss"])
    for k in ("ours", "baseline"):
        if k in pf:
            r = pf[k]
            at = f", commit {r['commit']}" if r.get("commit") else ""
            L.append(f"| {k} ({r['package']}{at}) | {r['cpu_s']:.3f} | {r['step_s']:.3f} | {_fmt(r['tokens_per_cpu_s'])} | "
                     f"{r['loss']:.4f} |")
    w, e = pf["shared_work"], pf["epoch"]
    L += ["", f"Bound: the encoder LSTM forward and backward ({w['encoder_lstm_s']:.3f} s) and the output layer's three "
              f"products ({w['output_products_s']:.3f} s), which any implementation with PyTorch's kernels runs, take "
              f"{w['floor_s']:.3f} s"
          + (f"; ours is {pf['speedup_cpu']:.2f}x the baseline on CPU time ({pf['speedup_wall']:.2f}x wall), at most "
             f"{pf['ceiling']:.2f}x allowed." if "speedup_cpu" in pf else "."),
          "", f"An epoch of the {e['updates']:,} updates: {e['seconds'] / 60:.1f} min of CPU; "
              f"{e['convergence_updates'][0]:,}-{e['convergence_updates'][1]:,} updates to convergence: "
              f"{e['convergence_hours'][0]:.1f}-{e['convergence_hours'][1]:.1f} h (targets at the file's 64-token cap: "
              "an upper bound)."]
    return L
