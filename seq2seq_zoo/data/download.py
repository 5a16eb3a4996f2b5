"""Backend of ``zoo data download NAME``: fetch a corpus's files, check sha256 sums, put them in place.

Each dataset in :data:`MANIFEST` lists its final files (the exact names and bytes our readers expect in
``<data_dir>/<dataset>/``). Every file records where it comes from: a plain file, a file inside a zip
archive (``member``), or a file rebuilt by a named converter (``convert``, e.g. JSON array -> JSON
Lines). Several final files can come from one source; that source is downloaded once per call.

How a download runs:

* Files already present with the right sha256 are skipped ("already present, checksum ok"). A present
  file with the wrong sha256 stops the call before anything is fetched, unless ``force=True``; then it is
  replaced, but only once the new copy has been verified.
* A source is streamed in chunks (tqdm bar in bytes) into a hidden temporary file in the target folder,
  hashed on the way, checked against its sha256 where known, and each final file is checked against its
  sha256 before an atomic ``os.replace``. A failed check deletes the temporary file; nothing partial is
  ever left under a final name.
* Every failure is a :class:`DownloadError` with a one-line message: what failed, which URL or file, and
  what to do (check the connection, use a mirror, copy the files by hand into the folder named).

Mirrors: ``mirror=`` (or the ``ZOO_DATA_MIRROR`` environment variable) is a base URL; a source is then
fetched from ``{mirror}/{dataset}/{basename of its URL}``. A bare local path is accepted too and is
turned into a ``file://`` URL.

The sha256 sums and sources come from the PROVENANCE.md files of the project's staged data. Most
sources are raw files of public GitHub repositories, pinned to the commit named in PROVENANCE.md, so
the bytes cannot drift. Where the historical "official" distribution cannot be opened with the standard
library (7z, Google Drive, Kaggle), the comments name it and say why another copy is used.
"""
from __future__ import annotations

import csv
import difflib
import hashlib
import http.client
import io
import json
import logging
import os
import posixpath
import re
import secrets
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from seq2seq_zoo.errors import DownloadError
from seq2seq_zoo.utils import atomic_write_bytes

__all__ = [
    "DownloadError", "FileSpec", "DatasetSpec", "MANIFEST", "CONVERTERS",
    "download", "available", "source_url", "sha256_file", "MIRROR_ENV",
]

log = logging.getLogger(__name__)

MIRROR_ENV = "ZOO_DATA_MIRROR"
CHUNK = 1 << 16
USER_AGENT = "seq2seq-zoo-data-download/0.1 (+python-urllib)"


@dataclass(frozen=True)
class FileSpec:
    """One final file of a dataset and where its bytes come from.

    name           final file name inside ``<data_dir>/<dataset>/``
    url            source URL (a plain file, or an archive / CSV when ``member`` / ``convert`` is set)
    sha256         sha256 of the FINAL file (always checked)
    size           size of the final file in bytes, if known (used for the progress bar)
    member         path of the file inside the zip archive at ``url`` (None: the URL is the file)
    member_sha256  sha256 of that member before conversion, if known (pinpoints a changed source)
    source_sha256  sha256 of the downloaded bytes when they differ from the final file (archive, CSV)
    source_size    size of the downloaded bytes, if known
    convert        name of a converter in :data:`CONVERTERS`, optionally ``"name:argument"``
    note           free text (provenance, caveats)
    """

    name: str
    url: str
    sha256: str
    size: int | None = None
    member: str | None = None
    member_sha256: str | None = None
    source_sha256: str | None = None
    source_size: int | None = None
    convert: str | None = None
    note: str = ""

    @property
    def direct(self) -> bool:
        """True when the downloaded bytes are the final file (no archive, no converter)."""
        return self.member is None and self.convert is None


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    description: str
    license: str
    files: tuple[FileSpec, ...]
    homepage: str = ""


# --------------------------------------------------------------------------------------------------
# converters: bytes of the source (or archive member) -> bytes of the final file
# --------------------------------------------------------------------------------------------------

