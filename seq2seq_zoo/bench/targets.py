"""The speed targets as verdicts: each measured value, whether it meets its target and by how much."""
from __future__ import annotations

from typing import Any


from seq2seq_zoo.bench.shapes import (
    TARGET_DECODE_VS_PEER, TARGET_EPOCH_S, TARGET_FP32_PARITY, TARGET_GPU_MFU, TARGET_POINTER_VS_BASELINE,
    TARGET_TRAIN_AIM,
    TARGET_TRAIN_VS_PEER)


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Each speed target (TARGET_*) with the measured value, whether it is met, and by how much it is
    missed (or exceeded)."""
    out = []
    tr = res.get("training", {})
    dp = res.get("default_precision", "fp32")
    ours = tr.get(f"ours_{dp}", {}).get("tokens_per_s")
    peer_best_name = max((k for k in tr if k.startswith("peer_")), key=lambda k: tr[k]["tokens_per_s"], default=None)
    if ours and peer_best_name:
        r = ours / tr[peer_best_name]["tokens_per_s"]
        out.append(verdict(f"training tokens/s, ours ({dp}, default) / peer's best ({peer_best_name[5:]})", r,
                           TARGET_TRAIN_VS_PEER, "x", aim=TARGET_TRAIN_AIM))
    if tr.get("ours_fp32") and tr.get("peer_fp32"):
        r = tr["ours_fp32"]["tokens_per_s"] / tr["peer_fp32"]["tokens_per_s"]
        out.append(verdict("training tokens/s in fp32, ours / peer (parity floor)", r, TARGET_FP32_PARITY, "x"))
    dec = res.get("decoding", {})
    d_ours = dec.get(f"ours_{dp}", {}).get("tokens_per_s")
    d_peer = max((v["tokens_per_s"] for k, v in dec.items() if k.startswith("peer_")), default=None)
    if d_ours and d_peer:
        best = max((k for k in dec if k.startswith("peer_")), key=lambda k: dec[k]["tokens_per_s"])
        row = verdict(f"beam-{res.get('beams', 4)} decoding tokens/s, ours ({dp}) / peer's best ({best[5:]})",
                      d_ours / d_peer, TARGET_DECODE_VS_PEER, "x")
        ceiling = res.get("decode_bound", {}).get("ceiling_vs_peer")
        if ceiling:
            row["ceiling"] = ceiling
            row["status"] += (f"; this machine's matmul rate allows at most {ceiling:.3g}x (the least matmul work "
                              "of the call at the rate of a product timed among the decoders, against the peer's time)")
        out.append(row)
    out += int8_targets(res, d_peer)
    gs = res.get("gpu_shape")
    if gs and gs.get("mfu"):
        out.append(verdict(f"Transformer at a GPU-sized shape ({gs['params'] / 1e6:.0f}M parameters, token batches "
                           f"of {gs['max_tokens']:,}), model FLOP/s / {gs['peak_kind']} matmul peak",
                           gs["mfu"], TARGET_GPU_MFU, ""))
    for key, how in (("pointer_full", ""), ("pointer_full_bf16", " in bf16 (what precision = \"auto\" trains in here)")):
        pf = res.get(key)
        if pf and "speedup_cpu" in pf:
            row = verdict(f"full-size pointer-generator + coverage update{how}, one thread, baseline / ours (CPU time)",
                          pf["speedup_cpu"], TARGET_POINTER_VS_BASELINE, "x")
            row["ceiling"] = pf["ceiling"]
            row["status"] += (f"; the encoder LSTM and output-layer products that any implementation runs allow at "
                              f"most {pf['ceiling']:.3g}x")
            out.append(row)
    sc = res.get("scaling")
    if sc:
        full = [r for r in sc["rows"] if r["fraction"] == 1.0]
        if full:
            how = "estimated" if full[0]["extrapolated"] else "measured"
            out.append(verdict(f"one epoch, pe_ablation CPU profile on DialogSum ({how}), seconds",
                               full[0]["epoch_s"], TARGET_EPOCH_S, "s", lower_is_better=True))
    return out


def verdict(name, value, goal, unit, aim=None, lower_is_better=False) -> dict[str, Any]:
    """One target's row: the measured ``value`` against ``goal`` (and ``aim``), met or missed and by how much."""
    met = value <= goal if lower_is_better else value >= goal
    if lower_is_better:
        by = (value - goal) / goal          # > 0: over the limit by this fraction
    else:
        by = (goal - value) / goal          # > 0: short of the goal by this fraction
    row = {"target": name, "value": value, "goal": goal, "unit": unit, "met": met,
           "lower_is_better": lower_is_better}
    if met:
        row["status"] = (f"met ({value:.2f}{unit} vs {'<=' if lower_is_better else '>='} {goal:g}{unit})")
    else:
        row["status"] = f"MISSED by {100 * by:.0f}% ({value:.2f}{unit} vs {goal:g}{unit})"
    if aim is not None:
        row["aim"] = aim
        row["status"] += f"; aim {aim:g}{unit} {'reached' if value >= aim else f'missed by {100 * (aim - value) / aim:.0f}%'}"
    return row


def int8_targets(res: dict[str, Any], peer_tokens_per_s: float | None) -> list[dict[str, Any]]:
    """The int8 decoding target: ours in int8 / the peer's best >= TARGET_DECODE_INT8_VS_PEER, with the
    ROUGE-1 change of the trained runs (|change| < TARGET_INT8_ROUGE1_CHANGE) where the bench read some."""
    from seq2seq_zoo.bench.shapes import TARGET_DECODE_INT8_VS_PEER, TARGET_INT8_ROUGE1_CHANGE
    ours = res.get("decoding", {}).get("ours_int8", {}).get("tokens_per_s")
    if not ours or not peer_tokens_per_s:
        return []
    row = verdict(f"beam-{res.get('beams', 4)} decoding tokens/s, ours (int8) / peer's best", ours / peer_tokens_per_s,
                  TARGET_DECODE_INT8_VS_PEER, "x")
    bound = res.get("int8_bound") or {}
    if bound.get("ceiling_vs_peer") and not row["met"]:
        row["ceiling"] = bound["ceiling_vs_peer"]
        row["status"] += (f"; with its linear layers taking no time, the rest of the int8 decoder "
                          f"({bound['seconds']:.2f} s) allows at most {bound['ceiling_vs_peer']:.3g}x")
    changes = {n: r["rouge1"]["delta"] for n, r in (res.get("int8") or {}).items() if "rouge1" in r}
    if changes:
        worst = max(abs(v) for v in changes.values())
        row["rouge1_change"] = changes
        row["status"] += ("; ROUGE-1 change in int8: " + ", ".join(f"{n} {v:+.2f}" for n, v in changes.items())
                          + (" (within" if worst < TARGET_INT8_ROUGE1_CHANGE else " (NOT within")
                          + f" ±{TARGET_INT8_ROUGE1_CHANGE})")
    else:
        row["status"] += "; ROUGE-1 change not measured here (zoo bench --int8-runs DIR)"
    return [row]
