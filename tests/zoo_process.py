"""``zoo ARGS`` as a process of its own, forked from a server process that has already imported what every
``zoo run`` imports: torch, ``torch._dynamo`` (which torch.optim imports on a process's first optimizer),
rouge-score with nltk, matplotlib and the package. A start then costs a fork instead of 3-5 s of imports.

Each process is still a separate one: its own pid, signals, exit status, working folder, environment and
standard streams (files), as the crash-safety and pre-emption tests need. What a fresh interpreter does
at start-up is not repeated here; tests/test_layering.py checks that in fresh interpreters, and the
launcher tests' jobs (submitit, torchrun) start fresh ones.

The server is multiprocessing's forkserver (one per pytest worker, started on first use); a process's
exit status is what ``python -m seq2seq_zoo ARGS`` would return: zoo's exit code, or minus the signal that
killed it."""
from __future__ import annotations

import io
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# what the server imports once: each is what a zoo process would import anyway
PRELOAD = ["torch", "torch._dynamo", "numpy", "rouge_score.rouge_scorer", "matplotlib", "matplotlib.pyplot",
           "seq2seq_zoo.cli", "seq2seq_zoo.runner", "seq2seq_zoo.evaluation", "seq2seq_zoo.report.build"]
MAIN = str(Path(__file__).resolve().parents[1] / "seq2seq_zoo" / "__main__.py")   # sys.argv[0] of `python -m`

_context = None


def context():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _redirect(fd: int, path: str, flags: int) -> None:
    f = os.open(path, flags, 0o644)
    os.dup2(f, fd)
    os.close(f)


def _child(args: list[str], cwd: str, env: dict, stdin: str, out: str, err: str) -> None:
    """The forked process: this folder, this environment, these files as fd 0, 1 and 2 (unbuffered, as
    PYTHONUNBUFFERED makes them: a killed process leaves what it printed), then zoo's main."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    _redirect(0, stdin, os.O_RDONLY)
    _redirect(1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    _redirect(2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", write_through=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import torch
    if env.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    from seq2seq_zoo.cli import main
    sys.argv = [MAIN, *args]
    code = main(args)
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)


class ZooProcess:
    """A started ``zoo ARGS``, with the part of subprocess.Popen's interface the tests use."""

    def __init__(self, args, cwd: Path, env: dict, out: Path, err: Path, stdin: bytes = b""):
        cwd = Path(cwd)
        self.out, self.err = Path(out), Path(err)
        stdin_file = self.out.with_name(self.out.name + ".stdin")
        stdin_file.write_bytes(stdin)
        self._p = context().Process(target=_child, args=([str(a) for a in args], str(cwd), dict(env),
                                                         str(stdin_file), str(self.out), str(self.err)))
        self._p.start()
        self.pid = self._p.pid
        self.args = args

    @property
    def returncode(self) -> int | None:
        return self._p.exitcode

    def poll(self) -> int | None:
        return self._p.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._p.join(timeout)
        if self._p.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._p.exitcode

    def send_signal(self, sig: int) -> None:
        if self._p.exitcode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def texts(self) -> tuple[str, str]:
        return self.out.read_text(errors="replace"), self.err.read_text(errors="replace")

    def result(self, timeout: float | None = None) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) once it has ended; killed when still running after ``timeout``."""
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
        return (self.returncode, *self.texts())


def run(args, cwd: Path, env: dict, stdin: bytes = b"", timeout: float = 300) -> tuple[int, str, str]:
    """``zoo ARGS`` to its end: (exit status, stdout, stderr), its streams kept in a temporary folder."""
    with tempfile.TemporaryDirectory() as d:
        return ZooProcess(args, cwd, env, Path(d) / "out", Path(d) / "err", stdin).result(timeout)
