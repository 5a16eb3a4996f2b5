"""Tests of ``seq2seq_zoo.data.download`` against a real HTTP server on 127.0.0.1 (no internet).

The server serves a temporary folder; tests put the "official" files under ``origin/`` and mirror
copies under ``mirror/<dataset>/``. Every request path is recorded, so a test can check what was
fetched (and that nothing was). The real-data tests rebuild each dataset's sources from the staged
files in ../shared/data (ZOO_SHARED_DATA overrides) and check that the real manifest entries, with
their real final sha256 sums, reproduce those files byte for byte; they are skipped without them.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import json
import os
import socket
import threading
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from seq2seq_zoo.data import download as dl
from seq2seq_zoo.data.download import DatasetSpec, DownloadError, FileSpec

FIXTURES = Path(__file__).parent / "fixtures" / "download"
SHARED = Path(os.environ.get("ZOO_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def listing(folder: Path) -> list[str]:
    """Every entry of a folder, hidden ones included (temporary files are hidden)."""
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# --------------------------------------------------------------------------------------------------
# the local HTTP server
# --------------------------------------------------------------------------------------------------

class _Handler(SimpleHTTPRequestHandler):
    requests: list[str]  # set on a per-server subclass

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_GET(self):
        self.requests.append(self.path)
        if self.path == "/short":  # announces 1000 bytes, sends 10, hangs up
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"0123456789")
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "srv"
    (root / "origin").mkdir(parents=True)
    (root / "mirror").mkdir()
    requests: list[str] = []
    handler = type("Handler", (_Handler,), {"requests": requests})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="test-http",
                              daemon=True)
    thread.start()
    try:
        yield SimpleNamespace(root=root, url=f"http://127.0.0.1:{httpd.server_address[1]}", requests=requests)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def _no_mirror_env(monkeypatch):
    monkeypatch.delenv(dl.MIRROR_ENV, raising=False)


def put(root: Path, rel: str, data: bytes) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


# --------------------------------------------------------------------------------------------------
# a tiny fake dataset: two plain files, one file in a zip, one file rebuilt by a converter
# --------------------------------------------------------------------------------------------------

A = b"first line\nsecond line \xc3\xa9\n"
B = b'{"id": "1", "text": "x"}\n{"id": "2", "text": "y"}'  # no trailing newline, like dialogsum.train
ZIP_TXT = b"inside the archive\r\nkept as is\r\n"
CSV_SRC = 'article,summary,n\n"a , b",s1,3\nplain,"s ""2""",1\n'.encode()


def make_zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


@pytest.fixture
def tiny(server, monkeypatch):
    """Dataset 'tiny' whose sources live under {server}/origin/; returns what the tests need."""
    archive = make_zip({"pack/inner.txt": ZIP_TXT, "pack/other.txt": b"unused"})
    put(server.root, "origin/a.txt", A)
    put(server.root, "origin/b.jsonl", B)
    put(server.root, "origin/pack.zip", archive)
    put(server.root, "origin/src.csv", CSV_SRC)
    o = f"{server.url}/origin"
    articles = b"a , b\nplain\n"
    spec = DatasetSpec(
        name="tiny", description="test", license="none",
        files=(
            FileSpec("a.txt", f"{o}/a.txt", sha(A), len(A)),
            FileSpec("b.jsonl", f"{o}/b.jsonl", sha(B), len(B)),
            FileSpec("inner.txt", f"{o}/pack.zip", sha(ZIP_TXT), member="pack/inner.txt",
                     member_sha256=sha(ZIP_TXT), source_sha256=sha(archive)),
            FileSpec("src.article.txt", f"{o}/src.csv", sha(articles), convert="csv_column_to_lines:article"),
        ),
    )
    monkeypatch.setitem(dl.MANIFEST, "tiny", spec)
    return SimpleNamespace(spec=spec, archive=archive, articles=articles, origin=o)


EXPECTED_NAMES = ["a.txt", "b.jsonl", "inner.txt", "src.article.txt"]


