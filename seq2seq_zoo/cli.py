"""Command line: zoo run | report | list | data | summarize | eval.

Errors in user input (experiment files, data, names) print one clear message and exit with status 2;
``--debug`` shows the traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from seq2seq_zoo.errors import UserError

EXIT_USAGE = 2


def _kind(path, want: str, what: str) -> Path:
    """``path`` must be a file (want="file") or a folder (want="dir") if it exists: a folder given where a
    file is expected (or the reverse) is named as such, not reported as "not found"."""
    p = Path(path)
    if want == "file" and p.is_dir():
        raise UserError(f"{p}: is a folder, but {what} must be a file")
    if want == "dir" and p.exists() and not p.is_dir():
        raise UserError(f"{p}: is a file, but {what} must be a folder")
    return p


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default="results", metavar="DIR", help="results folder (default: ./results)")
    p.add_argument("--debug", action="store_true", help="show full tracebacks")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="zoo", description="seq2seq-zoo: train and compare abstractive summarisation models side by side.",
        epilog="Examples:\n  zoo run experiments/smoke.toml\n  zoo run experiments/pe_ablation.toml --profile cpu\n"
               "  zoo report\n  zoo list\n  zoo data download dialogsum --data-dir data\n"
               "  zoo summarize results/smoke/tiny < dialogue.txt",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    from seq2seq_zoo import __version__
    ap.add_argument("--version", action="version", version=f"seq2seq-zoo {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")

    p = sub.add_parser("run", help="train, evaluate and report every run of an experiment",
                       description="Train and evaluate every run of an experiment file, then write "
                                   "results/<experiment>/ (records, predictions, tables, plots).")
    p.add_argument("experiment", help="experiment TOML file, e.g. experiments/pe_ablation.toml")
    p.add_argument("--profile", default="auto",
                   help="profile of the file to apply: a name, 'none' for full size, or 'auto' (default): "
                        "'cpu' when no GPU is present and the file defines it")
    p.add_argument("--only", nargs="+", metavar="RUN", help="train only these runs (e.g. one per cluster task)")
    p.add_argument("--data-dir", help="folder containing <dataset>/ (else $ZOO_DATA, the file's data_dir, "
                                      "./data, ../shared/data)")
    p.add_argument("--resume", action="store_true", help="continue interrupted runs from their last checkpoint")
    p.add_argument("--force", action="store_true", help="retrain runs that already have results")
    p.add_argument("--dry-run", action="store_true",
                   help="check the file and print each run's settings (profile, like and grid applied; only "
                        "those that differ from the built-in defaults) and what zoo run would do with it "
                        "(train, resume, skip, take over); trains and writes nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--device", help="override train.device (cpu, cuda, cuda:1)")
    p.add_argument("--nproc", type=_positive_int, default=1, metavar="N",
                   help="train with N data-parallel processes on this machine (DistributedDataParallel: gloo "
                        "on CPU, NCCL on GPUs); same global batch and results as one process. Several machines: "
                        "torchrun --nnodes ... --nproc-per-node N -m seq2seq_zoo run EXP")
    _add_common(p)

    p = sub.add_parser("report", help="rebuild tables and plots from stored run records (no training)")
    p.add_argument("experiments", nargs="*", help="experiment names or folders (default: all under --results)")
    _add_common(p)

    p = sub.add_parser("power", help="per judged finding: the effect, the seed sd and the seeds for ~80%% power "
                       "(reads findings.json under --results; writes <results>/seed_plan.json)")
    p.add_argument("--power", type=float, default=0.8, help="target power (default 0.8)")
    _add_common(p)

    p = sub.add_parser("list", help="list registered models, datasets, metrics, schedules, objectives")
    p.add_argument("what", nargs="?", default="all",
                   choices=["all", "models", "datasets", "metrics", "schedules", "objectives"])
    p.add_argument("--pattern", default="*", help="glob filter on names, e.g. 'trans*'")
    p.add_argument("--debug", action="store_true")

    p = sub.add_parser("data", help="download corpora or show where the data is looked for")
    dsub = p.add_subparsers(dest="data_cmd", metavar="ACTION")
    d = dsub.add_parser("download", help="fetch the official files with sha256 checks")
    d.add_argument("name", help="dataset name (dialogsum, samsum, gigaword, ...)")
    d.add_argument("--data-dir", default=None, help="target folder (default: $ZOO_DATA or ./data)")
    d.add_argument("--mirror", help="base URL of a mirror (also $ZOO_DATA_MIRROR)")
    d.add_argument("--force", action="store_true", help="re-download files whose checksum is wrong")
    d.add_argument("--debug", action="store_true")
    d = dsub.add_parser("info", help="where a dataset is found, its split sizes and the fields used",
                        description="Read every split of a dataset and show where it was found, the files, "
                                    "the split sizes (and rows skipped), the fields used, and for inshorts the "
                                    "split draw. NAME is a dataset name or an experiment file (then its first "
                                    "run's dataset and data options are used).",
                        epilog="Examples:\n  zoo data info cnn_dailymail --option cnn_only=true --option max_highlights=2\n"
                               "  zoo data info inshorts\n  zoo data info experiments/cnn_pointer.toml --profile cpu\n"
                               "  zoo data info jsonl --option train=a.jsonl --option validation=b.jsonl "
                               "--option test=c.jsonl --option source=text --option target=summary",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("name", help="dataset name (zoo list datasets) or experiment file")
    d.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a data.options entry (TOML value; a bare word is a string); repeatable")
    d.add_argument("--profile", default="auto", help="with an experiment file: as for `zoo run`")
    d.add_argument("--data-dir")
    d.add_argument("--debug", action="store_true")

    p = sub.add_parser("summarize", help="summarise text (stdin, --file, or many with --input) with a trained run",
                       description="Without --input: the whole of stdin (or --file) is one text. With --input: "
                                   "one text per line (a JSON object's --field, or the line itself), summarised "
                                   "in batches; one JSON object per line to --output (default: stdout).")
    p.add_argument("run_dir", help="a run folder (e.g. results/smoke/tiny) or a folder written by `zoo export`")
    p.add_argument("--file", help="input text file (default: stdin)")
    p.add_argument("--input", metavar="FILE", help="many texts: a .jsonl file or plain lines ('-': stdin)")
    p.add_argument("--output", metavar="FILE", help="with --input: where the jsonl goes (default: stdout)")
    p.add_argument("--field", help="with --input: the JSON key holding the text (default: the first of text, "
                                   "source, dialogue, document that is present)")
    p.add_argument("--batch-size", type=_positive_int, default=16, help="texts per batch (default: 16)")
    p.add_argument("--checkpoint", default="best.pt", help="of a run folder: best.pt (default), last.pt, averaged.pt")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--beam-size", type=_positive_int, help="beam size (default: the run's decode.beam_size)")
    p.add_argument("--max-len", type=_positive_int, help="maximum summary length in tokens")
    p.add_argument("--debug", action="store_true")

    p = sub.add_parser("export", help="write a trained run as a self-contained model folder (safetensors, "
                                      "config, vocabulary, model card)")
    p.add_argument("run_dir", help="a run folder, e.g. results/smoke/tiny")
    p.add_argument("out", help="the folder to write (new or empty, or an earlier export)")
    p.add_argument("--checkpoint", default="best.pt", help="best.pt (default), last.pt or averaged.pt")
    p.add_argument("--debug", action="store_true")

    p = sub.add_parser("average", help="average the weights of a run's last N epoch checkpoints",
                       description="Writes RUN/checkpoints/averaged.pt, the mean of the last N epochs' weights "
                                   "(kept by runs trained with train.average_last >= N). Use it with `zoo export "
                                   "RUN OUT --checkpoint averaged.pt` or `zoo summarize RUN --checkpoint averaged.pt`.")
    p.add_argument("run_dir")
    p.add_argument("--last", type=_positive_int, required=True, metavar="N")
    p.add_argument("--debug", action="store_true")

    p = sub.add_parser("params", help="trainable parameters per component for every run of an experiment",
                       description="Build every run's model (no training) on the real vocabulary and print "
                                   "its trainable parameters per component (embedding, encoder, decoder, output).")
    p.add_argument("experiment")
    p.add_argument("--profile", default="auto", help="as for `zoo run`")
    p.add_argument("--data-dir")
    p.add_argument("--debug", action="store_true")

    p = sub.add_parser("eval", help="re-score a run's predictions.jsonl, or re-decode its best checkpoint (--decode)",
                       description="Without --decode: re-score RUN_DIR/predictions.jsonl and print the scores. "
                                   "With --decode: decode the run's best checkpoint again with changed decoding "
                                   "settings (no retraining), score the evaluation split (and the training "
                                   "sample if the run has eval.train_sample), write RUN_DIR/decodes/NAME/ and "
                                   "rebuild the experiment's report, where it appears as a row (run x decode).",
                       epilog="Example:\n  zoo eval results/dialogsum_transformer/strong-seed1 "
                              "--decode beam_size=8,length_penalty=1.0 --name beam8_lp1",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--metrics", nargs="+", default=None,
                   help="metrics to re-score with (default: rouge); not with --decode, which scores with the "
                        "run's eval.metrics")
    p.add_argument("--save", action="store_true",
                   help="with --metrics: keep those metrics' scores with the run and each of its decodes/ "
                        "variants, test split and training sample (their records and scores.jsonl, scored "
                        "with the run's own metric settings), and rebuild its experiment's tables, e.g. "
                        "BERTScore for a run trained where its backbone could not be read")
    p.add_argument("--decode", metavar="KEY=VALUE,...",
                   help="decode.* settings to change, e.g. beam_size=8,length_penalty=1.0,"
                        "length_penalty_style=hf,no_repeat_ngram=3,repetition_penalty=1.2,min_len=10,"
                        "method=greedy")
    p.add_argument("--rouge-unk", choices=("match", "strip"), default=None,
                   help="re-scoring only: how ROUGE treats a predicted <unk> (match: like any word, so it "
                        "scores against a reference's UNK; strip: removed first); default: match")
    p.add_argument("--name", help="name of this decoding in tables (default: made from the settings)")
    p.add_argument("--data-dir", help="folder containing <dataset>/ (default: where the run found it)")
    p.add_argument("--device", help="decode on this device (cpu, cuda); default: the run's train.device")
    p.add_argument("--force", action="store_true", help="decode again even if NAME was already decoded; with "
                                                         "--save, score again what already holds the metrics")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the full record of scores and settings as JSON")
    p.add_argument("--debug", action="store_true")

    p = sub.add_parser("tune", help="score a grid of decoding settings on the validation split of a finished run",
                       description="Decode the VALIDATION split of a finished run's best checkpoint once per "
                                   "combination of the --grid values (decode.* settings changed from the run's "
                                   "own) and print validation ROUGE per combination, best first. Writes nothing "
                                   "into the run: choose the decoding here, then decode the test split with "
                                   "`zoo eval RUN --decode ...` or the experiment file.",
                       epilog="Example:\n  zoo tune results/dialogsum_transformer/strong-seed1 "
                              "--grid beam_size=1,4 length_penalty=0.6,1.0",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--grid", nargs="+", required=True, metavar="KEY=V1,V2,...",
                   help="decode.* settings and the values to try, e.g. beam_size=1,4 length_penalty=0.6,1.0")
    p.add_argument("--max-examples", type=_positive_int, default=None,
                   help="score the first N validation examples only (default: all after data.max_valid)")
    p.add_argument("--data-dir", help="folder containing <dataset>/ (default: where the run found it)")
    p.add_argument("--device", help="decode on this device (cpu, cuda); default: the run's train.device")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--debug", action="store_true")

    p = sub.add_parser("bench", help="training and decoding throughput against a Hugging Face BART peer",
                       description="Measure in one process, on random batches of the seed Transformer's shape (batch 32,\n"
                                   "source 256, target 64, vocabulary 15,000):\n"
                                   "  - training tokens/s of our Transformer and of a Hugging Face BART of the same shape\n"
                                   "    (fp32 and bf16), and of our GRU, Bahdanau, BiLSTM and pointer-generator models;\n"
                                   "  - beam-4 decoding tokens/s of both, and our decoding time against beam size 1/2/4/8;\n"
                                   "  - the recurrent models' fast implementation against impl = \"reference\";\n"
                                   "  - with eole 0.6.4 installed (optional), training against its closest Transformer,\n"
                                   "    GRU and attention models (it has no pointer-generator);\n"
                                   "  - the time to score 1,000 summaries with ROUGE and with BERTScore;\n"
                                   "  - estimated model FLOP/s against a matmul peak measured in the same run; peak memory;\n"
                                   "  - bounds: the highest decoding ratio against HF, and recurrent fast / reference\n"
                                   "    speed-up, that the matmul rate (a product timed among the calls) allows;\n"
                                   "  - epoch time at 25/50/100% of DialogSum (pe_ablation CPU profile).\n"
                                   "Prints whether the speed targets are met (training >= 1.5x the peer, fp32 >= 1x, beam-4\n"
                                   "decoding >= 3x, an epoch < 5 min, the bench < 5 min); writes OUT/bench.json and\n"
                                   "OUT/README.md.\n"
                                   "Compared models are timed interleaved: the ratios are the headline, absolute\n"
                                   "figures vary on shared machines.",
                       epilog="Examples:\n  zoo bench\n  zoo bench --quick --skip-scaling\n"
                              "  zoo bench --device cuda --out results/bench_gpu",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer warm-up and timed iterations (same shapes)")
    p.add_argument("--device", choices=["cpu", "cuda"], action="append",
                   help="measure on this device (repeatable; default: cpu, plus cuda if present)")
    p.add_argument("--out", default="results/bench", metavar="DIR", help="output folder (default: results/bench)")
    p.add_argument("--skip-scaling", action="store_true",
                   help="skip the epoch-time scaling on DialogSum (needs the data)")
    p.add_argument("--full-epoch", action="store_true",
                   help="time complete epochs for the scaling figures instead of sampled updates (minutes)")
    p.add_argument("--compile", action="store_true",
                   help="also time our Transformer's training step under torch.compile (compiling takes minutes)")
    p.add_argument("--threads", type=_positive_int, metavar="N",
                   help="torch CPU threads (default: torch's, lowered to the cores other processes leave free)")
    p.add_argument("--data-dir", help="folder containing dialogsum/ (default: the usual search)")
    p.add_argument("--debug", action="store_true")
    for name in ("run", "report", "list", "summarize", "params", "eval"):  # user models from outside the package
        sub.choices[name].add_argument(
            "--models", action="append", metavar="PATH", default=[],
            help="import this model file or folder first (repeatable; its @register_model classes become "
                 "usable by name; see docs/extending-models.md)")
    return ap


def _passive_openmp_when_busy() -> None:
    """On a machine whose other processes already keep the cores busy, OpenMP threads that spin while
    waiting at a barrier steal the core from the sibling they wait for: measured on 2 shared cores
    (load 4-5), a training step of the pe_ablation CPU profile took 5.0 s with torch's 2 threads, 0.65 s
    with OMP_WAIT_POLICY=PASSIVE (same threads, same numbers) and 0.58 s with 1 thread. So when the
    1-minute load average already exceeds half a core, waiting threads sleep instead of spinning. Must
    run before torch is imported; an explicit OMP_WAIT_POLICY is left alone."""
    if "OMP_WAIT_POLICY" in os.environ or "torch" in sys.modules or not hasattr(os, "getloadavg"):
        return
    try:
        if os.getloadavg()[0] > 0.5:
            os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    except OSError:
        pass


def _changed_settings(spec, rec_path: Path) -> list[str]:
    """The settings in which a finished run's record differs from ``spec`` (``reuse.drift``); none for a
    record that does not read (the report names damaged files)."""
    from seq2seq_zoo import reuse
    from seq2seq_zoo.errors import DamagedFile
    from seq2seq_zoo.results import read_record
    try:
        return reuse.drift(spec.to_dict(), read_record(rec_path))
    except (DamagedFile, OSError):
        return []


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed memory for reuse: buffers up to 32 MiB come from the heap (not a fresh
    mmap each time), and up to 1 GiB freed at the heap's top stays mapped (256 MiB of padding per growth).
    A training step allocates and frees the same large buffers (logits blocks, activations) every time;
    with glibc's defaults many return to the system and the next step pays first-touch page faults on them.
    Measured at the bench shape on 1 thread (AVX512-BF16 VM, loaded; A/B in separate processes): a `bilstm`
    step 3.36-3.59 -> 2.72-2.99 s in bf16 and 6.53-6.71 -> 5.52-5.60 s in fp32, the Transformer's 2.66-2.76 ->
    2.46-2.49 s in bf16 and ~1.02x in fp32; peak RSS +10%. Allocation only: the numbers computed are the same.
    ``ZOO_MALLOC=default`` keeps glibc's settings; a no-op where libc is not glibc. Returns whether it applied."""
    if os.environ.get("ZOO_MALLOC", "").lower() == "default" or not sys.platform.startswith("linux"):
        return False
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3      # malloc.h
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 1 << 30)
                    and libc.mallopt(m_top_pad, 256 << 20))
    except (OSError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> int:
    code = _main(argv)
    # a torchrun worker that was in a process group ends right here (see distributed.end_process); the
    # module is looked up rather than imported, so that commands that never load torch stay quick
    ddp = sys.modules.get("seq2seq_zoo.train.distributed")
    return ddp.end_process(code) if ddp is not None else code


def _main(argv: list[str] | None) -> int:
    _passive_openmp_when_busy()
    keep_freed_memory()
    ap = build_parser()
    args = ap.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    if not args.cmd:
        ap.print_help()
        return EXIT_USAGE
    if getattr(args, "no_progress", False):
        _no_progress_anywhere()
    old_term = _sigterm_like_ctrl_c()
    try:
        if getattr(args, "models", None):  # before the experiment is read: its model names must be known
            from seq2seq_zoo.registry import load_models
            load_models(args.models)
        return {"run": cmd_run, "report": cmd_report, "list": cmd_list, "data": cmd_data,
                "summarize": cmd_summarize, "eval": cmd_eval, "params": cmd_params, "bench": cmd_bench,
                "tune": cmd_tune, "export": cmd_export, "average": cmd_average,
                "power": cmd_power}[args.cmd](args) or 0
    except BrokenPipeError:  # stdout closed early (zoo run EXP --dry-run | head): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that flushing at exit does not raise again
        return 141  # 128 + SIGPIPE, what the shell reports for a command killed by it
    except KeyboardInterrupt as e:
        from seq2seq_zoo.errors import EXIT_PREEMPTED, Preempted
        term = isinstance(e, Preempted)
        code = EXIT_PREEMPTED if term else 130
        if os.environ.get("RANK", "0") != "0":
            return code  # a DDP worker other than rank 0: rank 0 says how to resume
        what = "stopped by SIGTERM (pre-emption or a time limit)" if term else "interrupted"
        if args.cmd == "run":
            argv_ = [a for a in (argv if argv is not None else sys.argv[1:]) if a not in ("--resume", "--force")]
            print(f"\n{what}. Training state up to the last checkpoint is kept; continue with:\n"
                  f"  zoo {' '.join(argv_)} --resume", file=sys.stderr)
        else:
            print(f"\n{what}", file=sys.stderr)
        return code
    except (UserError, FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:  # one clear message
        if getattr(args, "debug", False):
            raise
        print(f"zoo {args.cmd}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:  # a read-only results folder (or file) the command must write to: one line too
        import errno
        if getattr(args, "debug", False) or e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        print(f"zoo {args.cmd}: error: {e.filename or 'a file'}: {e.strerror} (the command writes there); make "
              "the folder writable or choose another (e.g. --results DIR); files written before are kept as they are",
              file=sys.stderr)
        return EXIT_USAGE
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def _no_progress_anywhere() -> None:
    """--no-progress: also the bars of libraries (BERTScore's weight loading in transformers and the
    Hugging Face hub, any other tqdm bar left at its default)."""
    os.environ["TQDM_DISABLE"] = "1"                    # tqdm >= 4.66: the default of ``disable``
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"    # read by huggingface_hub and transformers
    hub = sys.modules.get("huggingface_hub.utils")
    if hub is not None and hasattr(hub, "disable_progress_bars"):
        hub.disable_progress_bars()
    tf = sys.modules.get("transformers.utils.logging")
    if tf is not None and hasattr(tf, "disable_progress_bar"):
        tf.disable_progress_bar()


def _sigterm_like_ctrl_c():
    """SIGTERM (what cluster schedulers send before killing a job) raises ``Preempted``, a
    KeyboardInterrupt: the command stops the way Ctrl-C stops it (training finishes the current update
    and writes last.pt first), and exits with status 143. Returns the previous handler (None when not
    installed: not the main thread, or a handler other than the default is in place)."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return None

    def on_term(signum, frame):
        from seq2seq_zoo.errors import Preempted
        raise Preempted()
    return signal.signal(signal.SIGTERM, on_term)


# ----------------------------------------------------------------------------------------------- run
def cmd_run(args) -> int:

    from seq2seq_zoo import reuse
    from seq2seq_zoo.config import load_experiment
    from seq2seq_zoo.report import build_report
    from seq2seq_zoo.runner import run
    from seq2seq_zoo.train import distributed

    if getattr(args, "dry_run", False):
        return _dry_run(args)
    if args.nproc > 1 and not distributed.launched():
        return distributed.launch(args.nproc, args.argv)  # torchrun re-runs this command in N workers
    ddp = distributed.setup()  # a torchrun worker joins its process group; None in one process
    from seq2seq_zoo.utils import process_code_version
    process_code_version()     # the commit of the code imported now, for every run's record
    profile, exp = _experiment_of(args)
    from seq2seq_zoo.names import inside
    exp_dir = inside(args.results, exp.name)  # resolves inside --results, before anything is written
    for s in exp.runs:
        inside(exp_dir, s.name)
    new_exp_dir = not exp_dir.exists()  # then a failure before any run wrote something leaves nothing behind
    if ddp is None or ddp.is_main:  # the file's [[findings]], judged by every report of this folder
        from seq2seq_zoo.report.significance import write_declared
        exp_dir.mkdir(parents=True, exist_ok=True)
        write_declared(exp_dir, load_experiment(args.experiment, profile=profile) if args.only else exp)
    locks = distributed.on_main(lambda: _acquire_locks([exp_dir / s.name for s in exp.runs]), default=[])
    finished = False  # a clean finish, or a stop every rank agreed on: DDP ranks leave the group together
    try:
        t0 = time.perf_counter()
        names = [s.name for s in exp.runs]
        # a run's place in the tables is its place in the file, also when --only trains a subset
        order = [s.name for s in load_experiment(args.experiment, profile=profile).runs] if args.only else names
        print(f"experiment {exp.name}: {len(exp.runs)} run(s): {', '.join(names)}"
              + (f" [profile {profile}]" if profile else ""))
        for i, spec in enumerate(exp.runs):
            out = exp_dir / spec.name
            rec = out / "record.json"
            action, found = _plan(spec, out, args)
            if action == "done":
                changed = found
                if changed:
                    print(f"[{spec.name}] already done ({rec}), but with other settings than this file gives now "
                          f"(file vs record: {'; '.join(changed[:4])}{'; ...' if len(changed) > 4 else ''}): "
                          "kept as it is, and the tables say so; retrain it with --force")
                else:
                    print(f"[{spec.name}] already done ({rec}); skipping (use --force to retrain)")
                continue
            all_order = order.index(spec.name)
            cmd = "zoo " + " ".join(sys.argv[1:]) if sys.argv and sys.argv[0].endswith("zoo") else None
            if action == "take_over":  # the same run, finished by another experiment: take it over, do not retrain
                src = found
                if ddp is None or ddp.is_main:
                    record = reuse.take_over(spec, src, out, order=all_order, command=cmd)
                    print(f"[{spec.name}] same_as {spec.same_as}: took over {src} (identical settings; not "
                          f"trained again): ROUGE-1 {record['eval']['scores'].get('rouge1', 0):.2f}")
                continue
            if spec.same_as:
                print(f"[{spec.name}] same_as {spec.same_as}: no finished run for seed {spec.seed} under "
                      f"{args.results}; training it here")
            if action == "refuse":
                raise UserError(f"run '{spec.name}' has an unfinished checkpoint in {out / 'checkpoints'}; "
                                f"continue it with --resume, or start again with --force")
            if args.force and not args.resume:
                for f in ("last.pt", "best.pt"):
                    (out / "checkpoints" / f).unlink(missing_ok=True)
            record = run(spec, out, data_dir=args.data_dir, resume=args.resume, progress=not args.no_progress,
                         order=all_order, command=cmd)
            if record is None:  # DDP rank > 0: rank 0 writes the results
                continue
            sc = record["eval"]["scores"]
            print(f"[{spec.name}] done in {record['wall_seconds']:.0f}s: ROUGE-1 {sc.get('rouge1', 0):.2f} "
                  f"ROUGE-2 {sc.get('rouge2', 0):.2f} ROUGE-L {sc.get('rougeL', 0):.2f}")
        if ddp is not None and not ddp.is_main:
            finished = True
            return 0
        _decode_sweep(exp, exp_dir, args)
        paths = build_report(exp_dir)
        from seq2seq_zoo.report.significance import write_findings_index
        index = write_findings_index(Path(args.results))
        paths += [index] if index else []
        print(f"wrote {', '.join(str(p) for p in paths)} in {time.perf_counter() - t0:.0f}s")
        finished = True
    except KeyboardInterrupt as e:
        # Ctrl-C / SIGTERM in training: every rank stopped at the same update (rank 0 writing last.pt),
        # so they can wait for each other before leaving, as after a clean finish; elsewhere (e.g. a
        # Ctrl-C while decoding reached one rank only) no rank waits for the others
        finished = bool(getattr(e, "together", False))
        raise
    finally:
        for lock in locks:
            lock.unlink(missing_ok=True)
            for d in (lock.parent, lock.parent.parent):  # folders the lock made, if nothing else was written
                try:
                    d.rmdir()
                except OSError:
                    break
        if new_exp_dir and exp_dir.is_dir() and not any(p.is_dir() for p in exp_dir.iterdir()):
            from seq2seq_zoo.report.significance import EXPERIMENT_FILE
            (exp_dir / EXPERIMENT_FILE).unlink(missing_ok=True)  # e.g. bad data settings: nothing was run
            try:
                exp_dir.rmdir()
            except OSError:
                pass
        distributed.shutdown(wait=finished)
    return 0


def _experiment_of(args):
    """zoo run's experiment: the paths checked, the file read with its profile, ``--only`` and ``--device``
    applied. Returns (profile, experiment)."""
    from seq2seq_zoo.config import load_experiment
    _kind(args.experiment, "file", "the experiment (a TOML file)")
    _kind(args.results, "dir", "--results")
    if args.data_dir:
        _kind(args.data_dir, "dir", "--data-dir (the folder containing <dataset>/)")
    profile = _profile(args)
    exp = load_experiment(args.experiment, profile=profile, only=args.only)
    if args.device:
        for s in exp.runs:
            s.train.device = args.device
    return profile, exp


def _plan(spec, out: Path, args) -> tuple[str, Any]:
    """What ``zoo run`` does with one run folder before training, and what it found: ("done", the settings
    in which its record differs from the file) for a finished run without --force; ("take_over", the source
    folder) for a same_as run whose source has finished; ("refuse", None) for an unfinished checkpoint
    without --resume or --force; else ("train", None). ``cmd_run`` acts on it, ``--dry-run`` prints it."""
    from seq2seq_zoo import reuse
    rec = out / "record.json"
    if rec.exists() and not args.force:
        return "done", _changed_settings(spec, rec)
    src = reuse.source_dir(Path(args.results), spec.same_as, spec.seed) if spec.same_as else None
    if src is not None:
        return "take_over", src
    if (out / "checkpoints" / "last.pt").exists() and not (args.resume or args.force):
        return "refuse", None
    return "train", None


def _would_do(spec, exp_dir: Path, args) -> str:
    """``_plan`` in words, for --dry-run; first, whether another ``zoo run`` holds the run's folder now."""
    from seq2seq_zoo.config import is_trainable
    out = exp_dir / spec.name
    pid = _lock_holder(out / ".lock")
    if pid:
        return f"being trained now by another `zoo run` (pid {pid}): zoo run refuses it until that ends"
    action, found = _plan(spec, out, args)
    if action == "done":
        return ("done, skipped" if not found else "done with other settings than the file gives now "
                f"(file vs record: {'; '.join(found[:3])}{'; ...' if len(found) > 3 else ''}), kept; --force retrains it")
    if action == "take_over":
        return f"taken over from {found} (same_as; not trained again)"
    if action == "refuse":
        return "stops: it has an unfinished checkpoint; add --resume (continue) or --force (start again)"
    if (out / "checkpoints" / "last.pt").exists():
        return "resumed from its checkpoint" if args.resume else "trained again from the start (--force)"
    verb = "trained" if is_trainable(spec.model) else "evaluated (a baseline: nothing to train)"
    return f"{verb} again (--force)" if (out / "record.json").exists() else verb


def _dry_run(args) -> int:
    """zoo run EXP --dry-run: the runs as the file, profile, ``like`` and grid make them, the settings in
    which they differ from the built-in defaults (runs that differ only in seed share one block), and what a
    real ``zoo run`` with the same flags would do with each. Reads results, writes nothing."""
    from seq2seq_zoo.config import settings, toml_value
    profile, exp = _experiment_of(args)
    exp_dir = Path(args.results) / exp.name
    print(f"experiment {exp.name} ({args.experiment}), profile {profile or 'none (full size)'}: {len(exp.runs)} "
          f"run(s), results in {exp_dir}/. Dry run: nothing is trained or written. Each run's settings that "
          "differ from the built-in defaults (model constructor, seq2seq_zoo/config.py):")
    groups: dict[str, tuple[dict, list]] = {}   # runs with the same settings (seeds of one run): one block
    for spec in exp.runs:
        own = settings(spec)
        groups.setdefault(json.dumps(own, sort_keys=True, default=str), (own, []))[1].append(spec)
    for own, specs in groups.values():
        print(f"\n{', '.join(s.name for s in specs)}")
        for s in specs:
            print(f"  seed {s.seed}: {_would_do(s, exp_dir, args)}")
        for k, v in own.items():
            print(f"  {k} = {toml_value(v)}")
    if exp.decodes:
        print(f"\ndecoding sweep of every trained run's best checkpoint: {', '.join(d.name for d in exp.decodes)}")
    if exp.findings:
        print(f"findings judged: {'; '.join(f.claim for f in exp.findings)}")
    return 0


def _decode_sweep(exp, exp_dir: Path, args) -> None:
    """[[decode]] entries: re-decode every finished run's best checkpoint with each entry's settings
    (entries already decoded from the same checkpoint with the same settings are skipped)."""
    if not exp.decodes:
        return
    from seq2seq_zoo.evaluation import run_decodes
    cmd = "zoo " + " ".join(sys.argv[1:]) if sys.argv and sys.argv[0].endswith("zoo") else None
    for spec in exp.runs:
        if (exp_dir / spec.name / "record.json").exists():
            run_decodes(exp_dir / spec.name, [(v.name, v.overrides) for v in exp.decodes], data_dir=args.data_dir,
                        config_dir=spec.data_dir, device=args.device, progress=not args.no_progress, command=cmd)


def _profile(args) -> str | None:
    """--profile NAME | none | auto (the file's 'cpu' profile when no GPU is present)."""
    if args.profile == "none":
        return None
    if args.profile != "auto":
        return args.profile
    import tomllib

    import torch
    try:
        raw = tomllib.loads(Path(args.experiment).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        raw = {}  # load_experiment reports it properly
    profile = "cpu" if not torch.cuda.is_available() and "cpu" in raw.get("profiles", {}) else None
    if profile:
        print("no GPU found: using the file's 'cpu' profile (pass --profile none for full size)")
    return profile


def _acquire_locks(run_dirs: list[Path]) -> list[Path]:
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
            pid = _lock_holder(lock)
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


def _lock_holder(lock: Path) -> int:
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


# -------------------------------------------------------------------------------------------- report
def cmd_report(args) -> int:
    from seq2seq_zoo.report import build_report
    root = _kind(args.results, "dir", "--results")
    if args.experiments:
        for e in args.experiments:
            if Path(e).is_file() or (root / e).is_file():
                raise UserError(f"{e if Path(e).is_file() else root / e}: is a file, but `zoo report` takes experiment "
                                f"names or folders (e.g. {root / Path(e).stem})")
        dirs = [Path(e) if Path(e).is_dir() else root / e for e in args.experiments]
    else:
        # experiment folders directly under the results folder, and one level down (results written
        # with --results results/<name>, e.g. a second profile of the same experiment)
        subdirs = [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
        subdirs += [q for p in subdirs for q in p.iterdir() if q.is_dir()]
        dirs = sorted(p for p in subdirs if any(p.glob("*/record.json")))
    if not dirs:
        raise UserError(f"no run records found under {root}/; run an experiment first (zoo run EXP)")
    for d in dirs:
        if not any(d.glob("*/record.json")):
            raise UserError(f"{d}: no run records (*/record.json) there")
    # a damaged run (or a whole experiment whose every record is damaged) is named and left out; the
    # rest is reported; the exit status (2) then says that something was left out
    from seq2seq_zoo.errors import DamagedFile
    problems: list[str] = []
    for d in dirs:
        try:
            paths = build_report(d, warn=problems.append)
        except DamagedFile as e:
            if str(e) not in problems:
                problems.append(str(e))
            continue
        print(f"{d}: wrote {', '.join(p.name for p in paths)}")
    from seq2seq_zoo.report.significance import write_findings_index
    index = write_findings_index(root, warn=problems.append)
    if index:
        print(f"wrote {index}")
    from seq2seq_zoo.report.leaderboard import write_leaderboard   # results/LEADERBOARD.md (+ README headline)
    for path in write_leaderboard(root, readme=Path("README.md") if root.resolve() == Path("results").resolve() else None):
        print(f"wrote {path}")
    for msg in problems:
        print(f"zoo report: error: {msg} (left out of the report)", file=sys.stderr)
    return EXIT_USAGE if problems else 0


# --------------------------------------------------------------------------------------------- power
def cmd_power(args) -> int:
    """Seeds each current finding would need: from the judged findings (``zoo report`` writes them), the
    observed difference, the seed sd and the seeds per arm for the target power of the seed-level
    t-test (noncentral t), printed and written to <results>/seed_plan.json."""
    import json
    from seq2seq_zoo import stats
    from seq2seq_zoo.report.significance import ARCHIVE, FINDINGS_FILE
    from seq2seq_zoo.utils import atomic_write_text
    root = _kind(args.results, "dir", "--results")
    if not 0 < args.power < 1:
        raise UserError(f"--power {args.power}: expected a number between 0 and 1, e.g. 0.8")
    files = sorted(set(root.glob(f"*/{FINDINGS_FILE}")) | set(root.glob(f"*/*/{FINDINGS_FILE}")))
    if not files:
        raise UserError(f"no judged findings under {root}/ (*/{FINDINGS_FILE}); run `zoo report` first")
    plan = []
    for f in files:
        exp = f.parent.relative_to(root).as_posix()
        if exp.startswith(ARCHIVE):
            continue
        try:
            judged = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            raise UserError(f"{f}: damaged findings file; run `zoo report {exp}` to rewrite it") from None
        for j in judged:
            pw = j.get("power") or {}
            sd, eff = pw.get("seed_sd"), pw.get("effect")
            d = abs(eff) / sd if eff is not None and sd and sd == sd and sd > 0 else None
            one = bool(pw.get("one_sample"))   # against a deterministic run, or matched seeds
            ns = [n for n in (j.get("n_a"), j.get("n_b")) if n]
            n_now = (max(ns) if one else min(ns)) if ns else 0
            need = stats.seeds_for_power(d, args.power, one_sample=one) if d else None
            plan.append({"experiment": exp, "claim": j["claim"], "metric": j.get("metric"), "verdict": j["verdict"],
                         "seeds": [j.get("n_a"), j.get("n_b")], "effect": eff, "seed_sd": sd,
                         "standardised_effect": d, "power_now": stats.power(n_now, d, one_sample=one) if d else None,
                         "seeds_for_power": need, "target_power": args.power})
    def num(x, f="{:.3f}"):
        return "-" if x is None or x != x else f.format(x)
    print(f"{'experiment':32} {'claim':48} {'seeds':>7} {'effect':>8} {'seed sd':>8} {'power':>6} {'seeds for':>9}")
    for r in plan:
        seeds = "v".join("-" if n is None else str(n) for n in r["seeds"])
        need = "-" if r["seeds_for_power"] is None else str(r["seeds_for_power"])
        print(f"{r['experiment'][:32]:32} {r['claim'][:48]:48} {seeds:>7} {num(r['effect'], '{:.4g}'):>8} "
              f"{num(r['seed_sd'], '{:.4g}'):>8} {num(r['power_now'], '{:.2f}'):>6} {need:>9}")
    out = root / "seed_plan.json"
    atomic_write_text(out, json.dumps({"target_power": args.power, "alpha": stats.ALPHA, "test": "two-sided t over "
                                       "seed means (Welch; one-sample against a deterministic baseline; paired for "
                                       "matched seeds), power from the noncentral t with the observed seed sd",
                                       "findings": plan}, indent=1) + "\n")
    print(f"wrote {out} (seeds per arm for {args.power:.0%} power; '-': no seed sd to plan with, e.g. one seed)")
    return 0


# ---------------------------------------------------------------------------------------------- list
def cmd_list(args) -> int:
    from seq2seq_zoo.registry import DATASETS, METRICS, MODELS, OBJECTIVES, SCHEDULES
    regs = {"models": MODELS, "datasets": DATASETS, "metrics": METRICS, "schedules": SCHEDULES,
            "objectives": OBJECTIVES}
    for kind, reg in regs.items():
        if args.what not in ("all", kind):
            continue
        print(f"{kind}:")
        for n in reg.names(args.pattern):
            print(f"  {n:<20} {reg.doc(n)}")
            if kind == "datasets":  # data.options of the reader, with defaults
                from seq2seq_zoo.data.corpora import reader_options
                opts = reader_options(n)
                if opts:
                    print(f"  {'':<20} options: " + ", ".join(f"{k}={d!r}" for k, (d, _) in opts.items()))
    return 0


# ---------------------------------------------------------------------------------------------- data
def cmd_data(args) -> int:
    if args.data_cmd == "download":
        from seq2seq_zoo.data.download import download
        target = args.data_dir or os.environ.get("ZOO_DATA") or "data"
        _kind(target, "dir", "the data folder")
        paths = download(args.name, target, mirror=args.mirror, force=args.force)
        print(f"{args.name}: {len(paths)} file(s) in {Path(target) / args.name}")
        return 0
    if args.data_cmd == "info":
        return _data_info(args)
    raise UserError("usage: zoo data download NAME | zoo data info NAME")


def _data_info(args) -> int:
    """zoo data info NAME|EXPERIMENT: where the data was found, files, split sizes, fields, split draw."""
    import tomllib

    from seq2seq_zoo.data.corpora import (ReadStats, check_options, describe_source, load_split, reader_options,
                                          resolve_data_dir, uses_data_dir)
    from seq2seq_zoo.registry import DATASETS
    name, options, on_bad, config_dir = args.name, {}, "skip_empty", None
    if args.data_dir:
        _kind(args.data_dir, "dir", "--data-dir (the folder containing <dataset>/)")
    if name.endswith(".toml"):
        from seq2seq_zoo.config import load_experiment
        args.experiment = name
        spec = load_experiment(name, profile=_profile(args)).runs[0]
        name, options, on_bad, config_dir = spec.data.dataset, dict(spec.data.options), spec.data.on_bad, spec.data_dir
    DATASETS.get(name)  # unknown name: did-you-mean
    for item in args.option:
        if "=" not in item:
            raise UserError(f"--option {item!r}: expected KEY=VALUE, e.g. --option cnn_only=true")
        k, v = (x.strip() for x in item.split("=", 1))
        try:
            options[k] = tomllib.loads(f"v = {v}")["v"]
        except tomllib.TOMLDecodeError:
            options[k] = v
    from seq2seq_zoo.config import option_type_problem
    bad = option_type_problem(name, options) or check_options(name, options)
    if bad:
        raise UserError(f"data option '{bad[0]}': {bad[1]} (options of '{name}': "
                        f"{', '.join(reader_options(name)) or 'none'}; give them with --option KEY=VALUE or name "
                        "an experiment file)")
    root = resolve_data_dir(name, args.data_dir, config_dir, options)
    where = describe_source(name, root, options) if uses_data_dir(name, options) else "the files named in its options"
    print(f"{name}: found in {where}" + (f"  (options: {options})" if options else ""))
    notes = {}
    for split in ("train", "validation", "test"):
        st = ReadStats()
        ex = load_split(name, root, split, on_bad, stats=st, options=options)
        print(f"  {split:<10} {len(ex):>7} examples" + (f"  skipped {st.skipped}" if st.skipped else ""))
        for f in st.notes.get("files", []):
            print(f"             from {f}")
        notes = st.notes
    for key in ("fields", "filter", "encoding"):
        if key in notes:
            val = notes[key]
            print(f"  {key}: " + ("; ".join(f"{k} = {v}" for k, v in val.items()) if isinstance(val, dict) else str(val)))
    if "split" in notes:
        sp = notes["split"]
        print(f"  split draw: {sp['draw']}; seed {sp['seed']}, fractions {sp['fractions']} of {sp['rows_in_file']} rows")
    return 0


# ----------------------------------------------------------------------------------------- summarize
def cmd_summarize(args) -> int:
    from seq2seq_zoo.inference import Summarizer
    _kind(args.run_dir, "dir", "the run (a folder such as results/smoke/tiny)")
    if args.file:
        _kind(args.file, "file", "--file (the text to summarise)")
        if not Path(args.file).exists():
            raise UserError(f"{args.file}: file not found (--file)")
    if (Path(args.run_dir) / "record.json").is_file():
        from seq2seq_zoo.results import read_record
        rec = read_record(Path(args.run_dir) / "record.json")
        if rec.get("baseline"):
            what = rec["baseline"].get("describe") if isinstance(rec["baseline"], dict) else None
            raise UserError(f"{args.run_dir}: run '{rec['run']}' is an extractive baseline ({what or rec.get('model')}) "
                            "with no trained model to summarise with; give a trained run of the experiment instead "
                            "(its tables list them)")
    if args.input:
        return _summarize_many(args)
    if args.output:
        raise UserError("--output goes with --input (many texts, one per line)")
    raw = Path(args.file).read_bytes() if args.file else sys.stdin.buffer.read()
    text = raw.decode("utf-8", errors="replace")
    s = Summarizer.load(args.run_dir, args.checkpoint)
    print(s(text, beam_size=args.beam_size, max_len=args.max_len))
    return 0


_TEXT_FIELDS = ("text", "source", "dialogue", "document")


def _summarize_many(args) -> int:
    """zoo summarize RUN --input FILE [--output OUT]: one text per line, summaries in batches."""
    from seq2seq_zoo.inference import Summarizer
    if args.file:
        raise UserError("--file and --input are alternatives: --file is one text, --input one text per line")
    if args.input == "-":
        lines = sys.stdin.read().splitlines()
    else:
        _kind(args.input, "file", "--input")
        if not Path(args.input).is_file():
            raise UserError(f"{args.input}: file not found (--input)")
        lines = Path(args.input).read_text(encoding="utf-8", errors="replace").splitlines()
    ids, texts = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        obj = None
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{args.input}:{n}: not valid JSON ({e.msg}); give one JSON object or one plain "
                                "text per line") from None
        if obj is None:
            ids.append(str(len(ids)))
            texts.append(line)
            continue
        key = args.field or next((k for k in _TEXT_FIELDS if k in obj), None)
        if key is None or not isinstance(obj.get(key), str):
            raise UserError(f"{args.input}:{n}: no text field " + (f"'{args.field}'" if args.field else
                            f"(looked for {', '.join(_TEXT_FIELDS)})") + f"; keys: {', '.join(obj)}; name it "
                            "with --field")
        ids.append(str(obj.get("id", len(ids))))
        texts.append(obj[key])
    s = Summarizer.load(args.run_dir, args.checkpoint)
    out = s.summarize(texts, batch_size=args.batch_size, beam_size=args.beam_size, max_len=args.max_len,
                      progress=not args.no_progress)
    text = "".join(json.dumps({"id": i, "summary": o}, ensure_ascii=False) + "\n" for i, o in zip(ids, out))
    if args.output:
        from seq2seq_zoo.utils import atomic_write_text
        atomic_write_text(args.output, text)
        print(f"wrote {len(out)} summaries to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_export(args) -> int:
    from seq2seq_zoo.export import export_run
    _kind(args.run_dir, "dir", "the run (a folder such as results/smoke/tiny)")
    _kind(args.out, "dir", "the export folder")
    export_run(args.run_dir, args.out, checkpoint=args.checkpoint)
    return 0


def cmd_average(args) -> int:
    from seq2seq_zoo.averaging import average_run
    _kind(args.run_dir, "dir", "the run (a folder such as results/smoke/tiny)")
    average_run(Path(args.run_dir), args.last)
    return 0


# -------------------------------------------------------------------------------------------- params
def cmd_params(args) -> int:
    import torch

    from seq2seq_zoo.config import load_experiment
    from seq2seq_zoo.models.base import build_model, count_parameters, model_context
    from seq2seq_zoo.report.tables import params_table, to_markdown
    from seq2seq_zoo.runner import prepare_data

    _kind(args.experiment, "file", "the experiment (a TOML file)")
    exp = load_experiment(args.experiment, profile=_profile(args))
    rows, vocabs = [], {}
    for spec in exp.runs:
        key = repr(spec.data)
        if key not in vocabs:  # runs sharing data settings share the vocabulary
            vocabs[key] = len(prepare_data(spec, args.data_dir, log=lambda *_: None)[0])
        with torch.device("meta"):
            model = build_model(spec.model, model_context(vocabs[key], spec.data), spec.model_options)
        rows.append({"run": spec.name, "seed": spec.seed, "model": spec.model, "data": {"vocab_size": vocabs[key]},
                     "params": count_parameters(model)})
    print(to_markdown(params_table(rows)), end="")
    return 0


# ---------------------------------------------------------------------------------------------- eval
def cmd_eval(args) -> int:
    from seq2seq_zoo.metrics import evaluate
    from seq2seq_zoo.results import read_predictions
    _kind(args.run_dir, "dir", "the run (a folder such as results/pe_ablation/tmax-seed1)")
    if getattr(args, "data_dir", None):
        _kind(args.data_dir, "dir", "--data-dir (the folder containing <dataset>/)")
    if args.rouge_unk and (args.decode is not None or args.save):
        raise UserError("--rouge-unk goes with plain re-scoring; runs and their variants score with eval.rouge_unk")
    if args.decode is not None:
        if args.save:
            raise UserError("--save goes with --metrics (re-scoring); a re-decoded run (--decode) keeps its scores anyway")
        return _eval_decode(args)
    if args.save:
        if args.name:
            raise UserError("--name goes with --decode (re-decoding); --save keeps re-scored metrics")
        return _eval_save(args)
    if args.name or args.force:
        raise UserError("--name and --force go with --decode (re-decoding) or --save; without them `zoo eval` "
                        "only prints re-scored metrics")
    rows = read_predictions(Path(args.run_dir))
    scores, settings = evaluate([r["prediction"] for r in rows], [r["references"] for r in rows],
                                args.metrics or ["rouge"], rouge_unk=args.rouge_unk or "match")
    if args.json:
        print(json.dumps({"n_examples": len(rows), "scores": scores, "settings": settings}, indent=2))
    else:
        print(_score_summary(len(rows), scores))
    return 0


_SUMMARY_KEYS = (("rouge1", "ROUGE-1"), ("rouge2", "ROUGE-2"), ("rougeL", "ROUGE-L"), ("rougeLsum", "ROUGE-Lsum"),
                 ("bertscore_f1", "BERTScore F1"), ("pred_len", "length"))


def _score_summary(n: int | None, scores: dict) -> str:
    """One line of the main scores (``--json`` prints everything)."""
    parts = [f"{label} {scores[k]:.2f}" for k, label in _SUMMARY_KEYS if scores.get(k) is not None]
    return (f"{n} examples: " if n is not None else "") + ", ".join(parts) + " (--json for every score and setting)"



def _eval_save(args) -> int:
    """zoo eval RUN_DIR --metrics M... --save: score the stored predictions of the run and of each of its
    decoding variants (``decodes/<name>/``) with M, test split and training sample alike, using the run's
    own metric settings (stemmer, BERTScore backbone and layer), and keep the scores with them: each
    record's scores and settings (``rescored`` says when and how), the test split's per-example values in
    scores.jsonl; then rebuild the experiment's report. Everything is scored before anything is written;
    a part that already holds every metric is kept as it is unless ``--force``."""
    from datetime import datetime, timezone

    from seq2seq_zoo.config import RunSpec
    from seq2seq_zoo.results import read_record
    if not args.metrics:
        raise UserError("--save needs --metrics: the metrics to add to the run (e.g. --metrics bertscore)")
    run_dir = Path(args.run_dir)
    spec = RunSpec.from_dict(read_record(run_dir / "record.json")["spec"])
    spec.eval.metrics = list(dict.fromkeys(args.metrics))
    every = [run_dir] + sorted(p.parent for p in (run_dir / "decodes").glob("*/record.json"))
    jobs = [(d, *_rescore(d, spec, args.device or "cpu", args.force)) for d in every]
    for d, _, job in jobs:
        if not job:
            print(f"{d}: already holds {', '.join(spec.eval.metrics)}; kept (--force scores it again)",
                  file=sys.stderr)
    jobs = [(d, rec, job) for d, rec, job in jobs if job]
    if not jobs:
        return 0
    entry = {"metrics": spec.eval.metrics, "command": "zoo " + " ".join(args.argv),
             "when": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    out: dict = {}
    for d, rec, job in jobs:
        _write_rescored(d, rec, job, entry)
        got = {k: v[2] if k == "eval" else v[0] for k, v in job.items()}
        if d == run_dir:
            if "eval" in got:
                out.update(n_examples=len(job["eval"][0]), saved=sorted(got["eval"]), scores=got["eval"])
            if "train_sample" in got:
                out["train_sample"] = got["train_sample"]
        else:
            out.setdefault("decodes", {})[d.name] = got
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        if "scores" in out:
            print(f"{run_dir}: saved {', '.join(out['saved'])}; " + _score_summary(out["n_examples"], out["scores"]))
        for name, got in out.get("decodes", {}).items():
            if "eval" in got:
                print(f"{run_dir}/decodes/{name}: " + _score_summary(None, got["eval"]))
    _rebuild_report(run_dir)
    return 0


def _rescore(folder: Path, spec, device: str, force: bool) -> tuple[dict, dict]:
    """``folder``'s record (a run's or one of its decodes') and the parts of it to score with ``spec``'s
    metrics, scored; nothing is written. "eval": (ids, per-example values with the new metrics merged in, scores, settings) of the
    test split; "train_sample": (scores, settings) of the training sample. A part that already holds every
    metric is left out unless ``force``."""
    from seq2seq_zoo.evaluation import TRAIN_SAMPLE_FILE, score
    from seq2seq_zoo.results import read_predictions, read_record, read_scores
    rec = read_record(folder / "record.json")
    want = set(spec.eval.metrics)
    job = {}
    if force or not want <= set(rec["eval"].get("settings", {})):
        rows = read_predictions(folder)
        ids = [str(r["id"]) for r in rows]
        per: dict[str, list[float]] = {}
        scores, settings = score([r["prediction"] for r in rows], [r["references"] for r in rows], spec, device, per)
        old = read_scores(folder) or {}
        if old and set(old) != set(ids):
            raise UserError(f"{folder / 'scores.jsonl'} and predictions.jsonl hold different examples; "
                            f"run `zoo report` to score the predictions again, then --save")
        merged = {i: {**old.get(i, {}), **{k: v[j] for k, v in per.items()}} for j, i in enumerate(ids)}
        job["eval"] = (ids, merged, scores, settings)
    sample = rec.get("train_sample")
    if sample and (folder / TRAIN_SAMPLE_FILE).is_file() and (force or not want <= set(sample.get("settings", {}))):
        rows = read_predictions(folder, TRAIN_SAMPLE_FILE)
        job["train_sample"] = score([r["prediction"] for r in rows], [r["references"] for r in rows], spec, device)
    return rec, job


def _write_rescored(folder: Path, rec: dict, job: dict, entry: dict) -> None:
    from seq2seq_zoo.results import write_record, write_scores
    if "eval" in job:
        ids, merged, scores, settings = job["eval"]
        keys = list(dict.fromkeys([k for i in ids[:1] for k in merged[i]]))
        write_scores(folder, ids, {k: [merged[i][k] for i in ids] for k in keys})
        rec["eval"]["scores"].update(scores)
        rec["eval"].setdefault("settings", {}).update(settings)
    if "train_sample" in job:
        scores, settings = job["train_sample"]
        rec["train_sample"]["scores"].update(scores)
        rec["train_sample"].setdefault("settings", {}).update(settings)
    rec.setdefault("rescored", []).append(dict(entry, parts=sorted(job)))
    write_record(folder, rec)


def _rebuild_report(run_dir: Path) -> None:
    """The tables of the experiment folder holding ``run_dir``, after ``zoo eval`` changed the run."""
    exp_dir = Path(run_dir).resolve().parent
    if exp_dir.is_relative_to(Path.cwd().resolve()):   # the tables name the folder as the user did, not /abs/...
        exp_dir = exp_dir.relative_to(Path.cwd().resolve())
    if any(exp_dir.glob("*/record.json")):
        from seq2seq_zoo.report import build_report
        paths = build_report(exp_dir, plots=("scores",))  # the scores changed; the curves and maps did not
        print(f"{exp_dir}: wrote {', '.join(p.name for p in paths)}", file=sys.stderr)


def _eval_decode(args) -> int:
    """zoo eval RUN_DIR --decode k=v,... [--name NAME]: one decoding variant of a finished run."""
    from seq2seq_zoo.evaluation import parse_variant_arg, run_decodes
    run_dir = Path(args.run_dir)
    name, over = parse_variant_arg(args.decode, args.name)
    if args.metrics:
        raise UserError("--metrics goes without --decode; a re-decoded run is scored with its own eval.metrics")
    recs = run_decodes(run_dir, [(name, over)], data_dir=args.data_dir, device=args.device, force=args.force,
                       on_change="error", progress=not args.no_progress, command="zoo " + " ".join(sys.argv[1:]),
                       order_base=1000, log=lambda m: print(m, file=sys.stderr))
    if recs and args.json:
        print(json.dumps({"run": recs[0]["run"], "decode": name, "n_examples": recs[0]["eval"]["n_examples"],
                          "scores": recs[0]["eval"]["scores"],
                          "train_sample": (recs[0]["train_sample"] or {}).get("scores")}, indent=2))
    elif recs:
        print(f"{recs[0]['run']}, decoding {name}: " + _score_summary(recs[0]["eval"]["n_examples"],
                                                                      recs[0]["eval"]["scores"]))
    _rebuild_report(run_dir)
    return 0


# ---------------------------------------------------------------------------------------------- tune
def cmd_tune(args) -> int:
    """zoo tune RUN_DIR --grid KEY=V1,V2 ...: validation ROUGE per decoding setting; writes nothing."""
    from seq2seq_zoo.evaluation import parse_grid, tune_decoding, tune_table
    from seq2seq_zoo.inference import run_spec
    _kind(args.run_dir, "dir", "the run (a folder such as results/pe_ablation/tmax-seed1)")
    if args.data_dir:
        _kind(args.data_dir, "dir", "--data-dir (the folder containing <dataset>/)")
    grid = parse_grid(args.grid)
    rows = tune_decoding(args.run_dir, grid, data_dir=args.data_dir, device=args.device,
                         max_examples=args.max_examples or 0, progress=not args.no_progress,
                         log=lambda m: print(m, file=sys.stderr))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(tune_table(rows, getattr(run_spec(args.run_dir).eval, "rouge_unk", "match")))
    return 0


# --------------------------------------------------------------------------------------------- bench
def cmd_bench(args) -> int:
    from seq2seq_zoo.bench import run_bench
    run_bench(args.out, quick=args.quick, devices=args.device, scaling=not args.skip_scaling, threads=args.threads,
              data_dir=args.data_dir, full_epoch=args.full_epoch, with_compile=args.compile,
              command="zoo " + " ".join(args.argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
