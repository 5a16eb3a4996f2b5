"""Run chosen runs of an experiment on a machine that receives only a copy of this checkout (a borrowed GPU
machine, a cluster node without the shared data), side by side, to a deadline, and bring the results back.

How `results/gpu_full/` is made. Three steps:

  here:   python tools/remote_batch.py pack experiments/dialogsum_transformer.toml \\
              --only strong-seed1 strong-seed2 strong-seed3 --profile none [--dir .dev]
  there:  python3 tools/remote_batch.py go --seconds 480 --out $OUT [--dir .dev] [--tests tests/test_gpu_logic.py]
  here:   python tools/remote_batch.py unpack OUT/remote_batch.tgz --results results/gpu_full
          zoo report --results results/gpu_full dialogsum_transformer

``pack`` writes DIR (default ``.dev``, which git ignores through .git/info/exclude) with what the other
machine lacks: the experiment file (BERTScore dropped from its metrics, since its backbone does not travel;
score it afterwards with ``zoo eval RUN --metrics bertscore --save``), the corpora the chosen runs read, the
packages the evaluation and the report's record checks need that the image lacks (rouge_score, nltk,
jsonschema and its two helpers: copied from this interpreter; rpds-py, compiled: a wheel for ``--python``),
wheels named with ``--wheel`` (e.g. gensim for word2vec runs), and ``batch.json``. It
prints the size of what will travel and what else would (tracked files: results/ alone is ~200 MB).

``go`` first checks that every package a run imports can be imported there (else exit 2, naming them), then
starts every run at once (``python3 -m seq2seq_zoo run ... --resume``, logs in DIR/logs), starts a
run whose ``train.init_from`` names another run of the batch once that one has finished, and at the
deadline sends SIGTERM: a run stops the way Ctrl-C stops it (its last.pt is written; ``go`` again on the
same machine continues it with ``--resume``); ``--max-minutes M`` has each run stop training after M
minutes and be scored, so that it reaches its test record before the deadline. Then it writes
OUT/remote_batch.tgz (DIR/res without checkpoints, plus the logs) and OUT/summary.txt. A second ``go`` on the same machine must not re-send DIR:
whatever replaces it there replaces the checkpoints too.

``unpack`` copies the finished runs (those with a run-level record.json) into ``--results/<experiment>/``,
the experiment's ``experiment.json`` (its declared findings and headline decoding) beside them and the logs
into ``<experiment>/logs/``; it refuses to overwrite a run that is there unless ``--force``,
and then stages the new run beside it and swaps it in, removing the old one only once the new one is in
place. An archive cut short or of another layout changes nothing.

Why a script: the other machine has no copy of ../shared/data, no rouge-score and at most 64 MiB of
travelling files; the steps above are easy to get wrong by hand (a second call that re-sends
DIR restarts the runs).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# pure Python, copied from this interpreter: the scorer and the record checks' validator (jsonschema and the
# two packages it imports); the remote machines' image has absl, regex, tqdm, joblib and attrs
SITE_PACKAGES = ("rouge_score", "nltk", "jsonschema", "jsonschema_specifications", "referencing")
# compiled packages the above need that the image lacks: {distribution: import name}; copied from this
# interpreter when its Python is the other machine's, else downloaded as that Python's wheel
COMPILED = {"rpds-py": "rpds"}
# what a run imports there; ``go`` checks them before it starts anything (a missing one used to surface
# only when the first run wrote its report, after training)
PREFLIGHT = ("torch", "numpy", "scipy", "pandas", "matplotlib", "tokenizers", "tqdm", *SITE_PACKAGES,
             *COMPILED.values())
DROP_METRICS = ("bertscore",)
EXIT_USAGE = 2


def fail(msg: str) -> int:
    print(f"remote_batch: error: {msg}", file=sys.stderr)
    return EXIT_USAGE


def mib(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


# ------------------------------------------------------------------------------------------------ pack
def strip_metrics(text: str, drop=DROP_METRICS) -> tuple[str, list[str]]:
    """The experiment file's text with ``drop`` taken out of its ``metrics = [...]`` line(s)."""
    dropped = []

    def fix(m):
        items = re.findall(r'"([^"]*)"', m.group(2))
        keep = [x for x in items if x not in drop]
        dropped.extend(x for x in items if x in drop)
        return m.group(1) + "[" + ", ".join(f'"{x}"' for x in keep) + "]"
    return re.sub(r'(?m)^(\s*metrics\s*=\s*)\[([^\]]*)\]', fix, text), dropped


