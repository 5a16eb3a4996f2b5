"""The experiment page (report.html) and results/index.html: the copied-word rule, the embedded data,
and the page opened in a real browser (Debian's Chromium driven by Playwright)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli, tiny_experiment, write_dialogsum
from seq2seq_zoo.report.html import marks, page
from seq2seq_zoo.report.html.extract import cut_words
from seq2seq_zoo.report.html.svg import nice_ticks

RUNS = ('[[runs]]\nname = "tf"\n\n[[runs]]\nname = "lead"\nmodel = "lead"\nunit = "turn"\nchoose_k = [1, 2]\n\n'
        '[[findings]]\nclaim = "tf > lead"\nsource = "a claim to judge"\n')


# --------------------------------------------------------------------------------- without a browser
def test_summary_marks_known_answer():
    src = "#Person1#: Hello Ann, I want to buy a red hat.\n#Person2#: The red hat is here."
    summ = "#Person1# buys a red hat . a red hat <unk> Ann Ann"
    assert marks.words(summ) == ["Person1", "buys", "a", "red", "hat", "a", "red", "hat", "<unk>", "Ann", "Ann"]
    got = marks.summary_marks(src, summ)
    assert got == ["copied", "novel", "span", "span", "span", "span rep", "span rep", "span rep", "unk", "copied",
                   "copied"]
    assert marks.source_marks("Buy a HAT now", summ) == ["", "copied", "copied", ""]
    assert marks.novel_share(src, "buys a red coat") == 0.5
    assert marks.novel_share(src, "<unk> .") is None


def test_cut_words_keeps_line_breaks():
    assert cut_words("a b\nc  d e", 3) == ("a b\nc", True)
    assert cut_words("a b", 3) == ("a b", False)


def test_pack_roundtrip_is_deterministic():
    obj = {"x": ["é", None, 1.5], "y": "</script>"}
    assert page.pack(obj) == page.pack(obj)
    assert page.unpack(page.pack(obj)) == obj
    assert "</" not in page._json_script(obj)


def test_nice_ticks_cover_range():
    t = nice_ticks(31.3, 42.9)
    assert t[0] >= 31.3 and t[-1] <= 42.9 and len(t) >= 3
    assert all(abs((b - a) - (t[1] - t[0])) < 1e-9 for a, b in zip(t, t[1:]))


# ------------------------------------------------------------------------------- the tiny experiment
@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """A transformer (2 seeds) and LEAD on a 10-example DialogSum test set, trained and reported."""
    tmp = tmp_path_factory.mktemp("html")
    data_dir = write_dialogsum(tmp / "data", n_train=16, n_dev=4, n_test=10)
    toml = tmp / "htmlpage.toml"
    toml.write_text(tiny_experiment("htmlpage", RUNS, seeds="1, 2", data_dir=data_dir, epochs=2), encoding="utf-8")
    results = tmp / "results"
    assert run_cli(["run", str(toml), "--results", str(results), "--no-progress"]) == 0
    assert run_cli(["report", "--results", str(results)]) == 0
    return data_dir, results


def _preds(run_dir: Path) -> dict[str, str]:
    return {r["id"]: r["prediction"] for r in map(json.loads, (run_dir / "predictions.jsonl").read_text().splitlines())}


def _scores(run_dir: Path, metric: str = "rouge1") -> dict[str, float]:
    rows = [json.loads(x) for x in (run_dir / "scores.jsonl").read_text().splitlines()[1:]]
    return {r["id"]: r[metric] for r in rows}


def test_page_and_index_written_self_contained(experiment):
    _, results = experiment
    html = (results / "htmlpage" / "report.html").read_text(encoding="utf-8")
    assert 0 < len(html.encode()) <= page.BUDGET
    # nothing to fetch: no src/href to another file or host, no url(), no import
    assert not re.search(r'\ssrc=|href="(?!#|\.\./index\.html)|url\(|@import|https?://(?!www\.w3\.org/2000/svg)', html)
    blob = page.unpack(html.split('id="blob">')[1].split("</script>")[0])
    ds = blob["datasets"]["dialogsum"]
    assert len(ds["ids"]) == 10 and ds["items"][0][0].startswith("#Person1#: Hello")
    assert sorted(map(tuple, ds["cols"])) == [("lead", "1"), ("tf", "1"), ("tf", "2")]
    tf1 = _preds(results / "htmlpage" / "tf-seed1")
    col = ds["cols"].index(["tf", "1"])
    assert [it[2][col] for it in ds["items"]] == [tf1[i] for i in ds["ids"]]
    assert "tf &gt; lead" in html or "tf > lead" in html          # the findings table
    index = (results / "index.html").read_text(encoding="utf-8")
    assert 'href="htmlpage/report.html"' in index
    # rebuilt byte for byte
    before = html
    assert run_cli(["report", "--results", str(results)]) == 0
    assert (results / "htmlpage" / "report.html").read_text(encoding="utf-8") == before


def test_page_without_the_corpus_shows_the_rest(experiment):
    """With the corpus gone (a fresh clone without data), the page still holds every summary and score,
    and says which command fetches the sources."""
    from seq2seq_zoo.report import extras, significance
    from seq2seq_zoo.results import load_records
    data_dir, results = experiment
    exp = results / "htmlpage"
    moved = data_dir.parent / "moved"
    (data_dir / "dialogsum").rename(moved)
    try:
        records = load_records(exp)
        rows, _ = extras.with_decodes(records)
        html, cuts = page.build_page(exp, rows, significance.group_rows(rows), [])
    finally:
        moved.rename(data_dir / "dialogsum")
    assert cuts == []
    ds = page.unpack(html.split('id="blob">')[1].split("</script>")[0])["datasets"]["dialogsum"]
    assert all(it[0] is None for it in ds["items"]) and len(ds["items"]) == 10
    assert "zoo data download dialogsum" in html and "no copy statistics" in html
    assert "by reference length (words)" in html and "by source length (words)" not in html


# ------------------------------------------------------------------------------------- the browser
@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium, installed with apt-get when absent (CI runs as root on a fresh machine)."""
    path = shutil.which("chromium")
    if path is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.fail("the browser test needs Debian's chromium: apt-get install -y chromium (as root)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
            subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, timeout=900)
        path = shutil.which("chromium")
    assert path, "apt-get installed chromium, but it is not on PATH"
    return path


