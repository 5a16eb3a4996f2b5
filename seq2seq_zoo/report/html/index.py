"""``results/index.html``: every experiment folder with a link to its page, the leaderboard and the
findings, in one offline page. The leaderboard is ``results/leaderboard.json`` when ``zoo report`` wrote
one, else ``LEADERBOARD.md`` as ``report.leaderboard`` writes it; the findings are ``FINDINGS.md``
(``report.findings_text``); the Markdown is converted with the ``markdown`` package, its links to an
experiment's README.md pointed at the experiment's page."""
from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path

from seq2seq_zoo.report.html.page import PAGE_FILE, asset

INDEX_FILE = "index.html"


def _md(text: str, root: Path) -> str:
    import markdown
    html = markdown.markdown(text, extensions=["tables"])

    def link(m):
        href = m.group(1)
        page = href[: -len("README.md")] + PAGE_FILE if href.endswith("README.md") else None
        return f'href="{page}"' if page and (root / page).is_file() else m.group(0)
    return re.sub(r'href="([^"#:]+)"', link, html)


def _json_table(data) -> str:
    """A leaderboard.json of rows (a list of objects, or an object holding such lists) as tables."""
    lists = {"": data} if isinstance(data, list) else {k: v for k, v in data.items() if isinstance(v, list)} \
        if isinstance(data, dict) else {}
    out = []
    for name, rows in lists.items():
        rows = [r for r in rows if isinstance(r, dict)]
        if not rows:
            continue
        cols = list(dict.fromkeys(k for r in rows for k, v in r.items() if not isinstance(v, (dict, list))))
        out.append((f"<h3>{escape(name)}</h3>" if name else "") + "<table><tr>"
                   + "".join(f'<th class="l">{escape(c)}</th>' for c in cols) + "</tr>"
                   + "".join("<tr>" + "".join(f'<td class="l">{escape(_cell(r.get(c)))}</td>' for c in cols) + "</tr>"
                             for r in rows) + "</table>")
    return "".join(out)


def _board(data: dict, root: Path) -> str:
    """leaderboard.json's rows (``report.leaderboard``): per dataset, every run with its test mean ± sd over
    seeds, CI, the margin over LEAD, and the validation score that ranks it."""
    rows = data.get("rows") if isinstance(data, dict) else None
    if not rows or not all(isinstance(r, dict) and "dataset" in r and "test_mean" in r for r in rows):
        return _json_table(data)
    out = []
    if data.get("bases"):
        out.append("<p class=\"note\">Ranked by the validation score of each run ("
                   + escape("; ".join(f"{k}: {v}" for k, v in data["bases"].items())) + "); test scores shown beside it.</p>")
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        body = []
        for r in (r for r in rows if r["dataset"] == ds):
            folder = str(r.get("folder", ""))
            page = root / folder / PAGE_FILE
            where = f'<a href="{escape(folder)}/{PAGE_FILE}">{escape(folder)}</a>' if page.is_file() else escape(folder)
            run = str(r.get("run", "")) + (f"/{r['decoding']}" if r.get("decoding") else "")
            ci, lead = r.get("test_ci") or [], r.get("over_lead") or []
            marks = [m for m in (("below LEAD" if r.get("below_lead") else ""),
                                 (f"not converged ({r['not_converged']} seeds)" if r.get("not_converged") else ""),
                                 str(r.get("mark") or "")) if m]
            body.append("<tr>" + "".join([
                f'<td class="l">{escape(run)}</td><td class="l">{escape(str(r.get("family") or r.get("model") or ""))}</td>',
                f'<td class="l">{where}</td><td>{r.get("seeds", "")}</td>',
                f'<td>{_cell(r.get("validation_mean"))}</td>',
                f'<td>{_cell(r.get("test_mean"))}' + (f' ± {_cell(r["test_sd"])}' if r.get("test_sd") is not None else "")
                + "</td>",
                f'<td>{"" if len(ci) != 2 else _cell(ci[0]) + "-" + _cell(ci[1])}</td>',
                f'<td>{"" if not lead else f"{lead[0]:+.2f}" + (f" [{lead[1]:+.2f}, {lead[2]:+.2f}]" if len(lead) == 3 else "")}</td>',
                f'<td class="l">{escape("; ".join(marks))}</td>']) + "</tr>")
        out.append(f"<h3>{escape(ds)}</h3><table><tr><th class=\"l\">run</th><th class=\"l\">family</th>"
                   "<th class=\"l\">experiment</th><th>seeds</th><th>validation</th><th>test mean ± sd</th>"
                   "<th>test 95% CI</th><th>over LEAD [95% CI]</th><th class=\"l\">marks</th></tr>"
                   + "".join(body) + "</table>")
    return "".join(out)


def _cell(v) -> str:
    return "" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)


def _dataset_of(record: Path) -> str | None:
    """The dataset a record names; None for a damaged record (its folder's report names it)."""
    try:
        got = json.loads(record.read_text(encoding="utf-8"))
        return str(got["data"]["dataset"])
    except (OSError, ValueError, UnicodeDecodeError, KeyError, TypeError):
        return None


def build_index(root: Path, experiments: list[Path]) -> str:
    root = Path(root)
    items = []
    for d in experiments:
        rel = d.relative_to(root).as_posix()
        page = d / PAGE_FILE
        ds = sorted({_dataset_of(p) for p in list(d.glob("*/record.json"))[:50]} - {None})
        runs = len(list(d.glob("*/record.json")))
        link = f'<a href="{escape(rel)}/{PAGE_FILE}">{escape(rel)}</a>' if page.is_file() else escape(rel)
        items.append(f'<tr><td class="l">{link}</td><td class="l">{escape(", ".join(ds))}</td><td>{runs}</td></tr>')
    board = ""
    js = root / "leaderboard.json"
    if js.is_file():
        try:
            board = _board(json.loads(js.read_text(encoding="utf-8")), root)
        except ValueError:
            board = ""
    if not board and (root / "LEADERBOARD.md").is_file():
        board = _md((root / "LEADERBOARD.md").read_text(encoding="utf-8"), root)
    findings = _md((root / "FINDINGS.md").read_text(encoding="utf-8"), root) if (root / "FINDINGS.md").is_file() else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>seq2seq-zoo results</title><style>{asset("report.css")}</style></head>
<body>
<h1>Results</h1>
<p class="note">Generated by <code>zoo report</code> from the run records under this folder (not committed; rebuilt
each time). Each experiment's page shows its leaderboard, findings, outputs side by side, attention, buckets and curves.</p>
<h2 id="experiments">Experiments</h2>
<table><tr><th class="l">folder</th><th class="l">datasets</th><th>runs</th></tr>{"".join(items)}</table>
<h2 id="leaderboard">Leaderboard</h2>{board or "<p>No leaderboard yet.</p>"}
<h2 id="findings">Findings</h2>{findings or "<p>No findings yet.</p>"}
</body></html>
"""


def write_index(root: Path, experiments: list[Path]) -> Path:
    from seq2seq_zoo.utils import atomic_write_text
    path = Path(root) / INDEX_FILE
    atomic_write_text(path, build_index(root, experiments))
    return path