def test_download_puts_verified_files_in_place(tiny, server, tmp_path):
    data_dir = tmp_path / "data"
    paths = dl.download("tiny", data_dir, progress=False)
    folder = (data_dir / "tiny").resolve()
    assert paths == [folder / n for n in EXPECTED_NAMES]
    assert (folder / "a.txt").read_bytes() == A
    assert (folder / "b.jsonl").read_bytes() == B
    assert (folder / "inner.txt").read_bytes() == ZIP_TXT
    assert (folder / "src.article.txt").read_bytes() == tiny.articles
    assert listing(folder) == EXPECTED_NAMES  # no temporary file, no leftover archive
    # each source fetched once, from the origin
    assert sorted(server.requests) == ["/origin/a.txt", "/origin/b.jsonl", "/origin/pack.zip", "/origin/src.csv"]
    # final files are readable like any file the user creates (not mkstemp's 0600)
    assert (folder / "a.txt").stat().st_mode & 0o044 == 0o044 & ~_umask()


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_second_call_skips_present_files(tiny, server, tmp_path, capsys):
    data_dir = tmp_path / "data"
    dl.download("tiny", data_dir, progress=False)
    n = len(server.requests)
    mtimes = {p: p.stat().st_mtime_ns for p in (data_dir / "tiny").iterdir()}
    paths = dl.download("tiny", data_dir, progress=True)
    assert len(server.requests) == n  # nothing fetched again
    assert {p: p.stat().st_mtime_ns for p in (data_dir / "tiny").iterdir()} == mtimes
    assert [p.name for p in paths] == EXPECTED_NAMES
    err = capsys.readouterr().err
    for name in EXPECTED_NAMES:
        assert f"tiny: {name} already present, checksum ok" in err


def test_only_missing_files_are_fetched(tiny, server, tmp_path):
    data_dir = tmp_path / "data"
    dl.download("tiny", data_dir, progress=False)
    (data_dir / "tiny" / "inner.txt").unlink()
    server.requests.clear()
    dl.download("tiny", data_dir, progress=False)
    assert server.requests == ["/origin/pack.zip"]
    assert (data_dir / "tiny" / "inner.txt").read_bytes() == ZIP_TXT


def test_corrupted_plain_file_raises_and_leaves_nothing(tiny, server, tmp_path):
    bad = A.replace(b"second", b"SECOND")
    put(server.root, "origin/a.txt", bad)
    data_dir = tmp_path / "data"
    with pytest.raises(DownloadError) as ei:
        dl.download("tiny", data_dir, progress=False)
    msg = str(ei.value)
    assert "checksum mismatch for a.txt" in msg
    assert sha(A) in msg and sha(bad) in msg
    assert f"{tiny.origin}/a.txt" in msg
    assert "\n" not in msg
    assert listing(data_dir / "tiny") == []  # no partial file, no temporary file


def test_corrupted_archive_raises_and_leaves_nothing(tiny, server, tmp_path):
    put(server.root, "origin/pack.zip", tiny.archive[:-7] + b"garbage")
    data_dir = tmp_path / "data"
    with pytest.raises(DownloadError) as ei:
        dl.download("tiny", data_dir, progress=False)
    msg = str(ei.value)
    assert "checksum mismatch for pack.zip" in msg and sha(tiny.archive) in msg
    # the two plain files before it were verified and kept; nothing else is there
    assert listing(data_dir / "tiny") == ["a.txt", "b.jsonl"]


def test_converter_output_with_wrong_checksum_is_not_written(tiny, server, tmp_path, monkeypatch):
    files = list(tiny.spec.files)
    files[3] = dataclasses.replace(files[3], convert="csv_column_to_lines:summary")  # wrong column
    monkeypatch.setitem(dl.MANIFEST, "tiny", dataclasses.replace(tiny.spec, files=tuple(files)))
    with pytest.raises(DownloadError, match=r"checksum mismatch for src\.article\.txt .*nothing was written"):
        dl.download("tiny", tmp_path / "data", progress=False)
    assert "src.article.txt" not in listing(tmp_path / "data" / "tiny")
    assert not [n for n in listing(tmp_path / "data" / "tiny") if n.startswith(".")]


