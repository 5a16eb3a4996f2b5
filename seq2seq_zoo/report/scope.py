"""Which run records the committed, suite-wide reports (``results/LEADERBOARD.md``, the README's headline,
``results/leaderboard.json``, ``results/seed_plan.json``) are built from: the records git tracks.

A user's own runs (the README's smoke run in ``results/smoke/``, an experiment file of their own, extra
seeds not yet committed) get their folder's own report from ``zoo report``, but never change those
committed files, so that every command README shows leaves ``git status`` clean. Outside a git work tree
(an unpacked release, a test's temporary folder) every record counts.
"""
from __future__ import annotations

import subprocess
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=8)
def _tracked(root: str) -> frozenset[str] | None:
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=30)
        if top.returncode != 0:
            return None
        got = subprocess.run(["git", "-C", root, "-c", "core.quotepath=off", "ls-files", "-z", "--", "."],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):   # no git on this machine: every record counts
        return None
    if got.returncode != 0:
        return None
    base = Path(root).resolve()
    return frozenset(str((base / p).resolve()) for p in got.stdout.split("\0") if p)


def tracked_filter(root: str | Path):
    """A predicate ``path -> bool``: True for a file git tracks under ``root`` (or for every file when
    ``root`` is not in a git work tree)."""
    tracked = _tracked(str(Path(root).resolve()))
    if tracked is None:
        return lambda path: True
    return lambda path: str(Path(path).resolve()) in tracked


def forget() -> None:
    """Drop the cached listing (after a commit in the same process, e.g. in tests)."""
    _tracked.cache_clear()
