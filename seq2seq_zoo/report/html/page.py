"""``results/<experiment>/report.html``: one self-contained page per experiment folder.

Everything is inline: the style sheet and script (``report.css``, ``report.js`` beside this file), the
charts as SVG, the data as JSON. The long part (every seed's summaries and per-example scores, the sources,
the attention maps) is embedded gzip-compressed and base64-encoded in ``<script id="blob">`` and rendered
20 examples at a time by the script, so a page of a 1,000-example test set with 20 runs stays within
``BUDGET`` bytes. The page makes no network request and works from ``file://``.
"""
from __future__ import annotations

import base64
import gzip
import json
import os
from html import escape
from importlib import resources
from pathlib import Path

import numpy as np

from seq2seq_zoo.report import significance
from seq2seq_zoo.report.html import extract, svg

PAGE_FILE = "report.html"
BUDGET = 3_000_000   # bytes per page; over it, the sources are cut shorter, then later seeds' maps left out
SCORE_NAMES = {"rouge1": "R-1", "rouge2": "R-2", "rougeL": "R-L"}


def asset(name: str) -> str:
    return resources.files("seq2seq_zoo.report.html").joinpath(name).read_text(encoding="utf-8")


def _json_script(obj) -> str:
    """JSON safe inside a <script> element (no "</" or "<!--" can end or bend it)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")


def pack(obj) -> str:
    """gzip (mtime 0: the same bytes every build) + base64 of the compact JSON of ``obj``."""
    raw = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")


def interleave(examples: dict, outputs: dict, attention: dict) -> dict:
    """The blob's layout: per dataset, per example its source, references and every run's and seed's summary
    side by side (``cols`` names them), so that gzip finds each summary's copied phrases a few hundred bytes
    back, in its source and in the other runs' summaries (about half the size of one list per run). The
    per-example scores follow in the same column order. report.js turns it back into examples / outputs."""
    out = {"attention": attention, "datasets": {}}
    for ds, ex in examples.items():
        cols = [[lab, seed] for lab, per in outputs.items() for seed in per
                if len(per[seed]["pred"]) == len(ex["ids"]) and per[seed].get("ds") == ds]
        items = [[ex["src"][i] if ex["src"] else None, ex["refs"][i],
                  [outputs[lab][seed]["pred"][i] for lab, seed in cols]] for i in range(len(ex["ids"]))]
        scores = [[outputs[lab][seed]["score"][i] for lab, seed in cols] for i in range(len(ex["ids"]))]
        out["datasets"][ds] = {"ids": ex["ids"], "cut": ex["cut"], "srclen": ex["srclen"], "cols": cols,
                               "items": items, "scores": scores}
    return out


def unpack(text: str):
    return json.loads(gzip.decompress(base64.b64decode(text)))


def _f(x, d: int = 2) -> str:
    return "" if x is None or not np.isfinite(x) else f"{x:.{d}f}"


def _sd(vals: list[float]) -> float | None:
    return float(np.std(vals, ddof=1)) if len(vals) > 1 else None


# ------------------------------------------------------------------------------------ leaderboard
def leaderboard_html(groups: list) -> str:
    leads, below = significance.below_lead(groups)
    below_ids = {id(g) for g in below}
    out = []
    for ds in dict.fromkeys(significance.dataset_of(g) for g in groups):
        gs = [g for g in groups if significance.dataset_of(g) == ds and g.mean("rouge1") is not None]
        if not gs:
            continue
        lead = leads.get(ds)
        lead_m = lead.mean("rouge1") if lead is not None else None
        rows = []
        for g in gs:
            cells = [f'<td class="l">{escape(g.label)}</td><td class="l">{escape(g.kind)}</td><td>{len(g.rows)}</td>']
            for m in ("rouge1", "rouge2", "rougeL"):
                vals = g.per_run(m)
                sd = _sd(vals)
                ci = significance.ci_of(g, m) if vals else None
                cells.append(f"<td>{_f(g.mean(m))}" + (f" ± {_f(sd)}" if sd is not None else "") + "</td>"
                             + f"<td>{'' if not ci else _f(ci[0]) + '-' + _f(ci[1])}</td>")
            margin = g.mean("rouge1") - lead_m if lead_m is not None and g is not lead else None
            cells.append(f"<td>{'' if margin is None else f'{margin:+.2f}'}</td>")
            cls = "lead" if g is lead else "below" if id(g) in below_ids else ""
            rows.append(f'<tr class="{cls}">{"".join(cells)}</tr>')
        head = ('<tr><th class="l">run</th><th class="l">kind</th><th>seeds</th>'
                + "".join(f"<th>{n} mean ± sd</th><th>{n} 95% CI</th>" for n in ("ROUGE-1", "ROUGE-2", "ROUGE-L"))
                + "<th>ROUGE-1 over LEAD</th></tr>")
        plot = svg.seed_plot([{"label": g.label, "seeds": g.per_run("rouge1"), "mean": g.mean("rouge1"),
                               "ci": significance.ci_of(g, "rouge1")} for g in gs],
                             f"{ds}: ROUGE-1 per seed", lead_m)
        out.append(f"<h3>{escape(ds)}</h3><table>{head}{''.join(rows)}</table>{plot}")
    out.append('<p class="note">mean ± sd over seeds (sd of the per-seed means); 95% CI: two-level bootstrap '
               '(seeds, then test examples), as in table.md; the LEAD row is shaded, rows that do not beat it have a '
               'red name.</p>')
    return "".join(out)


def findings_html(judged: list[dict]) -> str:
    if not judged:
        return "<p>The experiment file declares no findings.</p>"
    rows = []
    for j in judged:
        power = (j.get("power") or {}).get("seeds_for_80")
        ci = j.get("ci") or []
        v = j.get("verdict", "")
        rows.append("<tr>" + "".join([
            f'<td class="l"><code>{escape(j["claim"])}</code></td>',
            f'<td class="l verdict-{escape(v.split()[0] if v else "")}">{escape(v)}</td>',
            f'<td>{_f(j.get("mean_a"))}</td><td>{_f(j.get("mean_b"))}</td><td>{_f(j.get("diff"))}</td>',
            f'<td>{_f(ci[0]) + "-" + _f(ci[1]) if len(ci) == 2 else ""}</td>',
            f'<td>{significance.p_text(j["p"]) if j.get("p") is not None else ""}</td>',
            f'<td>{j.get("n_a", "")}/{j.get("n_b", "")}</td><td>{"" if power is None else power}</td>',
            f'<td class="l"><small>{escape(j.get("test", ""))}'
            + (f'; {escape("; ".join(j["flags"]))}' if j.get("flags") else "")
            + (f'; {escape(j["detail"])}' if j.get("detail") else "") + "</small></td>"]) + "</tr>")
    return ('<table><tr><th class="l">claim</th><th class="l">verdict</th><th>mean A</th><th>mean B</th><th>A − B</th>'
            '<th>95% CI</th><th>p</th><th>seeds A/B</th><th>seeds for 80% power</th><th class="l">test, flags</th></tr>'
            + "".join(rows) + "</table>")


# ---------------------------------------------------------------------------------------- buckets
def buckets_html(tables: dict) -> str:
    out = []
    for ds, ts in tables.items():
        out.append(f"<h3>{escape(ds)}</h3>")
        for t in ts:
            head = ('<tr><th class="l">run (seeds)</th>' + "".join(f"<th>{escape(b)}</th>" for b in t["buckets"]) + "</tr>"
                    + '<tr><td class="l"><small>examples</small></td>'
                    + "".join(f"<td><small>{c}</small></td>" for c in t["counts"]) + "</tr>")
            best = [max((r["cells"][b][0] for r in t["rows"] if r["cells"][b]), default=None)
                    for b in range(len(t["buckets"]))]
            body = "".join('<tr><td class="l">' + escape(r["label"]) + f' <small>({r["seeds"]})</small></td>' + "".join(
                "<td></td>" if c is None else
                f'<td class="{"best" if c[0] == best[b] else ""}">{c[0]:.2f} <small>[{c[1]:.1f}, {c[2]:.1f}]</small></td>'
                for b, c in enumerate(r["cells"])) + "</tr>" for r in t["rows"])
            out.append(f'<h4>by {escape(t["name"])}</h4><table class="bk">{head}{body}</table>')
    return "".join(out) + ('<p class="note">Mean ROUGE-1 of the bucket\'s examples, over seeds, with a 95% CI from the '
                           'two-level bootstrap (seeds, then the bucket\'s examples); buckets are the quartiles of the '
                           'quantity over the test set (ties merge buckets); bold: the best run of a bucket.</p>')


def copying_html(tables: dict) -> str:
    if not tables:
        return "<p>The sources are not on this machine: no copy statistics.</p>"
    out = []
    for ds, rows in tables.items():
        body = "".join(f'<tr><td class="l">{escape(r["label"])} <small>({r["seeds"]})</small></td>'
                       + "".join(f"<td>{'' if r[k] is None else f'{100 * r[k]:.1f}%'}</td>"
                                 for k in ("copied", "phrase", "novel", "unk", "rep")) + "</tr>" for r in rows)
        out.append(f'<h4>{escape(ds)}</h4><table><tr><th class="l">run (seeds)</th><th>copied words</th>'
                   f'<th>in copied phrases</th><th>novel words</th><th>&lt;unk&gt;</th><th>in repeated trigrams</th></tr>'
                   f'{body}</table>')
    return "".join(out) + ('<p class="note">Share of a summary\'s words with each mark of the side-by-side view (the '
                           'source as shown there), mean over test examples, then over seeds; the references row: the '
                           'reference summaries against the same sources.</p>')


# ----------------------------------------------------------------------------------------- page
def _defaults(runs: list[dict], judged: list[dict]) -> dict:
    """The pair the side-by-side view opens with, per dataset: a declared finding's A and B (the first
    finding of that dataset), else the best trained run against the LEAD row."""
    out: dict[str, dict] = {}
    labels = {r["label"]: significance.dataset_of(r["group"]) for r in runs}
    for j in judged:
        a, b = j.get("a"), j.get("b")
        if a in labels and b in labels and labels[a] == labels[b] and labels[a] not in out:
            out[labels[a]] = {"a": a, "b": b}
    groups = [r["group"] for r in runs]
    leads, _ = significance.below_lead(groups)
    for ds in dict.fromkeys(labels.values()):
        if ds in out:
            continue
        trained = [r for r in runs if significance.dataset_of(r["group"]) == ds and r["group"].kind == "trained"
                   and r["group"].mean("rouge1") is not None]
        best = max(trained, key=lambda r: r["group"].mean("rouge1"))["label"] if trained else None
        lead = leads.get(ds)
        out[ds] = {"a": best, "b": lead.label if lead is not None else None}
    return out


def build_page(exp_dir: Path, rows: list[dict], groups: list, judged: list[dict], description: str = "",
               index_href: str | None = None, budget: int = BUDGET) -> tuple[str, list[str]]:
    """(the page's HTML, notes on what was cut to fit ``budget``)."""
    runs = extract.group_runs(groups)
    sources = extract.load_sources([r for run in runs for r in run["group"].rows])
    examples, outputs = extract.side_by_side(runs, sources)
    attention = extract.attention_maps(runs)
    tables = extract.buckets(runs, examples, sources)
    charts = extract.curves(runs)
    copy = extract.copying(runs, examples, outputs)
    finger = extract.fingerprint(rows, examples)
    name = rows[0]["experiment"]
    meta = {"experiment": name,
            "runs": [{"label": r["label"], "dataset": significance.dataset_of(r["group"]),
                      "seeds": [str(s) for s in r["group"].seeds], "kind": r["group"].kind} for r in runs],
            "datasets": {ds: {"note": (sources.get(ds) or {}).get("note", ""), "cut": (sources.get(ds) or {}).get("cut", 0)}
                         for ds in examples},
            "score_keys": list(extract.SCORE_KEYS), "score_names": SCORE_NAMES,
            "defaults": _defaults(runs, judged)}
    cuts: list[str] = []
    fixed = _shell(name, description, groups, judged, tables, charts, finger, index_href, meta, copy)
    blob = pack(interleave(examples, outputs, attention))
    # over the budget: shorter sources, then one attention map per run, then fewer examples
    for step in ("sources", "attention", "examples"):
        if len(fixed) + len(blob) <= budget:
            break
        if step == "sources":
            for ds, ex in examples.items():
                if ex["src"]:
                    full = (sources[ds]["sources"] or {})
                    new = [extract.cut_words(full.get(i, ""), 150) for i in ex["ids"]]
                    ex["src"], ex["cut"] = [t for t, _ in new], [int(c) for _, c in new]
                    meta["datasets"][ds]["cut"] = 150
            cuts.append("sources cut at 150 words to fit the page's size budget")
        elif step == "attention":
            attention = {k: dict(list(v.items())[:1]) for k, v in attention.items()}
            cuts.append("one seed's attention map per run")
        else:
            size = len(fixed) + len(blob)
            keep = max(20, int(min(len(e["ids"]) for e in examples.values()) * budget / size * 0.95))
            for ds, ex in examples.items():
                for k in ("ids", "refs", "src", "cut", "srclen"):
                    if ex.get(k) is not None:
                        ex[k] = ex[k][:keep]
            for lab, per in outputs.items():
                for s in per.values():
                    s["pred"], s["score"] = s["pred"][:keep], s["score"][:keep]
            cuts.append(f"the first {keep} test examples only (the buckets and tables use all)")
        meta["cuts"] = cuts
        fixed = _shell(name, description, groups, judged, tables, charts, finger, index_href, meta, copy)
        blob = pack(interleave(examples, outputs, attention))
    head, _, tail = fixed.rpartition("@@BLOB@@")
    html = head + blob + tail
    return html, cuts


def _shell(name, description, groups, judged, tables, charts, finger, index_href, meta, copy) -> str:
    curves = "".join(svg.line_chart(c["series"], c["title"], c["x"], c["y"]) for c in charts) or \
        "<p>No training curves stored (baselines only).</p>"
    cuts = meta.get("cuts") or []
    fp = "".join(f'<tr><th class="l">{escape(k)}</th><td class="l">{escape(v)}</td></tr>' for k, v in finger)
    nav = (f'<a href="{escape(index_href)}">all experiments</a>' if index_href else "") + "".join(
        f'<a href="#{a}">{t}</a>' for a, t in (("leaderboard", "leaderboard"), ("findings", "findings"),
                                               ("side", "side by side"), ("model", "inside the model"), ("copying", "copying"),
                                               ("buckets", "buckets"), ("curves", "curves"), ("scorer", "scorer")))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(name)}: report</title><style>{asset("report.css")}</style></head>
