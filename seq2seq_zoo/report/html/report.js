// The report page's script: decodes the embedded data (gzip + base64 in <script id="blob">), then renders the
// side-by-side view a page at a time and the attention map on demand. No network, no library.
// markTokens is the rule of seq2seq_zoo/report/html/marks.py (kept identical; a browser test compares them).
"use strict";
const WORD = /<unk>|[A-Za-z0-9]+/g;
const META = JSON.parse(document.getElementById("meta").textContent);
let DATA = null;
const PAGE = 20;
const state = {page: 0, order: []};

function keysOf(text) { return (text.match(WORD) || []).map(w => w.toLowerCase()); }

function summaryMarks(source, summary) {
  const src = keysOf(source), srcSet = new Set(src), tri = new Set();
  for (let i = 0; i + 3 <= src.length; i++) tri.add(src.slice(i, i + 3).join("\u0001"));
  const k = keysOf(summary), marks = [];
  for (let i = 0; i < k.length; i++) {
    const w = k[i];
    if (w === "<unk>") marks.push("unk");
    else if (srcSet.has(w)) {
      let span = false;
      for (let j = i - 2; j <= i; j++) if (j >= 0 && j + 3 <= k.length && tri.has(k.slice(j, j + 3).join("\u0001"))) span = true;
      marks.push(span ? "span" : "copied");
    } else marks.push("novel");
  }
  const seen = new Set(), rep = new Array(k.length).fill(false);
  for (let j = 0; j + 3 <= k.length; j++) {
    const t = k.slice(j, j + 3).join("\u0001");
    if (seen.has(t)) rep[j] = rep[j + 1] = rep[j + 2] = true;
    seen.add(t);
  }
  return marks.map((m, i) => rep[i] ? m + " rep" : m);
}

function shares(marks) {  // marks.copy_shares
  const n = marks.length || 1, c = f => marks.filter(f).length / n;
  return {copied: c(m => m.startsWith("copied") || m.startsWith("span")), phrase: c(m => m.startsWith("span")),
          novel: c(m => m.startsWith("novel")), unk: c(m => m.startsWith("unk")), rep: c(m => m.endsWith("rep"))};
}
function pct(x) { return Math.round(100 * x) + "%"; }

function sourceMarks(source, summary) {
  const s = new Set(keysOf(summary)); s.delete("<unk>");
  return keysOf(source).map(w => s.has(w) ? "copied" : "");
}

function esc(s) { return s.replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c])); }

// text with its words wrapped in <span class="w MARK"> (marks: one per word, in order)
function marked(text, marks) {
  let out = "", last = 0, k = 0;
  for (const m of text.matchAll(WORD)) {
    out += esc(text.slice(last, m.index));
    const cls = marks ? marks[k] : "";
    out += `<span class="w${cls ? " " + cls : ""}">${esc(m[0])}</span>`;
    last = m.index + m[0].length; k++;
  }
  return out + esc(text.slice(last));
}

function $(id) { return document.getElementById(id); }
function runInfo(label) { return META.runs.find(r => r.label === label); }
function seedOf(sel) { return sel.value; }

function scoreOf(label, seed, ex, metric) {
  const out = DATA.outputs[label]; if (!out) return null;
  const m = META.score_keys.indexOf(metric);
  if (seed === "mean") {
    const v = Object.values(out).map(s => s.score[ex][m]).filter(x => x !== null);
    return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null;
  }
  const s = out[seed]; return s ? s.score[ex][m] : null;
}

function predOf(label, seed) {
  const out = DATA.outputs[label]; if (!out) return [null, null];
  const sd = seed === "mean" || !(seed in out) ? Object.keys(out)[0] : seed;
  return [sd, out[sd].pred];
}

function fillSeeds(sel, label, withMean) {
  const info = runInfo(label);
  const seeds = info ? info.seeds.filter(s => DATA.outputs[label] && s in DATA.outputs[label]) : [];
  sel.innerHTML = (withMean && seeds.length > 1 ? `<option value="mean">mean of ${seeds.length} seeds</option>` : "")
    + seeds.map(s => `<option value="${s}">seed ${s}</option>`).join("");
}

function currentDataset() { return $("dataset").value; }

function runsOfDataset(ds) { return META.runs.filter(r => r.dataset === ds && DATA.outputs[r.label]); }

