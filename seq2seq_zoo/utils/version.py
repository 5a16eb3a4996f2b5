"""Which code produced a result: the git commit of the checkout and whether it was modified."""
from __future__ import annotations

import functools
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any


def code_version(package_dir: str | Path | None = None) -> dict[str, Any]:
    """Which code produced a result: the git commit of the checkout the package runs from and whether
    its tracked files differ from that commit (``dirty``); ``commit`` None outside a git checkout (an
    installed wheel) or without git. Runs differ by float rounding when a kernel changes between
    commits (README: Recurrent models: ``impl``), so records keep it."""
    root = Path(package_dir) if package_dir else Path(__file__).resolve().parent.parent   # seq2seq_zoo/
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=20)
        if sha.returncode != 0:
            return {"commit": None, "dirty": None}
        st = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "."],
                            capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": sha.stdout.strip(), "dirty": bool(st.stdout.strip()) if st.returncode == 0 else None}


@functools.cache
def process_code_version() -> dict[str, Any]:
    """``code_version()`` of the code this process imported, taken once, at the first call (``zoo run``
    makes it at its start): a `zoo run` that trains several runs keeps the code it imported while the
    checkout moves on (a commit, a `git pull`), so taking the commit again at each run's start named code
    the run did not use (a run started after two commits would record the newer one)."""
    return code_version()


def invocation(argv: list[str] | None = None) -> str:
    """The command that produced a result, as a user types it: ``zoo ARGS`` when the process runs the
    zoo CLI (the ``zoo`` script, ``python -m seq2seq_zoo`` or ``python -m seq2seq_zoo.cli``: the
    checkout's path stays out of the record), else the plain command line."""
    argv = list(sys.argv if argv is None else argv) or [""]
    entry = Path(argv[0])
    package = Path(__file__).resolve().parent.parent   # seq2seq_zoo/
    ours = entry.name == "__main__.py" and entry.resolve().parent in (package, package / "cli")
    return shlex.join(["zoo", *argv[1:]] if entry.name == "zoo" or ours else argv)