<body>
<nav>{nav}</nav>
<h1>{escape(name)}</h1>
{f'<p>{escape(description)}</p>' if description else ''}
<p class="note">Generated by <code>zoo report</code> from the run records in this folder (not committed; rebuilt each
time).{(' To fit the page: ' + escape('; '.join(cuts)) + '.') if cuts else ''}</p>
<h2 id="leaderboard">Leaderboard</h2>{leaderboard_html(groups)}
<h2 id="findings">Findings</h2>{findings_html(judged)}
<h2 id="side">Side by side</h2>
<p class="note">Run A against run B per test example: sort by the per-example difference (where A beats B most),
by source length, filter by a least difference or a text search. In a summary, <span class="key"><span class="w span">copied
phrase</span><span class="w copied">copied word</span><span class="w novel">novel word</span><span class="w unk">&lt;unk&gt;</span><span class="w rep">repeated trigram</span></span>;
in the source, the words run A copied. A word is copied when its lowercase form occurs in the source (no stemming);
a copied phrase is three words in a row found in that order in the source.</p>
<section id="sbs"><div class="controls">
<label>dataset <select id="dataset"></select></label>
<label>A <select id="runA"></select><select id="seedA"></select></label>
<label>B <select id="runB"></select><select id="seedB"></select></label>
<label>score <select id="metric"><option value="rouge1">ROUGE-1</option><option value="rouge2">ROUGE-2</option><option value="rougeL">ROUGE-L</option></select></label>
<label>sort <select id="sort"><option value="diff">A − B, largest first</option><option value="-diff">A − B, smallest first</option><option value="srclen">source length, shortest first</option><option value="-srclen">source length, longest first</option><option value="order">test-set order</option></select></label>
<label title="A − B at least this much (sorted smallest first: B − A)">difference at least <input id="mindiff" type="number" step="1" size="4" placeholder="any"></label>
<label>search <input id="search" type="search" placeholder="word in source, reference or summary"></label>
<span>also show: <span id="others"></span></span>
<span><button id="prev">◀</button> <span id="pageinfo"></span> <button id="next">▶</button></span>
</div>
<p class="note" id="srcnote"></p><p id="summary"></p>
<p id="loading">Loading the embedded data…</p>
<div id="examples"></div></section>
<h2 id="model">Inside the model</h2>
<div id="attention"><div class="controls"><label>run <select id="attRun"></select></label><label><select id="attSeed"></select></label>
<label>map <select id="attMap"></select></label><label>show <select id="attKind"><option value="attention">attention</option><option value="coverage">coverage</option></select></label></div>
<p class="note" id="attNote"></p><div class="attwrap"><canvas id="attCanvas" width="10" height="10"></canvas></div><p id="attPgen"></p></div>
<h2 id="copying">Copying</h2>{copying_html(copy)}
<h2 id="buckets">Buckets</h2>{buckets_html(tables)}
<h2 id="curves">Curves</h2>{curves}
<h2 id="scorer">Scorer fingerprint</h2><table>{fp}</table>
<script type="application/json" id="meta">{_json_script(meta)}</script>
<script type="application/octet-stream" id="blob">@@BLOB@@</script>
<script>{asset("report.js")}</script>
</body></html>
"""


def write_page(exp_dir: Path, rows: list[dict], groups: list, judged: list[dict], root: Path | None = None) -> Path:
    """Write ``exp_dir/report.html`` (atomically) and return its path."""
    from seq2seq_zoo.utils import atomic_write_text
    exp_dir = Path(exp_dir)
    description = (rows[0].get("spec") or {}).get("description") or ""
    if root is None:   # the results folder: the nearest one up that holds the leaderboard or the findings
        root = next((p for p in (exp_dir.parent, exp_dir.parent.parent)
                     if (p / "LEADERBOARD.md").is_file() or (p / "FINDINGS.md").is_file()), exp_dir.parent)
    href = os.path.relpath(Path(root) / "index.html", exp_dir).replace(os.sep, "/")
    html, _ = build_page(exp_dir, rows, groups, judged, description, href)
    path = exp_dir / PAGE_FILE
    atomic_write_text(path, html)
    return path
