"""One ``zoo run`` per run folder at a time: lock files holding the pid, stale ones taken over."""
from __future__ import annotations

import os
from pathlib import Path

from seq2seq_zoo.errors import UserError


def acquire_locks(run_dirs: list[Path]) -> list[Path]:
    """One `zoo run` per run folder at a time: the same experiment started twice is refused, while
    `--only A` and `--only B` of one experiment may run side by side (e.g. one cluster task each).
    A lock left by a dead process (its pid no longer runs) is taken over."""
    taken: list[Path] = []
    try:
        for d in run_dirs:
            taken.append(_acquire_lock(d))
    except BaseException:
        for lock in taken:
            lock.unlink(missing_ok=True)
        raise
    return taken


def _acquire_lock(run_dir: Path) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = run_dir / ".lock"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(str(os.getpid()))
            except OSError as e:  # disk full: no half lock left behind
                lock.unlink(missing_ok=True)
                from seq2seq_zoo.errors import WriteFailed
                raise WriteFailed(lock, e) from e
            return lock
        except FileExistsError:
            pid = lock_holder(lock)
            if pid:
                raise UserError(f"run folder {run_dir} is in use by another `zoo run` (pid {pid}); wait for it "
                                "to finish or stop it first") from None
            lock.unlink(missing_ok=True)  # stale: its process is gone
        except OSError as e:  # e.g. no space left for the lock file itself
            from seq2seq_zoo.errors import WriteFailed
            if isinstance(e, WriteFailed):
                raise
            raise WriteFailed(lock, e) from e
    raise UserError(f"could not lock {lock}")


def lock_holder(lock: Path) -> int:
    """The pid written in a run folder's lock file when that process still runs and is not this one
    (another `zoo run` holds the folder); else 0 (no lock, an unreadable one, or a stale one)."""
    try:
        pid = int(lock.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0
    return pid if pid and pid != os.getpid() and _alive(pid) else 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
