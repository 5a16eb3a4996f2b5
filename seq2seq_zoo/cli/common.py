"""Helpers every command uses: exit status, path kind checks, the experiment profile."""
from __future__ import annotations

from pathlib import Path

from seq2seq_zoo.errors import UserError


EXIT_USAGE = 2


def checked_path(path, want: str, what: str) -> Path:
    """``path`` must be a file (want="file") or a folder (want="dir") if it exists: a folder given where a
    file is expected (or the reverse) is named as such, not reported as "not found"."""
    p = Path(path)
    if want == "file" and p.is_dir():
        raise UserError(f"{p}: is a folder, but {what} must be a file")
    if want == "dir" and p.exists() and not p.is_dir():
        raise UserError(f"{p}: is a file, but {what} must be a folder")
    return p


def experiment_profile(args) -> str | None:
    """--profile NAME | none | auto (the file's 'cpu' profile when no GPU is present)."""
    if args.profile == "none":
        return None
    if args.profile != "auto":
        return args.profile
    import tomllib

    import torch

    from seq2seq_zoo.config import parse_toml
    try:
        raw = parse_toml(Path(args.experiment).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        raw = {}  # load_experiment reports it properly
    profile = "cpu" if not torch.cuda.is_available() and "cpu" in raw.get("profiles", {}) else None
    if profile:
        print("no GPU found: using the file's 'cpu' profile (pass --profile none for full size)")
    return profile