def dependencies(specs) -> dict[str, list[str]]:
    """run -> the runs of the batch it starts from (``train.init_from``, with the seed suffix as
    runner.resolve_init finds it)."""
    names = {s.name for s in specs}
    out = {}
    for s in specs:
        v = s.train.init_from
        cands = [v, f"{v}-seed{s.seed}"] if v else []
        out[s.name] = [c for c in cands if c in names]
    return out


def cmd_pack(a) -> int:
    sys.path.insert(0, str(ROOT))
    from seq2seq_zoo.config import load_experiment
    from seq2seq_zoo.data.corpora import resolve_data_dir
    from seq2seq_zoo.errors import UserError
    src = Path(a.experiment)
    try:
        exp = load_experiment(src, None if a.profile == "none" else a.profile, a.only)
    except UserError as e:
        return fail(str(e))
    specs = exp.runs
    if not specs:
        return fail(f"{src}: no runs selected")
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    text, dropped = strip_metrics(src.read_text(encoding="utf-8"))
    (d / src.name).write_text(text, encoding="utf-8")
    datasets = sorted({s.data.dataset for s in specs})
    for ds in datasets:
        try:
            base = resolve_data_dir(ds, a.data_dir, exp.raw.get("experiment", {}).get("data_dir"))
        except UserError as e:
            return fail(str(e))
        shutil.rmtree(d / "data" / ds, ignore_errors=True)
        shutil.copytree(base / ds, d / "data" / ds, ignore=shutil.ignore_patterns("*hiddentest*"))
    site = d / "site"
    for pkg in SITE_PACKAGES:
        mod = __import__(pkg)
        shutil.rmtree(site / pkg, ignore_errors=True)
        shutil.copytree(Path(mod.__file__).parent, site / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = d / "wheels"
    same_python = a.python == f"{sys.version_info.major}.{sys.version_info.minor}"
    want = list(a.wheel or [])
    for dist, mod in COMPILED.items():
        if same_python:
            m = __import__(mod)
            shutil.rmtree(site / mod, ignore_errors=True)
            shutil.copytree(Path(m.__file__).parent, site / mod, ignore=shutil.ignore_patterns("__pycache__"))
        elif not any(w.split("=")[0].strip().lower() == dist for w in want):
            from importlib.metadata import version
            want.append(f"{dist}=={version(dist)}")
    for w in want:
        wheels.mkdir(exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", a.python, "--implementation", "cp",
               *[x for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
                 for x in ("--platform", p)], "-d", str(wheels), w]
        if subprocess.run(cmd).returncode:
            return fail(f"pip could not download {w} for Python {a.python} (command: {' '.join(cmd)})")
    batch = {"experiment": src.name, "name": exp.name, "profile": a.profile, "runs": [s.name for s in specs],
             "after": dependencies(specs), "datasets": datasets, "dropped_metrics": dropped,
             "packed": time.strftime("%Y-%m-%d %H:%M:%S")}
    (d / "batch.json").write_text(json.dumps(batch, indent=1) + "\n", encoding="utf-8")
    w2v = [s.name for s in specs if str(s.model_options.get("embeddings", "")).startswith("word2vec")]
    print(f"packed {len(specs)} run(s) of {exp.name} into {d}/ ({mib(d):.1f} MiB): {', '.join(batch['runs'])}")
    if dropped:
        print(f"  metrics dropped there: {', '.join(dropped)} (score them later and keep them with the run: "
              f"zoo eval RUN --metrics {' '.join(dropped)} --save)")
    if w2v and not any(wheels.glob("gensim-*.whl")):
        from importlib.metadata import PackageNotFoundError, version
        try:
            pins = f"--wheel gensim=={version('gensim')} --wheel smart_open=={version('smart_open')}"
        except PackageNotFoundError:
            pins = "--wheel gensim==VERSION --wheel smart_open==VERSION"
        print(f"  runs {', '.join(w2v)} train word2vec vectors: add {pins} (the remote machines' image has "
              "neither)")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True).stdout.split(b"\0")
    size = sum((ROOT / p.decode()).stat().st_size for p in tracked if p and (ROOT / p.decode()).is_file()) / 2**20
    print(f"  tracked files: {size:.0f} MiB; the checkout travels with them. If that is over the limit, keep "
          "results/ back for the call:\n    git rm -r -q --cached results && echo /results/ >> .git/info/exclude\n"
          "  and afterwards: git reset -q && sed -i '\\#^/results/$#d' .git/info/exclude")
    inside = d.resolve().is_relative_to(ROOT)
    if not inside:
        print(f"  note: {d}/ is outside the checkout ({ROOT}), so it will not travel with it; pack into a "
              "folder of the checkout that git ignores")
    elif not _ignored(d):
        print(f"  note: {d}/ is not ignored by git; add it to .git/info/exclude (echo /{d.name}/ >> "
              ".git/info/exclude) and name it in the call's carry")
    return 0