def test_404_names_the_url_and_what_to_do(tiny, server, tmp_path):
    (server.root / "origin" / "b.jsonl").unlink()
    data_dir = tmp_path / "data"
    with pytest.raises(DownloadError) as ei:
        dl.download("tiny", data_dir, progress=False)
    msg = str(ei.value)
    assert "HTTP 404" in msg
    assert f"{tiny.origin}/b.jsonl" in msg
    assert "--mirror" in msg and dl.MIRROR_ENV in msg
    assert str((data_dir / "tiny").resolve()) in msg  # where to copy the files by hand
    assert "\n" not in msg
    assert listing(data_dir / "tiny") == ["a.txt"]


def test_truncated_response_raises(tiny, server, tmp_path, monkeypatch):
    spec = DatasetSpec("cut", "test", "none", (FileSpec("x.txt", f"{server.url}/short", sha(b"")),))
    monkeypatch.setitem(dl.MANIFEST, "cut", spec)
    with pytest.raises(DownloadError, match=r"/short"):
        dl.download("cut", tmp_path / "data", progress=False, timeout=5)
    assert listing(tmp_path / "data" / "cut") == []


def test_timeout_raises(tmp_path, monkeypatch):
    with socket.socket() as lsock:  # accepts connections (backlog) but never answers
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(1)
        url = f"http://127.0.0.1:{lsock.getsockname()[1]}/never.txt"
        monkeypatch.setitem(dl.MANIFEST, "slow", DatasetSpec("slow", "t", "n", (FileSpec("n.txt", url, sha(b"")),)))
        with pytest.raises(DownloadError, match=r"timed out after 0\.3s at http://127\.0\.0\.1:\d+/never\.txt"):
            dl.download("slow", tmp_path / "data", progress=False, timeout=0.3)
    assert listing(tmp_path / "data" / "slow") == []


