"""The ``[launcher]`` table: how ``zoo run EXP --launcher slurm|local`` asks a cluster for its jobs.

It may stand in an experiment file or in the user's config file (``$ZOO_CONFIG``, else
``$XDG_CONFIG_HOME/seq2seq-zoo/config.toml``, else ``~/.config/seq2seq-zoo/config.toml``); the command line
wins over the experiment file, which wins over the user's config. Each key is checked here, with the
file, line and key in the message, whether or not a launcher is used (a typo is found on the first run).
"""
from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any

from seq2seq_zoo.config.toml_lines import Where, parse_toml
from seq2seq_zoo.errors import ConfigError
from seq2seq_zoo.registry import did_you_mean

# key -> (what it is, what it maps to in sbatch (or the local launcher), its default)
LAUNCHER_KEYS: dict[str, tuple[str, str, Any]] = {
    "partition": ("string", "`--partition`", None),
    "time": ("minutes (integer)", "`--time` (a job's time limit; a job still training then is requeued "
             "and resumes)", 1440),
    "cpus_per_job": ("integer >= 1", "`--cpus-per-task`", None),
    "gpus_per_job": ("integer >= 0", "`--gpus-per-node`", None),
    "mem_gb": ("number > 0", "`--mem` (in GB)", None),
    "account": ("string", "`--account`", None),
    "qos": ("string", "`--qos`", None),
    "max_parallel": ("integer >= 1", "`--array=0-N%max_parallel` (jobs running at once; locally: the free "
                     "cores / cpus_per_job)", None),
    "sbatch": ("table of KEY = value", "one `#SBATCH --KEY=value` line each (e.g. `constraint = \"a100\"`)", {}),
    "setup": ("list of strings", "shell lines run before each job (e.g. `module load cuda`)", []),
    "log_dir": ("path", "submitit's job folders (`--output`, `--error`); default "
                "`RESULTS/EXPERIMENT/.jobs/logs`", None),
    "report_job": ("boolean", "a last job, `--dependency=afterany:` every run's job, runs `zoo report` "
                   "(Slurm only)", True),
}


def _problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` for ``key`` (None: nothing)."""
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)
    if key in ("partition", "account", "qos", "log_dir"):
        return None if isinstance(value, str) and value.strip() else f"expected a non-empty string, got {value!r}"
    if key == "time":
        return None if is_int(value) and value >= 1 else f"expected a number of minutes >= 1, got {value!r}"
    if key in ("cpus_per_job", "max_parallel"):
        return None if is_int(value) and value >= 1 else f"expected an integer >= 1, got {value!r}"
    if key == "gpus_per_job":
        return None if is_int(value) and value >= 0 else f"expected an integer >= 0, got {value!r}"
    if key == "mem_gb":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        return None if ok else f"expected a number of GB > 0, got {value!r}"
    if key == "report_job":
        return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
    if key == "setup":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else f"expected a list of shell lines (strings), got {value!r}"
    if key == "sbatch":
        if not isinstance(value, dict):
            return f"expected a table ([launcher.sbatch] or sbatch = {{ constraint = \"a100\" }}), got {value!r}"
        for k, v in value.items():
            if not isinstance(v, (str, int, bool)) or isinstance(v, bool) and not v:
                return (f"{k}: expected a string, an integer or true (a flag without a value), got {v!r}")
        return None
    return None


def check_launcher(ctx: Where, table: Any) -> dict[str, Any]:
    """A ``[launcher]`` table checked key by key; returns it (a plain dict)."""
    if not isinstance(table, dict):
        raise ctx.fail("[launcher]", "[launcher] must be a table")
    for k, v in table.items():
        if k not in LAUNCHER_KEYS:
            raise ctx.fail(f"launcher.{k}", f"unknown key.{did_you_mean(k, LAUNCHER_KEYS)} "
                           f"Valid: {', '.join(sorted(LAUNCHER_KEYS))}")
        problem = _problem(k, v)
        if problem:
            raise ctx.fail(f"launcher.{k}", problem)
    return dict(table)


def user_config_path() -> Path:
    """The user's config file (it need not exist)."""
    if os.environ.get("ZOO_CONFIG"):
        return Path(os.environ["ZOO_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "seq2seq-zoo" / "config.toml"


def user_launcher() -> dict[str, Any]:
    """The ``[launcher]`` table of the user's config file ({} without the file or the table); the file
    may hold nothing else."""
    path = user_config_path()
    if not path.is_file():
        if os.environ.get("ZOO_CONFIG"):
            raise ConfigError(f"{path}: config file not found ($ZOO_CONFIG names it); create it or unset ZOO_CONFIG")
        return {}
    try:
        text = path.read_text(encoding="utf-8")
        raw = parse_toml(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: not a TOML file the suite can read ({e})") from None
    ctx = Where(path, text)
    for k in raw:
        if k != "launcher":
            raise ctx.fail(f"[{k}]", "unknown section of the user config; it holds a [launcher] table only")
    return check_launcher(ctx, raw.get("launcher", {}))