def _json_array_to_jsonl(data: bytes, arg: str | None) -> bytes:
    """``json_array_to_jsonl[:key1,key2,...]``: a JSON array of objects -> JSON Lines.

    One ``json.dumps(obj, ensure_ascii=False)`` per line, each ending in "\\n"; string values are kept
    exactly. With a key list, those keys come first in that order (all must be present), any other keys
    follow in their original order; without one the original order is kept. The original SAMSum files
    order their keys id, summary, dialogue; the staged JSON Lines files use id, dialogue, summary.
    """
    rows = json.loads(data.decode("utf-8-sig"))
    if not isinstance(rows, list):
        raise ValueError(f"expected a JSON array, got {type(rows).__name__}")
    keys = [k for k in (arg or "").split(",") if k]
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ValueError(f"element {i} of the JSON array is not an object")
        if keys:
            missing = [k for k in keys if k not in r]
            if missing:
                raise ValueError(f"element {i} of the JSON array has no key {missing[0]!r}")
            r = {**{k: r[k] for k in keys}, **{k: v for k, v in r.items() if k not in keys}}
        out.append(json.dumps(r, ensure_ascii=False) + "\n")
    return "".join(out).encode("utf-8")


class _csv_limit:
    """Raise csv's field size limit for the duration of a conversion (long articles)."""

    def __enter__(self):
        self.old = csv.field_size_limit()
        csv.field_size_limit(1 << 30)

    def __exit__(self, *exc):
        csv.field_size_limit(self.old)


def _csv_dict_rows(data: bytes) -> list[dict[str, str]]:
    with _csv_limit():
        return list(csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline="")))


def _csv_column_to_lines(data: bytes, arg: str | None) -> bytes:
    """``csv_column_to_lines:COL``: CSV with a header -> the values of column COL, one per line."""
    if not arg:
        raise ValueError("csv_column_to_lines needs a column name (csv_column_to_lines:COL)")
    out = []
    for i, row in enumerate(_csv_dict_rows(data), start=2):
        if arg not in row:
            raise ValueError(f"CSV has no column {arg!r} (columns: {', '.join(row)})")
        value = row[arg]
        if "\n" in value or "\r" in value:
            raise ValueError(f"CSV row {i}: column {arg!r} holds a line break; cannot write one line per row")
        out.append(value + "\n")
    return "".join(out).encode("utf-8")


def _csv_to_jsonl(data: bytes, arg: str | None) -> bytes:
    """``csv_to_jsonl:key=COL,key2=COL2,...``: CSV with a header -> JSON Lines with those keys in that order.

    An empty COL (``id=``) writes ``null`` for that key. Output as ``json.dumps(..., ensure_ascii=False)``.
    """
    if not arg:
        raise ValueError("csv_to_jsonl needs a key mapping (csv_to_jsonl:key=COL,...)")
    mapping = [tuple(part.split("=", 1)) for part in arg.split(",")]
    out = []
    for row in _csv_dict_rows(data):
        obj = {}
        for key, col in mapping:
            if col and col not in row:
                raise ValueError(f"CSV has no column {col!r} (columns: {', '.join(row)})")
            obj[key] = row[col] if col else None
        out.append(json.dumps(obj, ensure_ascii=False) + "\n")
    return "".join(out).encode("utf-8")


_ROW_START = re.compile(rb"\n([0-9a-f]{40}),")


def _cnn_csv_chunk_to_jsonl(data: bytes, arg: str | None) -> bytes:
    """A byte-chunk of a headerless-in-the-middle CNN/DM ``id,article,highlights`` CSV -> JSON Lines.

    The chunk starts inside a row: everything before the first line that starts with a 40-hex id and a
    comma is dropped. Every following row must have 3 fields. ``arg`` is a comma-separated list of ids
    to leave out (duplicates of rows that are in another file).
    """
    m = _ROW_START.search(data)
    if m is None:
        raise ValueError("no row starting with a 40-hex id found in the CSV chunk")
    drop = {x for x in (arg or "").split(",") if x}
    out = []
    with _csv_limit():
        for i, row in enumerate(csv.reader(io.StringIO(data[m.start() + 1:].decode("utf-8"), newline=""))):
            if not row:
                continue
            if len(row) != 3 or not re.fullmatch(r"[0-9a-f]{40}", row[0]):
                raise ValueError(f"CSV chunk row {i + 1} is not (40-hex id, article, highlights)")
            if row[0] in drop:
                continue
            out.append(json.dumps({"id": row[0], "article": row[1], "highlights": row[2]},
                                  ensure_ascii=False) + "\n")
    return "".join(out).encode("utf-8")


def _latin1_to_utf8(data: bytes, arg: str | None) -> bytes:
    """Latin-1 bytes -> the same text in UTF-8 (lossless; ``.encode('latin-1')`` gives the original back)."""
    return data.decode("latin-1").encode("utf-8")


