"""Training over processes (DDP) and runs spread over invocations.

- Two gloo processes train exactly like one process with the same global batch: per-batch losses,
  validation losses and the weights after training agree to float tolerance, with gradient
  accumulation, a batch smaller than the number of ranks (a stand-in shard) and a resume.
- `zoo run --nproc 2` (torchrun underneath) writes the same record as `zoo run`, from rank 0 only.
- `zoo run EXP --only A` and `--only B` (e.g. two cluster tasks) into one results folder merge into one
  table, rows in the file's order.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zoo_process
from conftest import tiny_encoded, tiny_experiment, tiny_transformer, write_dialogsum
from seq2seq_zoo.cli import main
from seq2seq_zoo.config import TrainConfig
from seq2seq_zoo.registry import register_objective
from seq2seq_zoo.train import distributed
from seq2seq_zoo.train.distributed import DDPContext, Single
from seq2seq_zoo.train.loop import fit
from seq2seq_zoo.train.objectives import CrossEntropy
from slurm_cluster import _free_port

CPU = torch.device("cpu")

# (name, TrainConfig overrides, resume after this many epochs or None), each run in 1 and in 2 processes
CASES = [("plain", {}, None), ("accum2+resume", {"accum_steps": 2}, 1)]
# An objective that never calls model.forward (as SCST decodes through encode/decode_step) still trains
# in two processes like in one: it runs inside the DDP wrapper's forward, which averages its gradients
STEPWISE = ("stepwise+accum2", {"accum_steps": 2, "objective": "test_ce_by_decode_steps"}, None)
REFERENCE = {**{c[0]: c[0] for c in CASES}, STEPWISE[0]: STEPWISE[0]}


@register_objective("test_ce_by_decode_steps")
class _CEByDecodeSteps(CrossEntropy):
    """Token cross-entropy computed step by step through encode / decode_step."""

    def __call__(self, model, batch):
        state, nll = model.encode(batch), 0.0
        for t in range(batch.tgt_in.size(1)):
            lp, state = model.decode_step(state, batch.tgt_in[:, t])
            tgt = batch.tgt_out[:, t]
            nll = nll - lp.float().gather(1, tgt[:, None]).squeeze(1).masked_fill(tgt == 0, 0.0).sum()
        n = int((batch.tgt_out != 0).sum())
        return nll / max(n, 1), {"nll_sum": float(nll.detach()), "tokens": n}


def _cfg(over: dict, epochs: int = 2) -> TrainConfig:
    return TrainConfig(**{**dict(epochs=epochs, batch_size=4, lr=3e-3, eps=1e-6, precision="fp32", clip_norm=1.0),
                          **over})


def _train(ctx, ckpt: Path, over: dict, resume_after: int | None) -> dict:
    """fit() on 17 tiny examples (4 batches of 4 and one of 1 per epoch: with 2 ranks the last batch
    leaves rank 1 a stand-in), recording the loss the loop sees for every batch."""
    vocab, train = tiny_encoded(17)
    _, val = tiny_encoded(5, offset=1, vocab=vocab)
    losses: list[float] = []
    orig = ctx.reduce

    def recording(loss, stats, batch, flag):
        out = orig(loss, stats, batch, flag)
        losses.append(float(out[0].detach()))
        return out

    ctx.reduce = recording
    model = tiny_transformer(len(vocab), layers=1, max_src_len=64)
    quiet = dict(seed=1, ckpt_dir=ckpt, device=CPU, progress=False, log=lambda *_: None, ddp=ctx)
    if resume_after:
        fit(model, train, val, _cfg(over, resume_after), **quiet)
        model = tiny_transformer(len(vocab), layers=1, max_src_len=64, seed=5)  # a new process: weights come from last.pt
        st = fit(model, train, val, _cfg(over), resume=True, **quiet)
    else:
        st = fit(model, train, val, _cfg(over), **quiet)
    return {"losses": losses, "val": [v["val_loss"] for v in st.val_curve], "steps": st.step,
            "train_loss": [h["train_loss"] for h in st.history], "tokens": st.train_tokens,
            "model": {k: v.clone() for k, v in model.state_dict().items()}}


def _assert_same_weights(got: dict, want: dict, d_model: int = 16) -> None:
    """Equal to float tolerance. Key-projection biases get a looser bound: their true gradient is exactly
    zero (softmax ignores a shift of all scores), so what they get is float noise, summed in a different
    order by DDP, and Adam divides it by its own tiny magnitude."""
    for k, v in want.items():
        g, v = got[k].clone(), v.clone()
        key = slice(d_model, 2 * d_model) if k.endswith("in_proj.bias") else \
            slice(0, d_model) if k.endswith("kv_proj.bias") else None
        if key is not None:
            torch.testing.assert_close(g[key], v[key], rtol=0, atol=3e-4, msg=k)
            g[key] = v[key] = 0
        torch.testing.assert_close(g, v, rtol=1e-4, atol=2e-5, msg=k)


def _worker(rank: int, world: int, init_file: str, tmp: str) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        out = {}
        for name, over, resume_after in [*CASES, STEPWISE]:
            # a folder per rank where nothing is resumed: shows that rank 1 writes nothing
            ckpt = Path(tmp) / name / (f"rank{rank}" if resume_after is None else "shared")
            out[name] = _train(DDPContext(rank, world), ckpt, over, resume_after)
        torch.save(out, Path(tmp) / f"out{rank}.pt")
    except BaseException:
        torch.distributed.destroy_process_group()
        raise
    distributed.leave(wait=True)  # and end as zoo run's workers do (see distributed.end_process)
    distributed.end_process(0)


@pytest.fixture(scope="module")
def ddp_and_single(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    torch.multiprocessing.spawn(_worker, args=(2, str(tmp / "pg"), str(tmp)), nprocs=2, join=True)
    single = {name: _train(Single(), tmp / "single" / name, over, None) for name, over, _ in [*CASES, STEPWISE]}
    return tmp, single, torch.load(tmp / "out0.pt"), torch.load(tmp / "out1.pt")


@pytest.mark.parametrize("case", list(REFERENCE))
def test_two_gloo_processes_train_like_one_with_the_same_global_batch(ddp_and_single, case):
    _, single, r0, r1 = ddp_and_single
    one, two = single[REFERENCE[case]], r0[case]
    assert len(two["losses"]) == len(one["losses"]) == 10          # 5 global batches x 2 epochs
    assert two["steps"] == one["steps"]
    assert two["tokens"] == one["tokens"]                           # global tokens, not rank 0's share
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(one["losses"]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.tensor(two["val"]), torch.tensor(one["val"]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.tensor(two["train_loss"]), torch.tensor(one["train_loss"]), rtol=1e-5,
                               atol=1e-5)
    _assert_same_weights(two["model"], one["model"])
    for k, v in two["model"].items():
        assert torch.equal(r1[case]["model"][k], v), k                 # the ranks hold identical weights
    assert r1[case]["losses"] == two["losses"]                       # every rank sees the global loss


def test_only_rank_0_writes_checkpoints(ddp_and_single):
    tmp = ddp_and_single[0]
    assert {p.name for p in (tmp / "plain" / "rank0").iterdir()} == {"best.pt", "last.pt"}
    assert not (tmp / "plain" / "rank1").exists() or not any((tmp / "plain" / "rank1").iterdir())
    ck = torch.load(tmp / "accum2+resume" / "shared" / "last.pt", weights_only=True)
    assert len(ck["rng_ranks"]) == 2                                # every rank's RNG state, for exact resume


# ------------------------------------------------------------------------------------------------ CLI
def _exp(tmp: Path, name: str, runs: list[str], epochs: int = 1) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(tiny_experiment(name, "".join(f'\n[[runs]]\nname = "{r}"\n' for r in runs), seeds=2, epochs=epochs,
                                    batch_size=4, decode_max_len=12, extra_defaults="train.eps = 1e-6\n"),
                    encoding="utf-8")
    return path


def _main(args) -> int:
    threads = torch.get_num_threads()
    try:
        return main([str(a) for a in args])
    finally:
        torch.set_num_threads(threads)


def _table(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_only_invocations_into_one_results_folder_merge_into_one_table(tmp_path, capsys):
    data = write_dialogsum(tmp_path / "data", n_train=8, n_dev=2, n_test=2)
    toml = _exp(tmp_path, "spread", ["zeta", "alpha"])   # file order is not alphabetical
    R = tmp_path / "shared_results"
    for run in ("alpha", "zeta"):                        # e.g. two cluster array tasks, in any order
        assert _main(["run", toml, "--only", run, "--results", R, "--data-dir", data, "--no-progress"]) == 0
    assert [r["run"] for r in _table(R / "spread" / "table.csv")] == ["zeta", "alpha"]
    (R / "spread" / "table.csv").unlink()
    assert _main(["report", "spread", "--results", R]) == 0
    rows = _table(R / "spread" / "table.csv")
    assert [r["run"] for r in rows] == ["zeta", "alpha"]
    assert "| zeta " in (R / "spread" / "table.md").read_text(encoding="utf-8")
    orders = {r: json.loads((R / "spread" / r / "record.json").read_text())["order"] for r in ("zeta", "alpha")}
    assert orders == {"zeta": 0, "alpha": 1}


@pytest.mark.parametrize("together", [True, False])
def test_zoo_run_waits_for_the_other_ranks_after_a_stop_they_agreed_on(tmp_path, monkeypatch, together):
    """A Ctrl-C / SIGTERM stop the training loop raised (every DDP rank at the same update, rank 0 writing
    last.pt) leaves the process group after a barrier, as a clean finish does; an interrupt from
    elsewhere (e.g. one rank's Ctrl-C while decoding) leaves without waiting for ranks that may never come."""
    import seq2seq_zoo.runner as runner
    from seq2seq_zoo.errors import Preempted
    from seq2seq_zoo.train import distributed
    data = write_dialogsum(tmp_path / "data", n_train=8, n_dev=2, n_test=2)
    toml = _exp(tmp_path, "stop", ["a"])
    waits = []

    def stopped(*a, **k):
        e = Preempted()
        if together:
            e.together = True
        raise e

    monkeypatch.setattr(runner, "run", stopped)
    monkeypatch.setattr(distributed, "shutdown", lambda wait=False: waits.append(wait))
    assert _main(["run", toml, "--results", tmp_path / "R", "--data-dir", data, "--no-progress"]) == 143
    assert waits == [together]


@pytest.mark.slow
def test_zoo_run_nproc_2_matches_one_process_and_only_rank_0_writes(tmp_path):
    data = write_dialogsum(tmp_path / "data", n_train=9, n_dev=3, n_test=2)
    toml = _exp(tmp_path, "ddp", ["r"], epochs=2)
    common = ["--data-dir", data, "--no-progress"]
    env = {k: v for k, v in os.environ.items() if k not in ("ZOO_DATA", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
    rc, out, err = zoo_process.run(["run", toml, "--nproc", "2", "--results", tmp_path / "R2", *common], tmp_path,
                                   env)
    assert rc == 0, out + err
    assert out.count("done in") == 1                          # ranks > 0 keep quiet
    assert _main(["run", toml, "--results", tmp_path / "R1", *common, "--no-report"]) == 0   # R2's report is checked
    one, two = (json.loads((tmp_path / R / "ddp" / "r" / "record.json").read_text()) for R in ("R1", "R2"))
    assert two["train"]["world_size"] == 2 and one["train"]["world_size"] == 1
    assert two["train"]["steps"] == one["train"]["steps"] == 6
    assert two["train"]["train_tokens"] == one["train"]["train_tokens"]
    for key in ("history", "val_curve"):
        for a, b in zip(one["train"][key], two["train"][key]):
            for k in ("train_loss", "val_loss"):
                if k in a:
                    assert b[k] == pytest.approx(a[k], rel=1e-5), (key, k)
    ck1, ck2 = (torch.load(tmp_path / R / "ddp" / "r" / "checkpoints" / "best.pt", weights_only=True)["model"]
                for R in ("R1", "R2"))
    _assert_same_weights(ck2, ck1)
    run_dir = tmp_path / "R2" / "ddp" / "r"
    assert len((run_dir / "predictions.jsonl").read_text().splitlines()) == 2
    assert not list(run_dir.rglob(".*.tmp")) and not (run_dir / ".lock").exists()
    assert (tmp_path / "R2" / "ddp" / "table.csv").is_file()


def test_scst_runs_inside_the_ddp_forward_like_one_process(tmp_path):
    """SCST (sampling and greedy decoding through encode/decode_step) under DistributedDataParallel, one
    gloo rank: the objective gets the model itself (no ``model.module`` unwrapping), DDP's probe uses a
    copy of it (the reward statistics count only real batches), and the weights equal a plain run's."""
    import torch.distributed as td

    from seq2seq_zoo.registry import MODELS

    vocab, data = tiny_encoded(6)
    cfg = TrainConfig(epochs=1, batch_size=3, lr=1e-3, precision="fp32", objective="scst", rl_max_len=6,
                      rl_gamma=0.5)
    quiet = dict(seed=4, device=CPU, progress=False, log=lambda *_: None, vocab=vocab)

    def train(ctx, folder):
        torch.manual_seed(0)
        model = MODELS.create("pointer_generator", vocab_size=len(vocab), emb_dim=8, hidden=8)
        st = fit(model, data, data[:2], cfg, ckpt_dir=tmp_path / folder, ddp=ctx, **quiet)
        return st, model.state_dict()

    one, w_one = train(Single(), "one")
    td.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        ddp, w_ddp = train(DDPContext(0, 1), "ddp")
    finally:
        td.destroy_process_group()
    assert ddp.objective_stats["steps"] == one.objective_stats["steps"] == 2   # 6 examples / batch 3
    timeless = lambda s: {k: v for k, v in s.items() if k != "reward_seconds"}  # noqa: E731
    assert timeless(ddp.objective_stats) == pytest.approx(timeless(one.objective_stats))
    for k, v in w_one.items():
        torch.testing.assert_close(w_ddp[k], v, rtol=1e-5, atol=1e-6, msg=k)


# ------------------------------------------------------------------------ leaving the process group
_LEAVE_SCRIPT = '''
import atexit, os, sys, tempfile, torch
from seq2seq_zoo.train import distributed
atexit.register(lambda: print("interpreter teardown ran"))
store = os.path.join(tempfile.mkdtemp(), "pg")
torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
assert distributed.end_process(5) == 5          # still in the group: nothing ends yet
distributed.leave(wait=True)
print("written before the end", end="")         # buffered (stdout is a pipe): must still come out
distributed.end_process(7)
print("after end_process")
'''


def test_end_process_after_leaving_the_group_flushes_and_exits_with_the_code_without_teardown(tmp_path):
    """`end_process` in a process that left its group: stdout flushed, the given exit code, and neither the
    rest of the program nor the interpreter's teardown (atexit, where gloo's threads could abort it) runs."""
    r = subprocess.run([sys.executable, "-c", _LEAVE_SCRIPT], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONUNBUFFERED": ""})
    assert r.returncode == 7, r.stderr
    assert r.stdout == "written before the end", r.stdout


def test_end_process_in_a_process_that_was_never_in_a_group_returns_the_code():
    from seq2seq_zoo.train import distributed
    assert not distributed._LEFT
    assert distributed.end_process(3) == 3
    assert main(["list"]) == 0                     # zoo's main returns (pytest's process goes on)


_TWO_RANK_SCRIPT = '''
import torch
from seq2seq_zoo.train import distributed
ctx = distributed.setup()
torch.manual_seed(ctx.rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(20):
    opt.zero_grad()
    model(torch.randn(8, 64)).sum().backward()
    opt.step()
distributed.shutdown(wait=True)
raise SystemExit(distributed.end_process(0))
'''


@pytest.mark.slow
def test_two_rank_runs_that_finish_cleanly_exit_0_every_time(tmp_path):
    """The end of `zoo run --nproc 2` (train with DDP, shutdown(wait=True), end_process), 6 two-rank
    launches, two at a time: every rank exits 0. Without end_process (the interpreter's own teardown after
    destroy_process_group) the same program aborted 7 of 30 torchrun launches on a 2-core machine
    ("terminate called without an active exception", a rank's exit -6), so 6 launches catch that
    regression 4 times in 5 (1 - (23/30)^6); end_process itself is checked exactly by
    test_end_process_after_leaving_the_group_flushes_and_exits_with_the_code_without_teardown. The two ranks
    are started here with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT), without its agent
    process: what exits is the rank's own interpreter either way, and each rank's status is seen directly."""
    script = tmp_path / "two_ranks.py"
    script.write_text(_TWO_RANK_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env = {k: v for k, v in env.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    failures = []
    for _ in range(3):
        procs = []
        for _ in range(2):
            port = str(_free_port())
            procs += [subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True,
                                       env=dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(r),
                                                LOCAL_RANK=str(r), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2"))
                      for r in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=300)
            if p.returncode:
                failures.append((p.returncode, err[-600:]))
    assert not failures, failures
