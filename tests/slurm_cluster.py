"""A real one-node Slurm for the launcher tests: Debian's slurm-wlm and munge, installed when absent,
configured in a temporary folder and started there; stopped afterwards (exactly the processes started).

    cluster = SlurmCluster(tmp_dir); cluster.start()   # munged, slurmctld, slurmd, each with its PID file
    env = cluster.env                                  # SLURM_CONF for sbatch, squeue, scancel, scontrol
    cluster.stop()

The node has 2 CPUs, ``proctrack/linuxproc`` and ``task/none`` (no cgroups needed), ``select/cons_tres``,
no accounting database (so no ``sacct``; job completions go to a text log), and listens on free ports of
127.0.0.1, so it does not meet a Slurm the machine may already run.

As a script: ``python tests/slurm_cluster.py --install`` installs the packages when absent (what .ci/run
calls before the tests, so that the install is not part of the tests' time).
"""
from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# what the cluster needs on PATH; the Debian packages that hold them
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "scontrol")
PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
START_TIMEOUT = 60.0


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def install() -> str | None:
    """Install Debian's Slurm and munge when a binary is missing; None when they are there (afterwards),
    else why they could not be installed."""
    if not missing_binaries():
        return None
    if os.geteuid() != 0:
        return f"Slurm is not installed ({', '.join(missing_binaries())} missing) and this is not root"
    if shutil.which("apt-get") is None:
        return f"Slurm is not installed ({', '.join(missing_binaries())} missing) and there is no apt-get"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode:
            return f"{' '.join(cmd)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-400:]}"
    still = missing_binaries()
    return f"installed {', '.join(PACKAGES)} but still missing {', '.join(still)}" if still else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class SlurmCluster:
    """One node, one partition (``debug``), in ``root`` (a fresh folder)."""

    def __init__(self, root: Path, cpus: int = 2):
        self.root = Path(root)
        self.cpus = cpus
        self.started: list[tuple[str, Path]] = []   # (daemon, its pid file), in start order
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.socket = self.root / "munge" / "munge.socket"

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm client (and a job, which inherits it) needs to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    # ------------------------------------------------------------------------------------------ start
    def start(self) -> None:
        try:
            self._start_munge()
            self._write_conf()
            self._start("slurmctld", [_sbin("slurmctld"), "-f", str(self.conf)], self.root / "slurmctld.pid")
            self._start("slurmd", [_sbin("slurmd"), "-f", str(self.conf)], self.root / "slurmd.pid")
            self._wait_for_idle_node()
        except BaseException:
            self.stop()
            raise

    def _start_munge(self) -> None:
        d = self.root / "munge"
        d.mkdir(parents=True, mode=0o700)
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._start("munged", [_sbin("munged"), "--force", f"--socket={self.socket}", f"--key-file={key}",
                               f"--pid-file={d / 'munged.pid'}", f"--log-file={d / 'munged.log'}",
                               f"--seed-file={d / 'munged.seed'}"], d / "munged.pid")

    def _write_conf(self) -> None:
        for sub in ("state", "spool"):
            (self.root / sub).mkdir()
        r = self.root
        mem_mb = max(256, (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // 2**20 // 2)
        self.conf.write_text("\n".join([
            "ClusterName=zootest",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmUser={getpass.getuser()}", f"SlurmdUser={getpass.getuser()}",
            f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}", f"SlurmdLogFile={r / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin", "SchedulerParameters=sched_interval=1",
            "MpiDefault=none", "SwitchType=switch/none", "LaunchParameters=use_interactive_step",
            "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/filetxt", f"JobCompLoc={r / 'jobcomp.log'}",
            "JobRequeue=1", "ReturnToService=2", "KillWait=10", "MinJobAge=600",
            "SlurmdParameters=config_overrides",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={mem_mb} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]) + "\n", encoding="utf-8")

    def _start(self, name: str, cmd: list[str], pid_file: Path) -> None:
        """Start a daemon (it forks into the background and writes its PID file); remember it at once,
        so that a failure further on still stops it."""
        self.started.append((name, pid_file))
        r = subprocess.run(cmd, env=dict(os.environ, **self.env), capture_output=True, text=True, timeout=60)
        if r.returncode:
            raise RuntimeError(f"{name} did not start ({r.returncode}): {(r.stderr or r.stdout).strip()}"
                               + self._logs())
        t_end = time.monotonic() + START_TIMEOUT
        while self._pid(pid_file) is None:
            if time.monotonic() > t_end:
                raise RuntimeError(f"{name} wrote no PID file {pid_file}" + self._logs())
            time.sleep(0.05)

    def _wait_for_idle_node(self) -> None:
        t_end = time.monotonic() + START_TIMEOUT
        state = ""
        while time.monotonic() < t_end:
            r = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=dict(os.environ, **self.env),
                               capture_output=True, text=True)
            state = r.stdout.strip()
            if r.returncode == 0 and state.startswith("idle"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the Slurm node is not idle after {START_TIMEOUT:.0f}s (state {state!r})" + self._logs())

    def _logs(self) -> str:
        out = []
        for f in (self.root / "slurmctld.log", self.root / "slurmd.log", self.root / "munge" / "munged.log"):
            if f.is_file():
                out.append(f"\n--- {f} (end):\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:]))
        return "".join(out)

    # ------------------------------------------------------------------------------------------- stop
    def _cancel_all(self, timeout: float = 30.0) -> None:
        env = dict(os.environ, **self.env)
        try:
            subprocess.run(["scancel", "--user", str(os.getuid())], env=env, capture_output=True, timeout=30)
            t_end = time.monotonic() + timeout
            while time.monotonic() < t_end:
                r = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True,
                                   timeout=30)
                if r.returncode or not r.stdout.strip():
                    return
                time.sleep(0.2)
        except (OSError, subprocess.TimeoutExpired):
            pass

    @staticmethod
    def _pid(pid_file: Path) -> int | None:
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid > 0 else None

    def stop(self) -> None:
        """Cancel the jobs still in the cluster (a failed test may leave some) and let them end, then
        SIGTERM to each daemon started here (from its PID file; newest first), then SIGKILL to any that has
        not ended after 10 s."""
        if any(name == "slurmctld" for name, _ in self.started):
            self._cancel_all()
        for name, pid_file in reversed(self.started):
            pid = self._pid(pid_file)
            if pid is None or not _alive(pid):
                continue
            os.kill(pid, signal.SIGTERM)
            t_end = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < t_end:
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.started.clear()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a daemon we started is not our child once it forked; a zombie counts as ended
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


if __name__ == "__main__":
    if sys.argv[1:] != ["--install"]:
        print(__doc__)
        sys.exit(2)
    why = install()
    if why:
        print(f"slurm_cluster: {why}", file=sys.stderr)
        sys.exit(1)
    print("slurm_cluster: " + ", ".join(PACKAGES) + " present")