#: converter name -> function(source_bytes, argument_or_None) -> final_bytes
CONVERTERS: dict[str, Callable[[bytes, str | None], bytes]] = {
    "json_array_to_jsonl": _json_array_to_jsonl,
    "csv_column_to_lines": _csv_column_to_lines,
    "csv_to_jsonl": _csv_to_jsonl,
    "cnn_csv_chunk_to_jsonl": _cnn_csv_chunk_to_jsonl,
    "latin1_to_utf8": _latin1_to_utf8,
}


def _converter(spec: str) -> tuple[Callable[[bytes, str | None], bytes], str | None]:
    name, sep, arg = spec.partition(":")
    if name not in CONVERTERS:
        raise KeyError(f"unknown converter {name!r} (known: {', '.join(sorted(CONVERTERS))})")
    return CONVERTERS[name], (arg if sep else None)


# --------------------------------------------------------------------------------------------------
# the manifest
# --------------------------------------------------------------------------------------------------

def _gh(repo: str, commit: str, path: str) -> str:
    """Raw URL of a file of a public GitHub repository at a pinned commit.

    raw.githubusercontent.com serves the blob bytes (for a Git-LFS file it would serve the pointer;
    none of the files below is known to be in LFS: their sha256 sums were taken from the real bytes).
    """
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


# DialogSum: the official repository cylnlp/dialogsum, DialogSum_Data/, pinned to HEAD 848cc8c.
# The staged files are byte-identical to these (git blob hashes checked, see PROVENANCE.md).
_DIALOGSUM_REPO, _DIALOGSUM_COMMIT = "cylnlp/dialogsum", "848cc8c05e0a04def79326539de827f1b28786a0"


def _dialogsum(name: str, size: int, sha: str) -> FileSpec:
    return FileSpec(name, _gh(_DIALOGSUM_REPO, _DIALOGSUM_COMMIT, f"DialogSum_Data/{name}"), sha, size)


# SAMSum: the official distribution is a 7z archive (https://arxiv.org/src/1911.12237v2/anc/corpus.7z,
# also Samsung/samsum on the Hugging Face Hub), which the standard library cannot open. The staged
# files were built from samsum.zip in vishnusharma-lab/datasets, which holds the original corpus files
# (same 2019-08-26 timestamps as corpus.7z); train/val/test.json are JSON arrays -> JSON Lines, with
# the keys reordered from the original id, summary, dialogue to id, dialogue, summary as in the staged files.
_SAMSUM_ZIP = _gh("vishnusharma-lab/datasets", "6279d61d4c881efde9a1dde4cdd44f477023b818", "samsum.zip")
_SAMSUM_JSONL = "json_array_to_jsonl:id,dialogue,summary"
_SAMSUM_ZIP_SHA = "1297195828c4cb88b2fea810545459800eee82df5f8978f0c7fd1d57b540fe70"


def _samsum(name: str, member: str, size: int, sha: str, member_sha: str | None = None,
            convert: str | None = None) -> FileSpec:
    return FileSpec(name, _SAMSUM_ZIP, sha, size, member=member, member_sha256=member_sha,
                    source_sha256=_SAMSUM_ZIP_SHA, convert=convert)


# Gigaword (Rush et al. 2015, harvardnlp/sent-summary preprocessing). The original release is
# summary.tar.gz on Google Drive (linked from github.com/harvardnlp/sent-summary; ~3.8M train pairs),
# which cannot be fetched reliably with urllib (confirmation page) and is not the subset we pin.
# The staged subsets come from three GitHub repositories, pinned to the commits in PROVENANCE.md:
_GIGA_TEST = ("jzhou316/Unsupervised-Sentence-Summarization", "2f6297534fedb43dbbe50042ec5a0d4dba1ea4e7")
_GIGA_SAMPLE_ZIP = _gh("dongjun-Lee/text-summarization-tensorflow", "623787687c4ef2ad4591c7daa52b18d95b87f62a",
                       "sample_data.zip")
_GIGA_SAMPLE_ZIP_SHA = "5b1f8d94b51aa0b5e30dffa4808e469662441e6aeaec593a2d1ebf741dd7bd20"
_GIGA_R10K_CSV = _gh("HegdeChaitra/unsupervised_document_summarization", "cf02efbeb25cbea5df24abb151532d95bbe8b261",
                     "gigaword_test.csv")
_GIGA_R10K_CSV_SHA = "d077d35594d2b5bbc96f114212b45d7d295ac4ad3248152a4ca2edadf9beb234"


def _giga_sample(name: str, member: str, size: int, sha: str) -> FileSpec:
    # member paths as used by the repository's utils.py (sumdata/train/...); if the zip has another
    # top folder, the member is also found by its unique path suffix (see _read_member).
    return FileSpec(name, _GIGA_SAMPLE_ZIP, sha, size, member=member, source_sha256=_GIGA_SAMPLE_ZIP_SHA)