function setupControls() {
  const ds = currentDataset();
  const runs = runsOfDataset(ds);
  const opts = runs.map(r => `<option value="${esc(r.label)}">${esc(r.label)}</option>`).join("");
  for (const id of ["runA", "runB"]) $(id).innerHTML = opts;
  const d = META.defaults[ds] || {};
  if (d.a) $("runA").value = d.a;
  if (d.b) $("runB").value = d.b; else if (runs.length > 1) $("runB").selectedIndex = 1;
  fillSeeds($("seedA"), $("runA").value, true); fillSeeds($("seedB"), $("runB").value, true);
  const others = $("others");
  others.innerHTML = runs.map(r => `<label><input type="checkbox" data-run="${esc(r.label)}"> ${esc(r.label)}`
    + (r.seeds.length > 1 ? ` <select data-seedfor="${esc(r.label)}">${r.seeds.filter(s => s in DATA.outputs[r.label]).map(s => `<option value="${s}">seed ${s}</option>`).join("")}</select>` : "")
    + `</label>`).join(" ");
  const note = (META.datasets[ds] || {}).note;
  $("srcnote").textContent = note || "";
}

function order() {
  const ds = currentDataset(), ex = DATA.examples[ds], n = ex.ids.length;
  const a = $("runA").value, b = $("runB").value, sa = seedOf($("seedA")), sb = seedOf($("seedB"));
  const metric = $("metric").value, sort = $("sort").value, q = $("search").value.trim().toLowerCase();
  const minDiff = parseFloat($("mindiff").value);
  let idx = [...Array(n).keys()];
  const diff = i => { const x = scoreOf(a, sa, i, metric), y = scoreOf(b, sb, i, metric); return x === null || y === null ? null : x - y; };
  if (q) {
    const [, pa] = predOf(a, sa), [, pb] = predOf(b, sb);
    idx = idx.filter(i => [ex.src ? ex.src[i] : "", ...ex.refs[i], pa[i] || "", pb[i] || "", ex.ids[i]]
      .some(t => t && t.toLowerCase().includes(q)));
  }
  if (!isNaN(minDiff)) idx = idx.filter(i => { const d = diff(i); return d !== null && (sort === "-diff" ? -d : d) >= minDiff; });
  const key = {
    "diff": i => -(diff(i) ?? -Infinity), "-diff": i => (diff(i) ?? Infinity),
    "srclen": i => (ex.srclen[i] ?? Infinity), "-srclen": i => -(ex.srclen[i] ?? -Infinity), "order": i => i}[sort];
  idx.sort((x, y) => key(x) - key(y) || x - y);
  state.order = idx; state.diff = diff;
}

function renderSummary(label, seed, i, src, metricSeed) {
  const [sd, preds] = predOf(label, seed);
  const p = preds ? preds[i] : null;
  if (p === null || p === undefined) return `<div class="sum missing" data-run="${esc(label)}">${esc(label)}: no summary for this example</div>`;
  const sc = META.score_keys.map(m => { const v = scoreOf(label, sd, i, m); return v === null ? "" : `${META.score_names[m]} ${v.toFixed(1)}`; }).join(" · ");
  const mv = metricSeed === "mean" ? scoreOf(label, "mean", i, $("metric").value) : null;
  const mean = mv !== null ? ` <small>(the sort uses the mean of its seeds: ${mv.toFixed(1)})</small>` : "";
  const mk = src !== null ? summaryMarks(src, p) : null;
  const body = marked(p, mk);
  const sh = mk ? shares(mk) : null;
  const cp = sh ? ` <span class="cp">copied ${pct(sh.copied)} (in phrases ${pct(sh.phrase)}) · novel ${pct(sh.novel)}${sh.unk ? " · &lt;unk&gt; " + pct(sh.unk) : ""}${sh.rep ? " · repeated " + pct(sh.rep) : ""}</span>` : "";
  return `<div class="sum" data-run="${esc(label)}" data-seed="${sd}"><div class="who">${esc(label)} <small>seed ${sd}</small> <span class="sc">${sc}</span>${cp}${mean}</div><div class="txt">${body}</div></div>`;
}

