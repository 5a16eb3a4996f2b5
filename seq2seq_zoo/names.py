"""Names and the paths made of them.

Experiment, run, decoding-variant and archive member names become folder names under a results folder, so
every one of them obeys one rule (:func:`name_problem`): letters, digits, ``_``, ``.`` and ``-`` only (so no
path separator), not starting with a dot (so never ``.`` or ``..`` and never a hidden file), at most
``NAME_MAX`` bytes in UTF-8 (filesystems limit a name to 255 bytes, not characters: a name of 100
four-byte letters would not fit once a seed suffix or a temporary-file prefix is added). Every writer then builds its paths with :func:`inside`, which checks that the path
resolves (symbolic links followed) inside the folder it belongs to before anything is written.
"""
from __future__ import annotations

import re
from pathlib import Path

from seq2seq_zoo.errors import ConfigError, UnsafePath

NAME_MAX = 100
NAME_RULE = f"a plain name (letters, digits, _ . -; not starting with a dot; at most {NAME_MAX} bytes in UTF-8)"
_NAME = re.compile(r"[\w-][\w.-]*")


def name_problem(name) -> str | None:
    """What is wrong with ``name`` as a folder name of the suite, or None when it is a plain name."""
    if not isinstance(name, str):
        return f"{name!r} is a {type(name).__name__}, not a name (a string)"
    if not name:
        return "the name is empty"
    if name in (".", ".."):
        return f"{name!r} is a path, not a name"
    if name.startswith("."):
        return f"{name!r} starts with a dot"
    if len(name.encode("utf-8", errors="surrogatepass")) > NAME_MAX:
        size = len(name.encode("utf-8", errors="surrogatepass"))
        return f"{name[:20]!r}... is {size} bytes long in UTF-8 ({len(name)} characters)"
    if not _NAME.fullmatch(name):
        bad = next(c for c in name if not re.fullmatch(r"[\w.-]", c))
        return f"{name!r} holds {bad!r}"
    return None


def run_group(run: str, seed) -> str:
    """A run's name without the ``-seedN`` suffix its seed gives it (``pg-seed2`` -> ``pg``): the name the
    seeds of one run share in tables, plots and ``[[findings]]`` claims. A name without the suffix of its
    own seed is returned as it is."""
    return re.sub(rf"-seed{seed}$", "", run)


def check_name(name, where: str) -> str:
    """``name`` itself when it obeys the rule, else ``ConfigError`` naming ``where`` (a key, an option)."""
    problem = name_problem(name)
    if problem:
        raise ConfigError(f"{where}: {problem}; it must be {NAME_RULE}")
    return name


def inside(root: str | Path, *parts: str) -> Path:
    """``root / parts``, after checking that it resolves (symbolic links followed, ``..`` applied) to
    ``root`` itself or a path under it; else ``UnsafePath`` and nothing is written. Call it before
    creating or writing the path."""
    root = Path(root)
    path = root.joinpath(*parts)
    real_root, real = root.resolve(), path.resolve()
    if real != real_root and not real.is_relative_to(real_root):
        raise UnsafePath(f"{path}: resolves to {real}, outside {root}; nothing was written (a name must be "
                         f"{NAME_RULE})")
    return path


def inside_run(run_dir: str | Path, *parts: str) -> Path:
    """``run_dir / parts``, a file or folder of a run (``<results>/<experiment>/<run>/...``), checked with
    :func:`inside` twice: against the run folder, so that a link inside the run (a ``decodes`` folder linked
    elsewhere) cannot lead out of it, and against the results folder two levels up, so that the links are
    resolved against the results root and not only the immediate folder (a run folder that is itself a
    link to a place outside the results). ``UnsafePath`` and nothing is written when either fails."""
    run_dir = Path(run_dir).absolute()
    path = inside(run_dir, *parts)
    root = run_dir.parent.parent
    inside(root, *run_dir.relative_to(root).parts, *parts)
    return path
