"""Inline SVG charts for the report pages (no plotting library in the browser, nothing fetched): a line
chart and the seed plot of the leaderboard. Written by hand because the page must hold its figures as
text; matplotlib's SVG output is ~10x larger per chart and embeds its fonts' glyphs as paths."""
from __future__ import annotations

import math
from html import escape

# 10 colours that stay apart for the usual colour-vision deficiencies (Okabe-Ito + Tol); after 10, dashes
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#882255", "#44AA99",
           "#999933", "#332288")
DASHES = ("", "6 3", "2 2", "8 3 2 3")


def style(k: int) -> tuple[str, str]:
    """(colour, dash pattern) of the k-th series: 40 distinct combinations."""
    return PALETTE[k % len(PALETTE)], DASHES[(k // len(PALETTE)) % len(DASHES)]


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0) * 0.1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    return [round(start + i * step, 10) for i in range(int((hi - start) / step + 1e-9) + 1)]


def _fmt(v: float) -> str:
    a = abs(v)
    return f"{v:.0e}" if 0 < a < 1e-3 else f"{v:g}" if a >= 1e4 or a == 0 else f"{v:.4g}"


def line_chart(series: list[dict], title: str, xlabel: str, ylabel: str, width: int = 620, height: int = 300) -> str:
    """series: [{"label", "points": [(x, y)...]}]; the legend is HTML beside the chart (any number of
    series stays readable), each line keyed by colour and dash."""
    pts = [p for s in series for p in s["points"]]
    if not pts:
        return ""
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    pad = (y1 - y0) * 0.05 or abs(y0) * 0.05 or 1.0
    y0, y1 = y0 - pad, y1 + pad
    L, R, T, B = 64, 12, 26, 40
    W, H = width - L - R, height - T - B

    def X(x):
        return L + (x - x0) / (x1 - x0) * W

    def Y(y):
        return T + (1 - (y - y0) / (y1 - y0)) * H
    out = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="{width / 2}" y="16" text-anchor="middle" class="t">{escape(title)}</text>',
           f'<rect x="{L}" y="{T}" width="{W}" height="{H}" class="frame"/>']
    for t in nice_ticks(y0, y1):
        out.append(f'<line x1="{L}" x2="{L + W}" y1="{Y(t):.1f}" y2="{Y(t):.1f}" class="grid"/>'
                   f'<text x="{L - 4}" y="{Y(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for t in nice_ticks(x0, x1, 6):
        out.append(f'<text x="{X(t):.1f}" y="{T + H + 14}" text-anchor="middle">{_fmt(t)}</text>')
    out.append(f'<text x="{L + W / 2}" y="{height - 6}" text-anchor="middle">{escape(xlabel)}</text>'
               f'<text transform="translate(12 {T + H / 2}) rotate(-90)" text-anchor="middle">{escape(ylabel)}</text>')
    for k, s in enumerate(series):
        c, d = style(k)
        path = " ".join(f"{'M' if i == 0 else 'L'}{X(x):.1f},{Y(y):.1f}" for i, (x, y) in enumerate(s["points"]))
        out.append(f'<path d="{path}" fill="none" stroke="{c}" stroke-width="1.6"'
                   + (f' stroke-dasharray="{d}"' if d else "") + f'><title>{escape(s["label"])}</title></path>')
        if len(s["points"]) <= 30:
            out += [f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="2.2" fill="{c}"/>' for x, y in s["points"]]
    out.append("</svg>")
    legend = "".join(f'<li><svg width="28" height="10"><line x1="0" x2="28" y1="5" y2="5" stroke="{style(k)[0]}" '
                     f'stroke-width="2"' + (f' stroke-dasharray="{style(k)[1]}"' if style(k)[1] else "")
                     + f'/></svg>{escape(s["label"])}' + (f' <small>({s["seeds"]} seeds)</small>' if s.get("seeds", 1) > 1
                                                          else "") + "</li>" for k, s in enumerate(series))
    return f'<figure class="fig">{"".join(out)}<ul class="legend">{legend}</ul></figure>'


def seed_plot(rows: list[dict], title: str, lead: float | None, width: int = 620) -> str:
    """One line per run: each seed a dot, the mean a tick, the 95% CI (two-level bootstrap) a bar; LEAD
    a dashed vertical line. rows: [{"label", "seeds": [values], "mean", "ci": (lo, hi) or None}]."""
    vals = [v for r in rows for v in r["seeds"]] + [v for r in rows if r.get("ci") for v in r["ci"]]
    vals += [lead] if lead is not None else []
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    pad = (hi - lo) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    L, R, T, rowh = 200, 16, 28, 18
    H = rowh * len(rows)
    height = T + H + 34
    W = width - L - R

    def X(x):
        return L + (x - lo) / (hi - lo) * W
    out = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="{width / 2}" y="16" text-anchor="middle" class="t">{escape(title)}</text>',
           f'<rect x="{L}" y="{T}" width="{W}" height="{H}" class="frame"/>']
    for t in nice_ticks(lo, hi, 6):
        out.append(f'<line x1="{X(t):.1f}" x2="{X(t):.1f}" y1="{T}" y2="{T + H}" class="grid"/>'
                   f'<text x="{X(t):.1f}" y="{T + H + 14}" text-anchor="middle">{_fmt(t)}</text>')
    for k, r in enumerate(rows):
        y = T + rowh * k + rowh / 2
        lab = r["label"] if len(r["label"]) <= 30 else r["label"][:29] + "…"
        out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(lab)}</text>')
        if r.get("ci"):
            a, b = r["ci"]
            out.append(f'<line x1="{X(a):.1f}" x2="{X(b):.1f}" y1="{y:.1f}" y2="{y:.1f}" class="ci">'
                       f'<title>95% CI {a:.2f}-{b:.2f}</title></line>')
        for v in r["seeds"]:
            out.append(f'<circle cx="{X(v):.1f}" cy="{y:.1f}" r="3" class="seed"><title>{v:.2f}</title></circle>')
        if r.get("mean") is not None:
            out.append(f'<line x1="{X(r["mean"]):.1f}" x2="{X(r["mean"]):.1f}" y1="{y - 6:.1f}" y2="{y + 6:.1f}" '
                       f'class="mean"><title>mean {r["mean"]:.2f}</title></line>')
    if lead is not None:
        out.append(f'<line x1="{X(lead):.1f}" x2="{X(lead):.1f}" y1="{T}" y2="{T + H}" class="lead">'
                   f'<title>LEAD {lead:.2f}</title></line>'
                   f'<text x="{X(lead) + 3:.1f}" y="{T + 10}" class="leadt">LEAD</text>')
    out.append(f'<text x="{L + W / 2}" y="{height - 4}" text-anchor="middle">ROUGE-1 F1 x 100: dots seeds, tick mean, '
               f'bar 95% CI (seeds and examples)</text></svg>')
    return "".join(out)