def _giga_r10k(name: str, column: str, size: int, sha: str) -> FileSpec:
    return FileSpec(name, _GIGA_R10K_CSV, sha, size, source_sha256=_GIGA_R10K_CSV_SHA,
                    convert=f"csv_column_to_lines:{column}",
                    note="a random 10k sample of the validation set, despite the source file name")


# CNN/DailyMail 3.0.0 small subsets (the full corpus: abisee/cnn-dailymail, or cnn_dailymail on the
# Hugging Face Hub, stored as parquet/tgz; not pinned here). Sources as in PROVENANCE.md; no sha256 is
# known for the three CSVs, so only the final files are checked for those.
_CNN_TAIL_CHUNK = _gh("Abhinaykotla/news-summarization-T5-Transformer", "b52139668af66dcd6f0b571f4daee51594c10d68",
                      "data/train.csv_part_25")

MANIFEST: dict[str, DatasetSpec] = {
    "dialogsum": DatasetSpec(
        name="dialogsum",
        description="DialogSum (Chen et al., Findings of ACL 2021): 12,460 / 500 / 500 dialogues (+100 hidden test)",
        license="CC BY-NC-SA 4.0",
        homepage="https://github.com/cylnlp/dialogsum",
        files=(
            _dialogsum("dialogsum.train.jsonl", 12_068_822,
                       "660238631152c062e67186da6622c1e8925579e82563d66d611abb9dcc19bb72"),
            _dialogsum("dialogsum.dev.jsonl", 471_830,
                       "436721e0a3571eef7072964f80e042fb151d8c6178db1a688ce8f803bbf0a13f"),
            _dialogsum("dialogsum.test.jsonl", 639_707,
                       "6de36eca7e7b9b10975fd5ea3f47391df172d8b3c15d03d84d763cbaab015fda"),
            _dialogsum("dialogsum.hiddentest.dialogue.jsonl", 88_568,
                       "c174f0701e4e6d6eea5d1cca0b580e1faf8766ad2f4400ac9c8fab39b6ffa872"),
            _dialogsum("dialogsum.hiddentest.topic.jsonl", 5_338,
                       "1d836acfbe412bf3d5abd150823476ef114a2ea437459ba42b6a7e8ae7f5cef8"),
        ),
    ),
    "samsum": DatasetSpec(
        name="samsum",
        description="SAMSum (Gliwa et al., 2019): 14,732 / 818 / 819 messenger dialogues",
        license="CC BY-NC-ND 4.0",
        homepage="https://arxiv.org/abs/1911.12237",
        files=(
            _samsum("samsum.train.jsonl", "samsum/train.json", 10_204_305,
                    "86941cc00f67f59ea6f68290df34152f51fdcf545056ab7e6dfc4ea9e9c407bc",
                    "c0df0898ad4322462cb73959f0ca820b31c4dc27e44b1ef64fbc34f7e12f1cb5", _SAMSUM_JSONL),
            _samsum("samsum.val.jsonl", "samsum/val.json", 556_172,
                    "0c72c0a12da3f4e7544abe3caf4f206555713160d94d25802e7ca0eb43de3e0b",
                    "f291b34ea2a851c4fd67bc9e1c05003f0dde2c2ae1a501ba733b9d97b6166349", _SAMSUM_JSONL),
            _samsum("samsum.test.jsonl", "samsum/test.json", 575_046,
                    "bac9728a3f358493da3b2ca075f381e638702e278cf6ad057685aadaffaf78b5",
                    "eb5ac232d04982fdf70766b10bd07223732d8de0b817a0ab2a30a79ea99a693a", _SAMSUM_JSONL),
            _samsum("LICENCE.txt", "samsum/licence.txt", 19_127,
                    "38762e3777f4ec00a6f769062a7c3f704fb78ce08303ecff88558da4c49cf9ea"),
            _samsum("README.orig.txt", "samsum/README.txt", 1_593,
                    "9198db41144ec43302d8c3356b2c3f0583ba726985ee36a07d4e046aaabaefdf"),
        ),
    ),
    "gigaword": DatasetSpec(
        name="gigaword",
        description="Gigaword headlines (Rush et al., 2015): train 10k / valid 1k / valid_random10k / test 1,951",
        license="LDC (English Gigaword); research use only",
        homepage="https://github.com/harvardnlp/sent-summary",
        files=(
            # the standard 1,951-pair test set (sumdata/Giga/input.txt + task1_ref0.txt), verbatim
            FileSpec("test.article.txt", _gh(*_GIGA_TEST, "data/gigaword/input.txt"),
                     "578b33eaffe7bf9cab2d84d6f1399fd6f38c1778d194a9877ba66c15232b183c", 335_302),
            FileSpec("test.title.txt", _gh(*_GIGA_TEST, "data/gigaword/task1_ref0.txt"),
                     "15561a71977ee7bd5de4f8f405ea4adcc2f41220b2d9f9db7f71c23c27f8b9d7", 103_766),
            _giga_sample("train.article.txt", "sumdata/train/train.article.txt", 1_818_165,
                         "c91ae3c476c9811d4b200ef55bcf3786164c0cc81add0a603c2e6c86e51d6f3f"),
            _giga_sample("train.title.txt", "sumdata/train/train.title.txt", 484_493,
                         "e1de76e4b8533caa5480da41d773b794c3bbe320ef2b21b138820de30bf70390"),
            _giga_sample("valid.article.txt", "sumdata/train/valid.article.filter.txt", 181_631,
                         "cde290c08e23c65a19b21495e7aa1b07fdd92c17871ad07487fba154973ac86b"),
            _giga_sample("valid.title.txt", "sumdata/train/valid.title.filter.txt", 49_151,
                         "4a6e745976132f4f1a6d882ccffc0a74287f9868f38c20c6381aa01ece5d6bc4"),
            _giga_r10k("valid_random10k.article.txt", "article", 1_825_918,
                       "74846ea98357c3121db1a8413f2fd92d8a334a9adb546444a31473744192faad"),
            _giga_r10k("valid_random10k.title.txt", "summary", 530_383,
                       "c187532cbfa35c2533fc6b86e097fea96ade0aaae5c3709f516302486bd49949"),
        ),
    ),
    "cnn_dailymail": DatasetSpec(
        name="cnn_dailymail",
        description="CNN/DailyMail 3.0.0 (non-anonymized), small subsets: train 500 + 822 / validation 1,000 / "
                    "test 500",
        license="Apache-2.0 (HF dataset card); articles (c) CNN / Daily Mail, research use",
        homepage="https://github.com/abisee/cnn-dailymail",
        files=(
            FileSpec("cnn_dailymail.train.first500.jsonl",
                     _gh("rravneetkaurr/SuvidhaFoundation-Summarization_Benchmark",
                         "9d13a847047a5394008fd09ec1902222eca77b78", "data/cnn_dm/cnn_dm_subset.csv"),
                     "d23607e08729c4403963b477de804d0108dca5eba668035835b0a11241a68d7e", 1_942_085,
                     convert="csv_to_jsonl:id=,article=article,highlights=reference_summary",
                     note="this CSV has no ids: id is null"),
            FileSpec("cnn_dailymail.train.idtail822.jsonl", _CNN_TAIL_CHUNK,
                     "7ea7144510f0802162ebd9f886ec0fa5620eb1bd2bfa09c59c4a5e2a45c56cb0", 3_750_864,
                     source_sha256="b08dc119a3304e4824f3362035e7453e9b57104960660ef033d13a2136ede865",
                     # ff9cc765... duplicates train.first500 row 230 and is left out (PROVENANCE.md)
                     convert="cnn_csv_chunk_to_jsonl:ff9cc7656670d601db14b4a757ab74961698caab"),
            FileSpec("cnn_dailymail.validation.first1000.jsonl",
                     _gh("hillaryke/rag-optimization-cnn-dailymail", "03d05440507618d6bec073b46543696e5a47df20",
                         "data/collection/cnn_dailymail_validation_subset.csv"),
                     "7d6a8f44439384068dd192a4b1daaac85036821c9f60439baed19bfbb4a51e94", 4_128_589,
                     convert="csv_to_jsonl:id=id,article=article,highlights=highlights"),
            FileSpec("cnn_dailymail.test.first500.jsonl",
                     _gh("MANUJMEHROTRA/model_hosting_e2e_decoder", "7c9b1c24e32ed0c883c0da6e977f9dcdb709b7bf",
                         "data/cnn_dailymail_test.csv"),
                     "582ab0e23271fef4cb7d59e2cb66edfa08e721ca91c7049a962191946f4d9598", 1_890_094,
                     convert="csv_to_jsonl:id=id,article=article,highlights=highlights"),
        ),
    ),
    "inshorts": DatasetSpec(
        name="inshorts",
        description="Inshorts news summary (Kaggle sunnysai12345/news-summary): 4,514 rows, re-encoded to UTF-8",
        license="not stated; Kaggle dataset, research/education use",
        homepage="https://www.kaggle.com/datasets/sunnysai12345/news-summary",
        files=(
            # Kaggle needs a login, so the copy in Hitesh-Nimbalkar/Text_summarise_data is used.
            FileSpec("news_summary.utf8.csv",
                     _gh("Hitesh-Nimbalkar/Text_summarise_data", "856b83b89b5b6f4e22bd44af8d64bd742116c249",
                         "news_summary.zip"),
                     "f3fcf3f3e19268087dee4bca1ff10bb6a3b9335ab0e3de4770963eac9311148c", 11_893_723,
                     member="news_summary.csv",
                     member_sha256="732f5165d80ae29b80c0ad7bc50fd836ab99676c819325ee92bf0bc938acca5f",
                     source_sha256="b19a8c7cb974be6e94ecf912ba315da4d8cb099f3a0664fa958d4516c1a7824a",
                     convert="latin1_to_utf8"),
        ),
    ),
}


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------