@pytest.fixture
def browser_page(chromium):
    """A Playwright page in headless system Chromium that records console errors, page errors and requests;
    the browser (the only process it starts, with Playwright's driver) is closed afterwards."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]' installs playwright")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            pg = browser.new_page(viewport={"width": 1280, "height": 900})
            pg.problems, pg.requests = [], []
            pg.on("console", lambda m: pg.problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            pg.on("pageerror", lambda e: pg.problems.append(f"page error: {e}"))
            pg.on("request", lambda r: pg.requests.append(r.url))
            yield pg
        finally:
            browser.close()


def _shown(pg) -> list[str]:
    return pg.eval_on_selector_all("article.ex", "els => els.map(e => e.dataset.id)")


def test_page_in_chromium(experiment, browser_page, tmp_path):
    data_dir, results = experiment
    exp = results / "htmlpage"
    url = (exp / "report.html").as_uri()
    pg = browser_page
    pg.goto(url)
    pg.wait_for_selector("body[data-ready='1']", timeout=15000)

    # the side-by-side view: A = tf, B = lead (the declared finding's pair); the shown summaries are the runs'
    assert pg.input_value("#runA") == "tf" and pg.input_value("#runB") == "lead"
    pg.select_option("#seedA", "1")
    tf1, lead = _preds(exp / "tf-seed1"), _preds(exp / "lead")
    shown = _shown(pg)
    assert len(shown) == 10
    for i in shown[:4]:
        for run, preds in (("tf", tf1), ("lead", lead)):
            txt = pg.inner_text(f'article.ex[data-id="{i}"] .sum[data-run="{run}"] .txt')
            assert txt.strip() == preds[i].strip()

    # sorting by the per-example difference A - B orders the examples as the scores say, and reverses
    # (the page carries scores to one decimal; ties keep the test-set order)
    a, b = _scores(exp / "tf-seed1"), _scores(exp / "lead")
    diff = {i: round(a[i], 1) - round(b[i], 1) for i in tf1}
    ids = list(tf1)
    pg.select_option("#sort", "diff")
    most = _shown(pg)
    assert most == sorted(ids, key=lambda i: (-diff[i], ids.index(i)))
    pg.select_option("#sort", "-diff")
    least = _shown(pg)
    assert least == sorted(ids, key=lambda i: (diff[i], ids.index(i)))
    assert least != most

    # the copied-word marks are marks.summary_marks / source_marks of the test's own reading of the corpus
    src = {r["fname"]: r["dialogue"] for r in map(json.loads, (data_dir / "dialogsum" / "dialogsum.test.jsonl")
                                                   .read_text().splitlines())}
    for i in least[:5]:
        for run, preds in (("tf", tf1), ("lead", lead)):
            got = pg.eval_on_selector_all(f'article.ex[data-id="{i}"] .sum[data-run="{run}"] .w',
                                          "els => els.map(e => [e.textContent, e.className.slice(2)])")
            assert [w for w, _ in got] == marks.words(preds[i])
            assert [m for _, m in got] == marks.summary_marks(src[i], preds[i])
        got = pg.eval_on_selector_all(f'article.ex[data-id="{i}"] .src .w', "els => els.map(e => e.className.slice(2))")
        assert got == marks.source_marks(src[i], tf1[i])
    assert any(m.startswith(("copied", "span")) for i in least for m in marks.summary_marks(src[i], lead[i]))

    # any other run, with the seed chosen beside it
    pg.select_option("#runA", "lead")
    pg.check('#others input[data-run="tf"]')
    pg.select_option('#others select[data-seedfor="tf"]', "2")
    tf2 = _preds(exp / "tf-seed2")
    i = _shown(pg)[0]
    assert pg.inner_text(f'article.ex[data-id="{i}"] .sum[data-run="tf"][data-seed="2"] .txt').strip() == tf2[i].strip()

    # search filters, the attention view draws, and nothing was fetched or went wrong
    pg.fill("#search", "nothing-matches-this")
    assert _shown(pg) == []
    pg.fill("#search", "")
    pg.select_option("#attRun", "tf")
    assert "p_gen" in pg.inner_text("#attPgen") or "no copy mechanism" in pg.inner_text("#attPgen")
    shot = tmp_path / "report.png"
    pg.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    assert pg.problems == []
    assert pg.requests == [url]

    index = (results / "index.html").as_uri()
    pg.goto(index)
    pg.click('a[href="htmlpage/report.html"]')
    pg.wait_for_selector("body[data-ready='1']", timeout=15000)
    assert pg.problems == []
    assert all(u.startswith("file://") for u in pg.requests)


def test_a_committed_experiments_page_in_chromium(browser_page, tmp_path):
    """The page of a committed experiment (the smallest: Inshorts headlines, 10 runs) is within the budget and
    renders with no error and no request (written to a temporary folder: the results stay as they are)."""
    from seq2seq_zoo.report import extras, significance
    from seq2seq_zoo.results import load_records
    exp = Path(__file__).resolve().parents[1] / "results" / "gpu_full" / "inshorts_headline"
    rows, _ = extras.with_decodes(load_records(exp))
    judged = json.loads((exp / "findings.json").read_text(encoding="utf-8")) if (exp / "findings.json").is_file() else []
    html, cuts = page.build_page(exp, rows, significance.group_rows(rows), judged)
    assert cuts == [] and len(html.encode()) <= page.BUDGET
    out = tmp_path / "report.html"
    out.write_text(html, encoding="utf-8")
    pg = browser_page
    pg.goto(out.as_uri())
    pg.wait_for_selector("body[data-ready='1']", timeout=15000)
    assert len(_shown(pg)) == 20
    pg.select_option("#sort", "-diff")
    pg.select_option("#attKind", "coverage")
    assert pg.problems == [] and pg.requests == [out.as_uri()]


def test_page_of_runs_without_predictions_or_maps(experiment, browser_page, tmp_path):
    """Runs that stored no predictions.jsonl and no attention.json: the page says so and shows the rest."""
    from seq2seq_zoo.report import extras, significance
    from seq2seq_zoo.results import load_records
    _, results = experiment
    exp = tmp_path / "htmlpage"
    shutil.copytree(results / "htmlpage", exp)
    for f in [*exp.glob("*/predictions.jsonl"), *exp.glob("*/attention.json")]:
        f.unlink()
    rows, _ = extras.with_decodes(load_records(exp))
    html, _ = page.build_page(exp, rows, significance.group_rows(rows), [])
    (exp / "report.html").write_text(html, encoding="utf-8")
    pg = browser_page
    pg.goto((exp / "report.html").as_uri())
    pg.wait_for_selector("body[data-ready='1']", timeout=15000)
    assert "stored its test predictions" in pg.inner_text("#examples")
    assert "stored an attention map" in pg.inner_text("#attention")
    assert "ROUGE-1 per seed" in html and pg.problems == []