def test_connection_refused_raises(tmp_path, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x.txt"  # nothing listens there any more
    monkeypatch.setitem(dl.MANIFEST, "down", DatasetSpec("down", "t", "n", (FileSpec("x.txt", url, sha(b"")),)))
    with pytest.raises(DownloadError, match=r"cannot reach http://127\.0\.0\.1:\d+/x\.txt .*check your internet"):
        dl.download("down", tmp_path / "data", progress=False, timeout=5)


def test_unknown_name_suggests_the_nearest():
    with pytest.raises(DownloadError) as ei:
        dl.download("dialgsum", "/nonexistent-never-created", progress=False)
    msg = str(ei.value)
    assert "unknown dataset 'dialgsum'" in msg
    assert "did you mean 'dialogsum'?" in msg
    for name in ("dialogsum", "samsum", "gigaword"):
        assert name in msg
    assert not Path("/nonexistent-never-created").exists()
    with pytest.raises(DownloadError, match="did you mean 'gigaword'"):
        dl.download("gigawords", "/nonexistent-never-created", progress=False)
    with pytest.raises(DownloadError, match="did you mean 'cnn_dailymail'"):
        dl.download("cnn", "/nonexistent-never-created", progress=False)
    with pytest.raises(DownloadError) as ei:  # nothing close: no silly suggestion, just the list
        dl.download("xyzzy", "/nonexistent-never-created", progress=False)
    assert "did you mean" not in str(ei.value) and "known datasets: " in str(ei.value)
    assert "dialogsum" in str(ei.value)


def test_names_are_normalised(tiny, server, tmp_path):
    paths = dl.download(" TINY ", tmp_path / "data", progress=False)
    assert paths[0] == (tmp_path / "data" / "tiny" / "a.txt").resolve()


def test_available_lists_the_manifest():
    names = dl.available()
    assert names == sorted(dl.MANIFEST)
    assert {"dialogsum", "samsum", "gigaword"} <= set(names)


def test_bad_existing_file_needs_force(tiny, server, tmp_path):
    data_dir = tmp_path / "data"
    dl.download("tiny", data_dir, progress=False)
    target = data_dir / "tiny" / "a.txt"
    target.write_bytes(b"tampered")
    server.requests.clear()
    with pytest.raises(DownloadError) as ei:
        dl.download("tiny", data_dir, progress=False)
    msg = str(ei.value)
    assert "--force" in msg and str(target.resolve()) in msg and sha(b"tampered") in msg
    assert target.read_bytes() == b"tampered"  # left alone
    assert server.requests == []  # checked before fetching anything

    paths = dl.download("tiny", data_dir, progress=False, force=True)
    assert target.read_bytes() == A
    assert server.requests == ["/origin/a.txt"]  # good files are not fetched again, even with force
    assert [p.name for p in paths] == EXPECTED_NAMES
    assert listing(data_dir / "tiny") == EXPECTED_NAMES


def test_force_keeps_the_old_file_when_the_new_one_is_bad(tiny, server, tmp_path):
    data_dir = tmp_path / "data"
    (data_dir / "tiny").mkdir(parents=True)
    (data_dir / "tiny" / "a.txt").write_bytes(b"old")
    put(server.root, "origin/a.txt", b"also wrong")
    with pytest.raises(DownloadError, match="checksum mismatch for a.txt"):
        dl.download("tiny", data_dir, progress=False, force=True)
    assert (data_dir / "tiny" / "a.txt").read_bytes() == b"old"
    assert listing(data_dir / "tiny") == ["a.txt"]


def _fill_mirror(server, tiny) -> None:
    for name in ("a.txt", "b.jsonl", "pack.zip", "src.csv"):
        put(server.root, f"mirror/tiny/{name}", (server.root / "origin" / name).read_bytes())
        (server.root / "origin" / name).unlink()  # the origin is "down": only the mirror can work


def test_mirror_from_environment_variable(tiny, server, tmp_path, monkeypatch):
    _fill_mirror(server, tiny)
    monkeypatch.setenv(dl.MIRROR_ENV, f"{server.url}/mirror/")
    paths = dl.download("tiny", tmp_path / "data", progress=False)
    assert [p.read_bytes() for p in paths[:3]] == [A, B, ZIP_TXT]
    assert sorted(server.requests) == ["/mirror/tiny/a.txt", "/mirror/tiny/b.jsonl", "/mirror/tiny/pack.zip",
                                       "/mirror/tiny/src.csv"]


def test_mirror_argument_wins_over_environment(tiny, server, tmp_path, monkeypatch):
    _fill_mirror(server, tiny)
    monkeypatch.setenv(dl.MIRROR_ENV, "http://127.0.0.1:9/definitely-not-used")
    dl.download("tiny", tmp_path / "data", progress=False, mirror=f"{server.url}/mirror")
    assert all(r.startswith("/mirror/tiny/") for r in server.requests) and len(server.requests) == 4


def test_mirror_error_names_the_mirror_url(tiny, server, tmp_path):
    with pytest.raises(DownloadError) as ei:  # the mirror folder is empty
        dl.download("tiny", tmp_path / "data", progress=False, mirror=f"{server.url}/mirror")
    msg = str(ei.value)
    assert f"{server.url}/mirror/tiny/a.txt" in msg and "HTTP 404" in msg
    assert "mirror" in msg and str((tmp_path / "data" / "tiny").resolve()) in msg


def test_local_folder_as_mirror(tiny, server, tmp_path):
    _fill_mirror(server, tiny)
    paths = dl.download("tiny", tmp_path / "data", progress=False, mirror=str(server.root / "mirror"))
    assert paths[0].read_bytes() == A and paths[3].read_bytes() == tiny.articles
    assert server.requests == []  # read through file://, not over HTTP


def test_source_url_mapping():
    f = dl.MANIFEST["dialogsum"].files[0]
    assert dl.source_url("dialogsum", f) == f.url
    assert dl.source_url("dialogsum", f, "https://mirror.example/zoo/") == \
        "https://mirror.example/zoo/dialogsum/dialogsum.train.jsonl"
    g = dl.MANIFEST["gigaword"].files[0]
    assert dl.source_url("gigaword", g, "http://m") == "http://m/gigaword/input.txt"


# --------------------------------------------------------------------------------------------------
# real manifest entries
# --------------------------------------------------------------------------------------------------

def test_manifest_entries_are_well_formed():
    for name, spec in dl.MANIFEST.items():
        assert spec.name == name and spec.files
        names = [f.name for f in spec.files]
        assert len(set(names)) == len(names)
        for f in spec.files:
            assert f.url.startswith("https://"), f.url
            assert len(f.sha256) == 64 and int(f.sha256, 16) >= 0
            if f.convert:
                dl.converter(f.convert)  # known converter
        # within one dataset, different sources must have different basenames (mirror layout)
        urls = {f.url for f in spec.files}
        assert len({u.rsplit("/", 1)[1] for u in urls}) == len(urls)
    ds = dl.MANIFEST["dialogsum"]
    assert [f.name for f in ds.files][:3] == ["dialogsum.train.jsonl", "dialogsum.dev.jsonl", "dialogsum.test.jsonl"]
    assert all("raw.githubusercontent.com/cylnlp/dialogsum/" in f.url and "/DialogSum_Data/" in f.url
               for f in ds.files)
    assert dl.MANIFEST["dialogsum"].files[0].sha256 == \
        "660238631152c062e67186da6622c1e8925579e82563d66d611abb9dcc19bb72"


def test_real_samsum_entry_with_fixture_archive(server, tmp_path, monkeypatch):
    """The real samsum entry (URL basename, member names, converter), fed a small fixture archive."""
    src = FIXTURES / "samsum_mini"
    archive = make_zip({f"samsum/{n}": (src / n).read_bytes()
                        for n in ("train.json", "val.json", "test.json", "licence.txt", "README.txt")})
    put(server.root, "mirror/samsum/samsum.zip", archive)
    real = dl.MANIFEST["samsum"]
    final_bytes = {
        "samsum.train.jsonl": (src / "expected" / "samsum.train.jsonl").read_bytes(),
        "samsum.val.jsonl": (src / "expected" / "samsum.val.jsonl").read_bytes(),
        "samsum.test.jsonl": (src / "expected" / "samsum.test.jsonl").read_bytes(),
        "LICENCE.txt": (src / "licence.txt").read_bytes(),
        "README.orig.txt": (src / "README.txt").read_bytes(),
    }
    assert sorted(final_bytes) == sorted(f.name for f in real.files)
    patched = tuple(dataclasses.replace(
        f, sha256=sha(final_bytes[f.name]), source_sha256=sha(archive),
        member_sha256=sha((src / f.member.split("/")[1]).read_bytes())) for f in real.files)
    monkeypatch.setitem(dl.MANIFEST, "samsum", dataclasses.replace(real, files=patched))

    paths = dl.download("samsum", tmp_path / "data", progress=False, mirror=f"{server.url}/mirror")
    assert server.requests == ["/mirror/samsum/samsum.zip"]  # one archive, five files
    for p in paths:
        assert p.read_bytes() == final_bytes[p.name], p.name
    assert listing(tmp_path / "data" / "samsum") == sorted(final_bytes)
    rows = [json.loads(line) for line in paths[0].read_text(encoding="utf-8").splitlines()]
    assert list(rows[0]) == ["id", "dialogue", "summary"]  # keys reordered as our readers' files have them
    assert rows[2]["dialogue"] == "" and "\r\n" in rows[0]["dialogue"]


def test_real_samsum_entry_rejects_a_changed_archive(server, tmp_path):
    """Unpatched real entry: a fixture archive is not the real samsum.zip, so its sha256 must be refused."""
    put(server.root, "mirror/samsum/samsum.zip", make_zip({"samsum/train.json": b"[]"}))
    with pytest.raises(DownloadError) as ei:
        dl.download("samsum", tmp_path / "data", progress=False, mirror=f"{server.url}/mirror")
    assert "checksum mismatch for samsum.zip" in str(ei.value)
    assert dl.MANIFEST["samsum"].files[0].source_sha256 in str(ei.value)
    assert listing(tmp_path / "data" / "samsum") == []


# --------------------------------------------------------------------------------------------------
# converters
# --------------------------------------------------------------------------------------------------

def test_csv_converters():
    assert dl.CONVERTERS["csv_column_to_lines"](CSV_SRC, "article") == b"a , b\nplain\n"
    assert dl.CONVERTERS["csv_column_to_lines"](CSV_SRC, "summary") == b's1\ns "2"\n'
    with pytest.raises(ValueError, match="no column 'nope'"):
        dl.CONVERTERS["csv_column_to_lines"](CSV_SRC, "nope")
    with pytest.raises(ValueError, match="line break"):
        dl.CONVERTERS["csv_column_to_lines"](b'a\n"x\ny"\n', "a")
    out = dl.CONVERTERS["csv_to_jsonl"]('article,reference_summary\n"Zoë, ""hi""","l1\nl2"\n'.encode(),
                                        "id=,article=article,highlights=reference_summary")
    assert out == '{"id": null, "article": "Zoë, \\"hi\\"", "highlights": "l1\\nl2"}\n'.encode()


def test_cnn_chunk_converter_drops_partial_row_and_duplicates():
    ida, idb, dup = "a" * 40, "b" * 40, "ff9cc7656670d601db14b4a757ab74961698caab"
    chunk = ('ial, ends mid-row.","tail highlight\nmore ."\n'
             f'{ida},"Article, one","h1 .\nh2 ."\n{dup},dup article,dup h\n{idb},Two,"h ""q"""\n').encode()
    out = dl.CONVERTERS["cnn_csv_chunk_to_jsonl"](chunk, dup)
    assert out.decode().splitlines() == [
        json.dumps({"id": ida, "article": "Article, one", "highlights": "h1 .\nh2 ."}),
        json.dumps({"id": idb, "article": "Two", "highlights": 'h "q"'}),
    ]
    with pytest.raises(ValueError):
        dl.CONVERTERS["cnn_csv_chunk_to_jsonl"](b"no ids at all\n", None)


def test_latin1_converter_is_lossless():
    original = "café, naïve – no\xa0break".encode("latin-1", errors="replace")
    out = dl.CONVERTERS["latin1_to_utf8"](original, None)
    assert out.decode("utf-8").encode("latin-1") == original
    assert out == "café, naïve ? no\xa0break".encode()


# --------------------------------------------------------------------------------------------------
# end to end with the real manifest and the staged real data (sources rebuilt from the final files)
# --------------------------------------------------------------------------------------------------

def _lines(p: Path) -> list[str]:
    return p.read_text(encoding="utf-8").split("\n")[:-1]


def _jsonl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines()]


