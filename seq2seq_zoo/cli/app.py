"""``zoo``: the entry point. Process settings made before torch loads, the parser, the command table,
and the one place where user errors become one line and exit status 2."""
from __future__ import annotations

import os
import signal
import sys

from seq2seq_zoo.errors import UserError
from seq2seq_zoo.cli.bench import cmd_bench
from seq2seq_zoo.cli.common import EXIT_USAGE
from seq2seq_zoo.cli.compare import cmd_compare
from seq2seq_zoo.cli.data import cmd_data
from seq2seq_zoo.cli.launch import cmd_status
from seq2seq_zoo.cli.listing import cmd_list
from seq2seq_zoo.cli.parser import build_parser
from seq2seq_zoo.cli.power import cmd_power
from seq2seq_zoo.cli.report import cmd_report
from seq2seq_zoo.cli.run import cmd_run
from seq2seq_zoo.cli.runs import cmd_average, cmd_eval, cmd_export, cmd_params, cmd_tune
from seq2seq_zoo.cli.summarize import cmd_summarize

# zoo COMMAND -> the function that runs it (one module per command group)
COMMANDS = {"run": cmd_run, "report": cmd_report, "list": cmd_list, "data": cmd_data,
            "summarize": cmd_summarize, "eval": cmd_eval, "params": cmd_params, "bench": cmd_bench,
            "tune": cmd_tune, "export": cmd_export, "average": cmd_average, "power": cmd_power,
            "compare": cmd_compare, "status": cmd_status}


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
        return COMMANDS[args.cmd](args) or 0
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