def available() -> list[str]:
    """Names of the datasets that can be downloaded, sorted."""
    return sorted(MANIFEST)


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _one_line(x: object) -> str:
    return " ".join(str(x).split())


def _resolve_mirror(mirror: str | None) -> str | None:
    if mirror is None:
        mirror = os.environ.get(MIRROR_ENV) or None
    if not mirror or not mirror.strip():
        return None
    mirror = mirror.strip()
    if "://" not in mirror:  # a local folder laid out as <folder>/<dataset>/<file>
        mirror = Path(mirror).expanduser().resolve().as_uri()
    return mirror.rstrip("/")


def source_url(dataset: str, file: FileSpec, mirror: str | None = None) -> str:
    """The URL a file's source is fetched from: its own URL, or ``{mirror}/{dataset}/{basename}``.

    ``mirror=None`` falls back to the ``ZOO_DATA_MIRROR`` environment variable.
    """
    base = _resolve_mirror(mirror)
    if base is None:
        return file.url
    return f"{base}/{dataset}/{posixpath.basename(urllib.parse.urlsplit(file.url).path)}"


def _lookup(name: str) -> DatasetSpec:
    key = name.strip().lower().replace("-", "_")
    if key in MANIFEST:
        return MANIFEST[key]
    known = available()
    near = ([k for k in known if key and (k.startswith(key) or key.startswith(k))]
            or difflib.get_close_matches(key, known, n=1, cutoff=0.5))
    hint = f"; did you mean {near[0]!r}?" if near else ";"
    raise DownloadError(f"unknown dataset {name!r}{hint} known datasets: {', '.join(known) or '(none)'}")