function render() {
  const ds = currentDataset(), ex = DATA.examples[ds];
  const a = $("runA").value, b = $("runB").value, sa = seedOf($("seedA")), sb = seedOf($("seedB"));
  const pages = Math.max(1, Math.ceil(state.order.length / PAGE));
  state.page = Math.min(state.page, pages - 1);
  const shown = state.order.slice(state.page * PAGE, (state.page + 1) * PAGE);
  const extra = [...document.querySelectorAll("#others input:checked")].map(c => c.dataset.run).filter(r => r !== a && r !== b);
  const [, predA] = predOf(a, sa);
  const html = shown.map(i => {
    const src = ex.src ? ex.src[i] : null;
    const d = state.diff(i);
    const pa = predA ? predA[i] : null;
    const srcHtml = src === null ? `<em>source not available</em>` : marked(src, pa ? sourceMarks(src, pa) : null) + (ex.cut[i] ? ` <small>[cut at ${META.datasets[ds].cut} words of ${ex.srclen[i]}]</small>` : "");
    return `<article class="ex" data-id="${esc(ex.ids[i])}" data-index="${i}">
      <header><b>${esc(ex.ids[i])}</b> · source ${ex.srclen[i] ?? "?"} words · ${esc($("metric").selectedOptions[0].text)} difference A − B: <b class="diff">${d === null ? "n/a" : d.toFixed(1)}</b></header>
      <div class="cols"><div class="src"><h4>source <small>(words copied by A highlighted)</small></h4><div class="txt">${srcHtml}</div></div>
      <div class="outs"><h4>reference${ex.refs[i].length > 1 ? "s" : ""}</h4>${ex.refs[i].map(r => `<div class="ref txt">${esc(r)}</div>`).join("")}
      <h4>summaries</h4>${renderSummary(a, sa, i, src, sa)}${b !== a ? renderSummary(b, sb, i, src, sb) : ""}${extra.map(r => renderSummary(r, otherSeed(r), i, src, null)).join("")}</div></div></article>`;
  }).join("");
  $("examples").innerHTML = html || "<p>No example matches.</p>";
  $("summary").innerHTML = summaryLine(ex, a, sa, b, sb);
  $("pageinfo").textContent = `examples ${state.order.length ? state.page * PAGE + 1 : 0}-${Math.min(state.order.length, (state.page + 1) * PAGE)} of ${state.order.length} (${ex.ids.length} in the test set)`;
}

// over the examples the sort and filters keep: the mean difference, and how much each of A and B copies
function summaryLine(ex, a, sa, b, sb) {
  const idx = state.order; if (!idx.length) return "";
  const d = idx.map(i => state.diff(i)).filter(x => x !== null);
  const md = d.length ? d.reduce((x, y) => x + y, 0) / d.length : null;
  const wins = d.filter(x => x > 0).length, losses = d.filter(x => x < 0).length;
  let txt = `${idx.length} examples: A − B ${md === null ? "n/a" : md.toFixed(2)} on average; A higher on ${wins}, B higher on ${losses}.`;
  if (ex.src) {
    const cop = (lab, seed) => { const [, pr] = predOf(lab, seed); let c = 0, ph = 0, nv = 0, n = 0;
      for (const i of idx) { if (!pr[i]) continue; const s = shares(summaryMarks(ex.src[i], pr[i])); c += s.copied; ph += s.phrase; nv += s.novel; n++; }
      return n ? `copied ${pct(c / n)} (in phrases ${pct(ph / n)}), novel ${pct(nv / n)}` : "n/a"; };
    txt += ` Words of A's summaries: ${cop(a, sa)}; of B's: ${cop(b, sb)} (mean over summaries; the seed shown).`;
  }
  return txt;
}

function otherSeed(label) {  // the seed chosen beside a run's "also show" box (its first seed by default)
  const sel = [...document.querySelectorAll("#others select")].find(x => x.dataset.seedfor === label);
  return sel ? sel.value : "mean";
}

function refresh(resetPage) { order(); if (resetPage) state.page = 0; render(); }

// ------------------------------------------------------------------ attention
function attRun() { return $("attRun").value; }

function setupAttention() {
  const labels = Object.keys(DATA.attention || {});
  if (!labels.length) { $("attention").innerHTML = "<p>No run of this experiment stored an attention map (attention.json).</p>"; return; }
  $("attRun").innerHTML = labels.map(l => `<option>${esc(l)}</option>`).join("");
  const pick = () => {
    const seeds = Object.keys(DATA.attention[attRun()]);
    $("attSeed").innerHTML = seeds.map(s => `<option value="${s}">seed ${s}</option>`).join("");
    const a = DATA.attention[attRun()][seeds[0]];
    $("attMap").innerHTML = Object.keys(a.maps).map(m => `<option>${esc(m)}</option>`).join("");
    drawAttention();
  };
  $("attRun").onchange = pick;
  for (const id of ["attSeed", "attMap", "attKind"]) $(id).onchange = drawAttention;
  pick();
}

function viridis(t) {  // a 5-stop approximation of viridis
  const s = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  t = Math.max(0, Math.min(1, t)) * 4; const i = Math.min(3, Math.floor(t)), f = t - i;
  return `rgb(${s[i].map((c, k) => Math.round(c + f * (s[i + 1][k] - c))).join(",")})`;
}