def _ignored(path: Path) -> bool:
    r = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT, stderr=subprocess.DEVNULL)
    return r.returncode == 0


# -------------------------------------------------------------------------------------------------- go
def cmd_go(a) -> int:
    d = Path(a.dir).resolve()
    try:
        batch = json.loads((d / "batch.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        return fail(f"{d / 'batch.json'}: {e}; run `pack` first")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    site = d / "site"
    wheels = sorted((d / "wheels").glob("*.whl")) if (d / "wheels").is_dir() else []
    if wheels:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                            "--upgrade", "--target", str(site), *map(str, wheels)])
        if r.returncode:
            return fail("installing the carried wheels failed")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(site)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    missing = preflight(env)
    if missing:
        return fail(f"Python here ({sys.executable}) cannot import {', '.join(missing)}, which the runs need; "
                    "carry it: pack again with --wheel NAME==VERSION (compiled) or add it to SITE_PACKAGES "
                    "(pure Python)")
    logs = d / "logs"
    logs.mkdir(exist_ok=True)
    deadline = time.time() + a.seconds
    extra = (["--device", a.device] if a.device else []) + \
        (["--max-minutes", f"{a.max_minutes:g}"] if a.max_minutes else [])
    tests = None
    if a.tests:
        tests = subprocess.Popen([sys.executable, "-m", "pytest", "-q", *a.tests], cwd=ROOT, env=env,
                                 stdout=open(logs / "tests.log", "w"), stderr=subprocess.STDOUT)
    state: dict[str, dict] = {r: {"state": "waiting"} for r in batch["runs"]}

    def start(run):
        # the runs start in the checkout: paths inside it are given relative to it, so the records name
        # `.dev/...` rather than the other machine's folder
        here = Path(os.path.relpath(d, ROOT)) if d.is_relative_to(ROOT) else d
        cmd = [sys.executable, "-m", "seq2seq_zoo", "run", str(here / batch["experiment"]),
               "--profile", batch["profile"], "--only", run, "--results", str(here / "res"), "--data-dir", str(here / "data"), "--resume",
               "--no-progress", *extra]
        log = open(logs / f"run_{run}.log", "a")
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        state[run] = {"state": "running", "proc": subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                                                    stderr=subprocess.STDOUT), "t0": time.time()}
        print(f"[{time.strftime('%H:%M:%S')}] started {run}", flush=True)

    while True:
        for run, st in state.items():
            if st["state"] == "running" and st["proc"].poll() is not None:
                rc = st["proc"].returncode
                st.update(state="finished" if rc == 0 else "failed", rc=rc, minutes=(time.time() - st["t0"]) / 60)
                print(f"[{time.strftime('%H:%M:%S')}] {run}: {st['state']} (exit {rc}, {st['minutes']:.1f} min)",
                      flush=True)
        for run, st in state.items():
            if st["state"] == "waiting":
                deps = [state[x]["state"] for x in batch["after"].get(run, [])]
                if any(s in ("failed", "skipped", "stopped") for s in deps):
                    st["state"] = "skipped"
                elif all(s == "finished" for s in deps):
                    start(run)
        if not any(st["state"] in ("waiting", "running") for st in state.values()):
            break
        if time.time() >= deadline:
            running = [r for r, st in state.items() if st["state"] == "running"]
            print(f"[{time.strftime('%H:%M:%S')}] deadline: stopping {', '.join(running) or 'nothing'} "
                  "(SIGTERM: each writes its last.pt)", flush=True)
            for r in running:
                state[r]["proc"].send_signal(signal.SIGTERM)
            for r in running:
                try:
                    state[r]["proc"].wait(timeout=a.grace)
                except subprocess.TimeoutExpired:
                    state[r]["proc"].kill()
                    state[r]["proc"].wait()
                state[r].update(state="stopped", rc=state[r]["proc"].returncode,
                                minutes=(time.time() - state[r]["t0"]) / 60)
            for st in state.values():
                if st["state"] == "waiting":
                    st["state"] = "not started"
            break
        time.sleep(a.poll)
    if tests is not None:
        try:
            tests.wait(timeout=max(5.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            tests.kill()
    lines = [f"{batch['name']} ({batch['profile']}), packed {batch['packed']}, deadline {a.seconds:.0f} s"]
    for run, st in state.items():
        last = _last_line(logs / f"run_{run}.log")
        if st["state"] == "stopped" and (d / "res" / batch["name"] / run / "record.json").is_file():
            st["state"] = "stopped after its test record (in the [[decode]] variants; unpack takes it)"
        lines.append(f"{run}: {st['state']}" + (f" (exit {st['rc']}, {st['minutes']:.1f} min)" if "rc" in st else "")
                     + (f" | {last}" if last else ""))
    if tests is not None:
        lines.append(f"tests: exit {tests.returncode} | {_last_line(logs / 'tests.log')}")
    summary = "\n".join(lines) + "\n"
    print(summary, end="")
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.txt").write_text(summary, encoding="utf-8")
        (logs / "summary.txt").write_text(summary, encoding="utf-8")
        with tarfile.open(out / "remote_batch.tgz", "w:gz") as tar:
            for base in (d / "res", logs):
                if base.is_dir():
                    for p in sorted(base.rglob("*")):
                        if p.is_file() and not _is_checkpoint(p):
                            tar.add(p, arcname=str(p.relative_to(d)))
        print(f"wrote {out / 'remote_batch.tgz'} ({mib(out / 'remote_batch.tgz'):.1f} MiB)")
    return 0 if all(st["state"] == "finished" for st in state.values()) else 1


def preflight(env: dict, modules=PREFLIGHT) -> list[str]:
    """The modules of ``modules`` that this Python cannot import with ``env`` (the carried packages on its
    path), each tried in a fresh interpreter."""
    code = ("import importlib.util, sys\n"
            "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))")
    r = subprocess.run([sys.executable, "-c", code, *modules], env=env, capture_output=True, text=True)
    return r.stdout.split() if r.returncode == 0 else [f"(the check failed: {r.stderr.strip()[-200:]})"]


def _is_checkpoint(p: Path) -> bool:
    return "checkpoints" in p.parts or p.suffix == ".pt" or p.name.endswith(".lock")


def _last_line(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in re.split(r"[\r\n]", text) if ln.strip()]
    return lines[-1][:200] if lines else ""


# ---------------------------------------------------------------------------------------------- unpack
def _archive_plan(names: list[str]) -> tuple[dict[tuple[str, str], list[str]], list[str], list[str], str | None]:
    """What an archive written by ``go`` holds, from its member names (files only): {(experiment, run):
    members} of the finished runs (those with a run-level ``res/<exp>/<run>/record.json``; a decoding
    variant's ``decodes/<name>/record.json`` is part of its run, never a run), the log members, the
    unfinished run folders, and the first member of a layout ``go`` never writes (or None)."""
    sys.path.insert(0, str(ROOT))
    from seq2seq_zoo.names import name_problem
    runs: dict[tuple[str, str], list[str]] = {}
    logs, odd = [], None
    finished = {tuple(n.split("/")[1:3]) for n in names if n.count("/") == 3 and n.startswith("res/")
                and n.endswith("/record.json")}
    unfinished = set()
    for n in names:
        parts = n.split("/")
        if n.startswith("/") or any(x in ("", ".", "..") for x in parts):
            return {}, [], [], f"{n} (an absolute path, or '..', '.' or an empty part)"
        if parts[0] == "logs" and len(parts) == 2 and not name_problem(parts[1]):
            logs.append(n)
        elif parts[0] == "res" and (len(parts) == 2 or len(parts) == 3 and not name_problem(parts[1])):
            continue  # FINDINGS.md, the tables, README, findings: rebuilt here by zoo report; experiment.json: see unpack
        elif parts[0] == "res" and len(parts) >= 4 and not name_problem(parts[1]) and \
                (parts[2] == "plots" or not name_problem(parts[2])):
            key = (parts[1], parts[2])
            if key in finished:
                runs.setdefault(key, []).append(n)
            elif parts[2] != "plots":
                unfinished.add(f"{parts[1]}/{parts[2]}")
        else:
            return {}, [], [], n
    return runs, logs, sorted(unfinished), odd


def cmd_unpack(a) -> int:
    """Copy the finished runs of an archive into ``--results``: every run is read and written into a
    temporary folder beside its destination first; only when every run of the archive has been staged is
    each one moved into place (a rename), a run already there (``--force``) first renamed aside and
    removed only once the new one is in place. An archive that is cut short, not an archive, or of a
    layout ``go`` does not write changes nothing (exit 2, naming the member)."""
    import zlib
    sys.path.insert(0, str(ROOT))
    from seq2seq_zoo.errors import UserError
    from seq2seq_zoo.names import inside
    tgz, results = Path(a.archive), Path(a.results)
    if not tgz.is_file():
        return fail(f"{tgz}: not found")
    if results.exists() and not results.is_dir():
        return fail(f"{results}: is a file, but --results must be a folder")
    staged: list[tuple[Path, Path, str]] = []   # (temporary folder, destination, "exp/run")
    try:
        with tarfile.open(tgz) as tar:
            members = tar.getmembers()   # reads every header: a cut archive fails here, before any write
            files = {m.name.removeprefix("./"): m for m in members if m.isfile()}
            skipped = [m.name for m in members if not m.isfile() and not m.isdir()]
            runs, logs, unfinished, odd = _archive_plan(list(files))
            if odd:
                return fail(f"{tgz}: member {odd} is not part of the layout `go` writes (res/<experiment>/<run>/..., "
                            "res/<experiment>/<file>, res/<file>, logs/<file>); nothing was unpacked")
            for exp, run in runs:
                dest = inside(results, exp, run)
                if (dest.exists() or dest.is_symlink()) and not a.force:
                    return fail(f"{dest}: already there; --force replaces it (the run there is kept until the "
                                "new one is in place)")
            for (exp, run), names in sorted(runs.items()):
                dest = inside(results, exp, run)
                dest.parent.mkdir(parents=True, exist_ok=True)
                stage = inside(dest.parent, f".unpack-{run[:60]}-{os.getpid()}.tmp")
                shutil.rmtree(stage, ignore_errors=True)
                staged.append((stage, dest, f"{exp}/{run}"))
                for n in names:
                    target = inside(stage, *n.split("/")[3:])
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(files[n]).read())
            log_data = {n: tar.extractfile(files[n]).read() for n in logs}
            # the experiment's declarations as `zoo run` wrote them (findings, the headline decoding): zoo
            # report reads them and cannot rebuild them
            declared = {exp: tar.extractfile(files[f"res/{exp}/experiment.json"]).read()
                        for exp, _ in runs if f"res/{exp}/experiment.json" in files}
    except (tarfile.TarError, EOFError, zlib.error) as e:
        _drop(staged)
        why = "not a tar archive" if "successfully" in str(e) else " ".join(str(e).split())[:160] or type(e).__name__
        return fail(f"{tgz}: not a whole .tgz archive ({why}); copy it again; nothing was unpacked")
    except UserError as e:
        _drop(staged)
        return fail(str(e))
    except OSError as e:
        _drop(staged)
        return fail(f"{tgz}: could not unpack into {results} ({e.strerror or e}); nothing was unpacked")
    copied, replaced = [], []
    for stage, dest, label in staged:
        aside = None
        if dest.exists() or dest.is_symlink():
            aside = dest.parent / f".replaced-{dest.name[:60]}-{os.getpid()}.tmp"
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(dest, aside)
        try:
            os.replace(stage, dest)
        except OSError as e:
            if aside is not None:
                os.replace(aside, dest)   # the old run back where it was
            _drop([x for x in staged if x[1] != dest or x[0] == stage])
            return fail(f"{dest}: could not move the unpacked run into place ({e.strerror or e}); "
                        f"{'the run there is unchanged; ' if aside else ''}runs moved in before it: "
                        f"{', '.join(copied) or 'none'}")
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
            replaced.append(label)
        copied.append(label)
    exps = sorted({c.split("/")[0] for c in copied}) or sorted({k[0] for k in runs})
    for exp in sorted({c.split("/")[0] for c in copied} & set(declared)):
        inside(results, exp, "experiment.json").write_bytes(declared[exp])
    if logs and not exps:
        exps = sorted({n.split("/")[1] for n in files if n.startswith("res/") and n.count("/") >= 2})
    if logs and exps:
        for n, data in log_data.items():
            target = inside(results, exps[0], "logs", n.split("/")[1])
            target.parent.mkdir(parents=True, exist_ok=True)
            k = 1
            while target.is_file() and target.read_bytes() != data:   # another call's log: kept
                k += 1
                target = target.with_name(f"{Path(n).stem}.{k}{Path(n).suffix}")
            target.write_bytes(data)
    print(f"unpacked {len(copied)} finished run(s) into {results}/: {', '.join(copied) or 'none'}")
    if replaced:
        print(f"  replaced (the run that was there, removed once the new one was in place): {', '.join(replaced)}")
    if unfinished:
        print(f"  not finished in the archive (no record.json), not unpacked: {', '.join(unfinished)}")
    if skipped:
        print(f"  skipped (links and other non-files): {', '.join(skipped[:5])}{' ...' if len(skipped) > 5 else ''}")
    if copied:
        print(f"next: zoo report --results {results} {' '.join(sorted({c.split('/')[0] for c in copied}))}")
    return 0


def _drop(staged) -> None:
    for stage, _, _ in staged:
        shutil.rmtree(stage, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="remote_batch.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="here: write DIR with what the other machine needs")
    p.add_argument("experiment")
    p.add_argument("--only", nargs="+", metavar="RUN", help="runs to take (default: all)")
    p.add_argument("--profile", default="none", help="profile the runs use there (default: none, full size)")
    p.add_argument("--dir", default=".dev")
    p.add_argument("--data-dir", default=None, help="folder holding <dataset>/ here (default: as zoo run finds it)")
    p.add_argument("--wheel", action="append", metavar="REQ", help="a compiled package to carry, e.g. gensim==4.4.0")
    p.add_argument("--python", default="3.12", help="the other machine's Python, for --wheel (default 3.12)")
    g = sub.add_parser("go", help="there: run the packed runs side by side to a deadline")
    g.add_argument("--dir", default=".dev")
    g.add_argument("--seconds", type=float, required=True, help="deadline, from the start")
    g.add_argument("--out", default=os.environ.get("OUT"), help="where the archive goes (default: $OUT)")
    g.add_argument("--device", default=None, help="passed to zoo run --device")
    g.add_argument("--max-minutes", type=float, default=None, metavar="M",
                   help="passed to zoo run --max-minutes: each run stops training after M minutes and is "
                        "scored, so that it ends before the deadline with its test record")
    g.add_argument("--tests", nargs="+", help="pytest files to run beside the runs (log: DIR/logs/tests.log)")
    g.add_argument("--grace", type=float, default=90.0, help="seconds a stopped run gets to write last.pt")
    g.add_argument("--poll", type=float, default=5.0, help=argparse.SUPPRESS)
    u = sub.add_parser("unpack", help="here: copy the finished runs into a results folder")
    u.add_argument("archive")
    u.add_argument("--results", default="results/gpu_full")
    u.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    return {"pack": cmd_pack, "go": cmd_go, "unpack": cmd_unpack}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
