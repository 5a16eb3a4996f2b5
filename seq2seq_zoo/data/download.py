"""Backend of ``zoo data download NAME``: fetch a corpus's files, check sha256 sums, put them in place.

Each dataset in :data:`MANIFEST` (``manifest.toml``, read by ``seq2seq_zoo.data.manifest``) lists its
final files (the exact names and bytes our readers expect in ``<data_dir>/<dataset>/``). Every file
records where it comes from: a plain file, a file inside a zip archive (``member``), or a file rebuilt by
a named converter (``convert``, e.g. JSON array -> JSON Lines; ``seq2seq_zoo.data.convert``). Several
final files can come from one source; that source is downloaded once per call.

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

The sha256 sums and sources come from the PROVENANCE.md files of the project's staged data; the
comments of ``manifest.toml`` say where each copy comes from and why.
"""
from __future__ import annotations

import csv
import difflib
import hashlib
import http.client
import logging
import os
import posixpath
import secrets
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from tqdm import tqdm

from seq2seq_zoo.data.convert import CONVERTERS, converter
from seq2seq_zoo.data.manifest import MANIFEST, DatasetSpec, FileSpec, available
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


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------

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
            fn, arg = converter(f.convert)
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