function drawAttention() {
  const a = DATA.attention[attRun()][$("attSeed").value];
  const m = a.maps[$("attMap").value] || [];
  const kind = $("attKind").value;
  let rows = m;
  if (kind === "coverage") {  // coverage before step t: the sum of the attention of steps 0..t-1
    const acc = new Array((m[0] || []).length).fill(0); rows = [];
    for (const r of m) { rows.push(acc.slice()); r.forEach((v, j) => acc[j] += v); }
  }
  const src = a.source_tokens.slice(0, (m[0] || []).length), out = a.tokens.slice(0, m.length);
  const cell = 9, left = 110, top = 70, cv = $("attCanvas");
  const ratio = window.devicePixelRatio || 1;
  const w = left + src.length * cell + 10, h = top + out.length * cell + 10;
  cv.width = w * ratio; cv.height = h * ratio; cv.style.width = w + "px"; cv.style.height = h + "px";
  const g = cv.getContext("2d"); g.scale(ratio, ratio); g.clearRect(0, 0, w, h);
  let mx = 0; for (const r of rows) for (const v of r) mx = Math.max(mx, v);
  mx = mx || 1;
  rows.forEach((r, i) => r.forEach((v, j) => { g.fillStyle = viridis(v / mx); g.fillRect(left + j * cell, top + i * cell, cell, cell); }));
  g.fillStyle = "#222"; g.font = "8px sans-serif"; g.textAlign = "right";
  out.forEach((t, i) => g.fillText(t.slice(0, 18), left - 3, top + i * cell + 7));
  src.forEach((t, j) => { g.save(); g.translate(left + j * cell + 6, top - 3); g.rotate(-Math.PI / 2); g.textAlign = "left"; g.fillText(t.slice(0, 14), 0, 0); g.restore(); });
  $("attNote").textContent = `example ${a.example_id}; ${src.length} of ${a.source_len || a.source_tokens.length} source tokens; `
    + (kind === "coverage" ? "coverage: the attention summed over the earlier steps; " : "") + `colour scale 0-${mx.toFixed(2)}; ${a.note || ""}`;
  $("attPgen").innerHTML = a.p_gen ? "p_gen per summary word (dark: copied from the source, light: generated): "
    + out.map((t, i) => { const p = a.p_gen[i] ?? 0; return `<span class="pg" style="background:rgba(213,94,0,${(1 - p).toFixed(2)})" title="p_gen ${p.toFixed(2)}">${esc(t)}</span>`; }).join(" ")
    : "This run has no copy mechanism (no p_gen).";
}

// ------------------------------------------------------------------ start
async function decode() {
  const el = document.getElementById("blob");
  const bin = Uint8Array.from(atob(el.textContent.trim()), c => c.charCodeAt(0));
  const stream = new Blob([bin]).stream().pipeThrough(new DecompressionStream("gzip"));
  const raw = JSON.parse(await new Response(stream).text());
  // back from the per-example layout (page.py, interleave) to examples[ds] and outputs[run][seed]
  const data = {examples: {}, outputs: {}, attention: raw.attention};
  for (const [ds, d] of Object.entries(raw.datasets)) {
    const src = d.items.some(it => it[0] !== null) ? d.items.map(it => it[0]) : null;
    data.examples[ds] = {ids: d.ids, cut: d.cut, srclen: d.srclen, src, refs: d.items.map(it => it[1])};
    d.cols.forEach(([lab, seed], c) => {
      (data.outputs[lab] ||= {})[seed] = {pred: d.items.map(it => it[2][c]), score: d.scores.map(s => s[c])};
    });
  }
  return data;
}

async function start() {
  try { DATA = await decode(); }
  catch (e) { $("loading").textContent = "This browser cannot read the page's embedded data (it needs DecompressionStream: Chromium 80+, Firefox 113+, Safari 16.4+)."; throw e; }
  $("loading").remove();
  $("dataset").innerHTML = Object.keys(DATA.examples).map(d => `<option>${esc(d)}</option>`).join("");
  if (!Object.keys(DATA.examples).length) {  // no run stored predictions.jsonl
    $("examples").innerHTML = "<p>No run of this experiment stored its test predictions (predictions.jsonl).</p>";
    setupAttention(); document.body.dataset.ready = "1"; return;
  }
  setupControls();
  $("dataset").onchange = () => { setupControls(); refresh(true); };
  $("runA").onchange = () => { fillSeeds($("seedA"), $("runA").value, true); refresh(true); };
  $("runB").onchange = () => { fillSeeds($("seedB"), $("runB").value, true); refresh(true); };
  for (const id of ["seedA", "seedB", "metric", "sort"]) $(id).onchange = () => refresh(true);
  for (const id of ["search", "mindiff"]) $(id).oninput = () => refresh(true);
  $("others").onchange = () => render();
  $("prev").onclick = () => { if (state.page > 0) { state.page--; render(); } };
  $("next").onclick = () => { if ((state.page + 1) * PAGE < state.order.length) { state.page++; render(); } };
  refresh(true);
  setupAttention();
  document.body.dataset.ready = "1";
}
start();