def _say(msg: str, progress: bool) -> None:
    if progress:
        tqdm.write(msg, file=sys.stderr)
    else:
        log.info(msg)


def _tmp_path(folder: Path, name: str) -> tuple[int, Path]:
    """A new hidden temporary file in ``folder`` (mode 0666 minus umask, unlike mkstemp's 0600)."""
    while True:
        p = folder / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.part"
        try:
            return os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), p
        except FileExistsError:  # pragma: no cover - 32 random bits
            continue


def _unlink(p: Path | None) -> None:
    if p is not None:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


class _Job:
    """What an error message needs: the dataset, its folder and the hint for doing it by hand."""

    def __init__(self, spec: DatasetSpec, folder: Path, mirror: str | None):
        self.spec, self.folder, self.mirror = spec, folder, mirror

    def hint(self, names: list[str]) -> str:
        by_hand = f"copy the files by hand into {self.folder}{os.sep} ({', '.join(names)})"
        if self.mirror:
            return (f"check that the mirror {self.mirror} serves the file at that URL "
                    f"(layout: {{mirror}}/{self.spec.name}/<basename of the source URL>), or {by_hand}")
        return (f"check your internet connection, or use --mirror URL / {MIRROR_ENV}=URL "
                f"(fetches {{URL}}/{self.spec.name}/<file>), or {by_hand}")