def _csv_bytes(header: list[str], rows: list[list]) -> bytes:
    buf = io.StringIO(newline="")
    w = csv.writer(buf, lineterminator="\n")  # like pandas.DataFrame.to_csv(index=False)
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue().encode("utf-8")


def _rebuild_sources(name: str, d: Path) -> tuple[dict[str, bytes], set[str]]:
    """Plausible original sources for dataset ``name`` built from the staged files in ``d``.

    Returns ({basename: bytes}, names of final files whose source/member sha256 cannot be reproduced).
    """
    if name == "dialogsum":
        return {f.name: (d / f.name).read_bytes() for f in dl.MANIFEST[name].files}, set()
    if name == "samsum":
        members = {}
        for split in ("train", "val", "test"):
            rows = [{"id": r["id"], "summary": r["summary"], "dialogue": r["dialogue"]}  # original key order
                    for r in _jsonl(d / f"samsum.{split}.jsonl")]
            members[f"samsum/{split}.json"] = json.dumps(rows, indent=2).encode()  # ASCII escapes, indent
        members["samsum/licence.txt"] = (d / "LICENCE.txt").read_bytes()
        members["samsum/README.txt"] = (d / "README.orig.txt").read_bytes()
        return {"samsum.zip": make_zip(members)}, {f.name for f in dl.MANIFEST[name].files}
    if name == "gigaword":
        arts, titles = _lines(d / "valid_random10k.article.txt"), _lines(d / "valid_random10k.title.txt")
        csv_src = _csv_bytes(["article", "summary", "article_len"],
                             [[a, t, len(a.split())] for a, t in zip(arts, titles)])
        zip_src = make_zip({"sumdata/train/train.article.txt": (d / "train.article.txt").read_bytes(),
                            "sumdata/train/train.title.txt": (d / "train.title.txt").read_bytes(),
                            "sumdata/train/valid.article.filter.txt": (d / "valid.article.txt").read_bytes(),
                            "sumdata/train/valid.title.filter.txt": (d / "valid.title.txt").read_bytes()})
        return ({"input.txt": (d / "test.article.txt").read_bytes(),
                 "task1_ref0.txt": (d / "test.title.txt").read_bytes(),
                 "sample_data.zip": zip_src, "gigaword_test.csv": csv_src},
                {f.name for f in dl.MANIFEST[name].files if not f.direct})
    if name == "cnn_dailymail":
        first = _jsonl(d / "cnn_dailymail.train.first500.jsonl")
        tail = _jsonl(d / "cnn_dailymail.train.idtail822.jsonl")
        dup = "ff9cc7656670d601db14b4a757ab74961698caab"
        rows = sorted([[r["id"], r["article"], r["highlights"]] for r in tail]
                      + [[dup, first[230]["article"], first[230]["highlights"]]])
        buf = io.StringIO(newline="")
        csv.writer(buf, lineterminator="\n").writerows(rows)
        chunk = 'S probe is run by "" the, end.","Former ""x"" .\nIt is alleged ."\n' + buf.getvalue()
        val = _jsonl(d / "cnn_dailymail.validation.first1000.jsonl")
        test = _jsonl(d / "cnn_dailymail.test.first500.jsonl")
        return ({"cnn_dm_subset.csv": _csv_bytes(["article", "reference_summary"],
                                                 [[r["article"], r["highlights"]] for r in first]),
                 "train.csv_part_25": chunk.encode("utf-8"),
                 "cnn_dailymail_validation_subset.csv": _csv_bytes(
                     ["article", "highlights", "id"], [[r["article"], r["highlights"], r["id"]] for r in val]),
                 "cnn_dailymail_test.csv": _csv_bytes(
                     ["article", "highlights", "id"], [[r["article"], r["highlights"], r["id"]] for r in test])},
                {f.name for f in dl.MANIFEST[name].files})
    if name == "inshorts":
        original = (d / "news_summary.utf8.csv").read_text(encoding="utf-8").encode("latin-1")
        return {"news_summary.zip": make_zip({"news_summary.csv": original})}, set()  # member sha stays real
    raise AssertionError(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dialogsum", "samsum", "gigaword", "cnn_dailymail", "inshorts"])
def test_real_manifest_reproduces_staged_files(name, server, tmp_path, monkeypatch):
    staged = SHARED / name
    if not staged.is_dir():
        pytest.skip(f"staged data not found at {staged} (set ZOO_SHARED_DATA)")
    sources, unreproducible = _rebuild_sources(name, staged)
    for base, data in sources.items():
        put(server.root, f"mirror/{name}/{base}", data)
    real = dl.MANIFEST[name]
    # only the sums of rebuilt archives / CSVs are relaxed; every FINAL sha256 stays the real one
    files = tuple(dataclasses.replace(f, source_sha256=None, member_sha256=None)
                  if f.name in unreproducible else f for f in real.files)
    if name == "inshorts":
        files = tuple(dataclasses.replace(f, source_sha256=None) for f in files)
    monkeypatch.setitem(dl.MANIFEST, name, dataclasses.replace(real, files=files))

    paths = dl.download(name, tmp_path / "data", progress=False, mirror=f"{server.url}/mirror")
    assert [p.name for p in paths] == [f.name for f in real.files]
    for p, f in zip(paths, real.files):
        got = p.read_bytes()
        assert sha(got) == f.sha256, p.name
        assert got == (staged / f.name).read_bytes(), p.name
        if f.size is not None:
            assert len(got) == f.size, p.name
    assert listing(tmp_path / "data" / name) == sorted(f.name for f in real.files)
    assert len(server.requests) == len(sources)  # every source fetched exactly once
