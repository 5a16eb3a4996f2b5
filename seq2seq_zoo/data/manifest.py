"""The datasets ``zoo data download`` can fetch, read from ``manifest.toml`` beside this module: each
dataset's final files and where their bytes come from (the file's comments give the provenance)."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from importlib import resources

MANIFEST_FILE = "manifest.toml"


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


def load_manifest(text: str | None = None) -> dict[str, DatasetSpec]:
    """Dataset name -> DatasetSpec from the TOML ``text`` (default: the packaged ``manifest.toml``), in the
    file's order. A key that FileSpec or DatasetSpec does not have is an error naming the entry."""
    if text is None:
        text = resources.files(__package__).joinpath(MANIFEST_FILE).read_text(encoding="utf-8")
    file_keys = {f.name for f in fields(FileSpec)}
    out: dict[str, DatasetSpec] = {}
    for name, entry in tomllib.loads(text).items():
        entry = dict(entry)
        files = []
        for i, f in enumerate(entry.pop("files", [])):
            unknown = sorted(set(f) - file_keys)
            if unknown:
                raise ValueError(f"{MANIFEST_FILE}: [[{name}.files]] #{i + 1} ({f.get('name')}): unknown key "
                                 f"{unknown[0]!r} (known: {', '.join(sorted(file_keys))})")
            files.append(FileSpec(**f))
        unknown = sorted(set(entry) - {"description", "license", "homepage"})
        if unknown:
            raise ValueError(f"{MANIFEST_FILE}: [{name}]: unknown key {unknown[0]!r}")
        out[name] = DatasetSpec(name=name, files=tuple(files), **entry)
    return out


MANIFEST: dict[str, DatasetSpec] = load_manifest()


def available() -> list[str]:
    """Names of the datasets that can be downloaded, sorted."""
    return sorted(MANIFEST)