def _fetch(url: str, folder: Path, tmp_name: str, *, size: int | None, progress: bool, timeout: float,
           ctx: _Job, names: list[str]) -> tuple[Path, str]:
    """Stream ``url`` into a new temporary file in ``folder``; return (temp path, sha256 hex).

    Any failure removes the temporary file and raises DownloadError.
    """
    what = f"{ctx.spec.name}: download of {names[0] if len(names) == 1 else posixpath.basename(url)}"
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    tmp: Path | None = None
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            length = resp.headers.get("Content-Length") if hasattr(resp, "headers") else None
            total = int(length) if length and length.isdigit() else size
            fd, tmp = _tmp_path(folder, tmp_name)
            h, got = hashlib.sha256(), 0
            with os.fdopen(fd, "wb") as out, tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                                                  desc=f"{ctx.spec.name}/{tmp_name}", disable=not progress,
                                                  file=sys.stderr, leave=False) as bar:
                while True:
                    block = resp.read(CHUNK)
                    if not block:
                        break
                    out.write(block)
                    h.update(block)
                    got += len(block)
                    bar.update(len(block))
                out.flush()
                os.fsync(out.fileno())
            if length and length.isdigit() and got != int(length):
                raise DownloadError(f"{what} from {url} was cut short ({got} of {length} bytes); "
                                    f"try again, or {ctx.hint(names)}")
        return tmp, h.hexdigest()
    except DownloadError:
        _unlink(tmp)
        raise
    except urllib.error.HTTPError as e:
        _unlink(tmp)
        raise DownloadError(f"{what} failed: HTTP {e.code} {_one_line(e.reason)} for {url}; "
                            f"{ctx.hint(names)}") from None
    except urllib.error.URLError as e:
        _unlink(tmp)
        reason = e.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise DownloadError(f"{what} timed out after {timeout:g}s at {url}; {ctx.hint(names)}") from None
        raise DownloadError(f"{what} failed: cannot reach {url} ({_one_line(reason)}); "
                            f"{ctx.hint(names)}") from None
    except (TimeoutError, socket.timeout):
        _unlink(tmp)
        raise DownloadError(f"{what} timed out after {timeout:g}s at {url}; {ctx.hint(names)}") from None
    except (OSError, http.client.HTTPException, ValueError) as e:
        _unlink(tmp)
        raise DownloadError(f"{what} failed at {url} ({type(e).__name__}: {_one_line(e)}); "
                            f"{ctx.hint(names)}") from None
    except BaseException:
        _unlink(tmp)
        raise


def _read_member(archive: Path, member: str, url: str, ctx: _Job, names: list[str]) -> bytes:
    try:
        with zipfile.ZipFile(archive) as zf:
            members = [i.filename for i in zf.infolist() if not i.is_dir()]
            if member not in members:  # tolerate a different top folder: unique match on the path suffix
                cands = [m for m in members if m.endswith("/" + member) or member.endswith("/" + m)
                         or posixpath.basename(m) == posixpath.basename(member)]
                if len(cands) != 1:
                    shown = ", ".join(members[:10]) + (", ..." if len(members) > 10 else "")
                    raise DownloadError(f"{ctx.spec.name}: the archive from {url} has no member {member!r} "
                                        f"(it holds: {shown}); {ctx.hint(names)}")
                member = cands[0]
            return zf.read(member)
    except DownloadError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, RuntimeError, EOFError) as e:
        raise DownloadError(f"{ctx.spec.name}: the file from {url} is not a readable zip archive "
                            f"({_one_line(e)}); {ctx.hint(names)}") from None


def _group_by_source(files: list[FileSpec]) -> list[tuple[str, list[FileSpec]]]:
    groups: dict[str, list[FileSpec]] = {}
    for f in files:
        groups.setdefault(f.url, []).append(f)
    return list(groups.items())


# --------------------------------------------------------------------------------------------------
# the entry point
# --------------------------------------------------------------------------------------------------

def download(name: str, data_dir: str | Path, *, mirror: str | None = None, force: bool = False,
             progress: bool = True, timeout: float = 60.0) -> list[Path]:
    """Fetch every file of dataset ``name`` into ``data_dir/name/``, verify sha256, return the final paths.

    mirror    base URL replacing the source host: sources come from ``{mirror}/{name}/{basename}``;
              None -> the ``ZOO_DATA_MIRROR`` environment variable, if set. A local folder also works.
    force     replace present files whose checksum is wrong (without it that is an error). Files with
              the right checksum are never fetched again: they are the bytes a download would give.
    progress  tqdm bars and status lines on stderr; False -> quiet (status lines go to logging).
    timeout   seconds for connecting and for each read.

    Returns the final paths in manifest order (present and downloaded alike). Raises DownloadError.
    """
    spec = _lookup(name)
    mirror_base = _resolve_mirror(mirror)
    folder = Path(data_dir).expanduser().resolve() / spec.name
    ctx = _Job(spec, folder, mirror_base)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DownloadError(f"{spec.name}: cannot create the folder {folder} ({_one_line(e)}); "
                            f"choose another --data-dir") from None

    # 1. what is already there
    todo: list[FileSpec] = []
    bad: list[str] = []
    for f in spec.files:
        final = folder / f.name
        if not final.exists():
            todo.append(f)
            continue
        try:
            actual = sha256_file(final)
        except OSError as e:
            raise DownloadError(f"{spec.name}: cannot read the existing file {final} ({_one_line(e)}); "
                                f"fix or remove it and run again") from None
        if actual == f.sha256:
            _say(f"{spec.name}: {f.name} already present, checksum ok", progress)
        elif force:
            _say(f"{spec.name}: {f.name} has a wrong checksum, fetching it again (--force)", progress)
            todo.append(f)
        else:
            bad.append(f"{final} (sha256 {actual}, expected {f.sha256})")
    if bad:
        raise DownloadError(f"{spec.name}: existing file(s) with a wrong checksum: {'; '.join(bad)}; "
                            f"pass --force to download them again (or delete them)")

    # 2. fetch each needed source once, build and verify its final files
    for url0, group in _group_by_source(todo):
        url = source_url(spec.name, group[0], mirror_base)
        names = [f.name for f in group]
        src_name = posixpath.basename(urllib.parse.urlsplit(url0).path) or group[0].name
        head = group[0]
        if len(group) == 1 and head.direct:  # stream straight into the final file's temporary
            _say(f"{spec.name}: downloading {head.name} from {url}", progress)
            tmp, actual = _fetch(url, folder, head.name, size=head.size, progress=progress, timeout=timeout,
                                 ctx=ctx, names=names)
            try:
                if actual != head.sha256:
                    raise DownloadError(
                        f"{spec.name}: checksum mismatch for {head.name} downloaded from {url}: expected sha256 "
                        f"{head.sha256}, got {actual}; the download was discarded. Try again; if it persists, "
                        f"the source changed: {ctx.hint(names)}")
                os.replace(tmp, folder / head.name)
                tmp = None
            finally:
                _unlink(tmp)
            _say(f"{spec.name}: {head.name} ok (sha256 verified)", progress)
            continue

        _say(f"{spec.name}: downloading {src_name} from {url} (for {', '.join(names)})", progress)
        tmp, actual = _fetch(url, folder, src_name, size=head.source_size, progress=progress, timeout=timeout,
                             ctx=ctx, names=names)
        try:
            if head.source_sha256 and actual != head.source_sha256:
                raise DownloadError(
                    f"{spec.name}: checksum mismatch for {src_name} downloaded from {url}: expected sha256 "
                    f"{head.source_sha256}, got {actual}; the download was discarded. Try again; if it "
                    f"persists, the source changed: {ctx.hint(names)}")
            whole: bytes | None = None
            for f in group:
                if f.member is not None:
                    data = _read_member(tmp, f.member, url, ctx, names)
                    if f.member_sha256 and hashlib.sha256(data).hexdigest() != f.member_sha256:
                        raise DownloadError(
                            f"{spec.name}: member {f.member} of {src_name} from {url} has sha256 "
                            f"{hashlib.sha256(data).hexdigest()}, expected {f.member_sha256}; the source "
                            f"changed: {ctx.hint(names)}")
                else:
                    if whole is None:
                        whole = tmp.read_bytes()
                    data = whole
                _build_and_place(f, data, url, folder, ctx, progress, names)
        finally:
            _unlink(tmp)

    paths = [folder / f.name for f in spec.files]
    _say(f"{spec.name}: {len(paths)} file(s) ready in {folder}", progress)
    return paths


def _build_and_place(f: FileSpec, data: bytes, url: str, folder: Path, ctx: _Job, progress: bool,
                     names: list[str]) -> None:
    """Convert ``data`` (if the spec says so), check the final sha256, write atomically into place."""
    if f.convert:
        try:
            fn, arg = _converter(f.convert)
            data = fn(data, arg)
        except (ValueError, KeyError, UnicodeError, csv.Error) as e:
            raise DownloadError(
                f"{ctx.spec.name}: could not build {f.name} from {f.member or posixpath.basename(url)} at {url} "
                f"with {f.convert} ({type(e).__name__}: {_one_line(e)}); {ctx.hint(names)}") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != f.sha256:
        raise DownloadError(
            f"{ctx.spec.name}: checksum mismatch for {f.name} built from {url}: expected sha256 {f.sha256}, "
            f"got {actual}; nothing was written. If it persists, the source changed: {ctx.hint(names)}")
    atomic_write_bytes(folder / f.name, data)
    _say(f"{ctx.spec.name}: {f.name} ok (sha256 verified)", progress)
