"""The argument parser of ``zoo`` and its subcommands."""
from __future__ import annotations

import argparse


def _debug(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show full tracebacks")


def _no_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default="results", metavar="DIR", help="results folder (default: ./results)")
    _debug(p)


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def _minutes(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of minutes") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of minutes > 0, got {text}")
    return v


def _gigabytes(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GB") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of GB > 0, got {text}")
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
    p.add_argument("--no-report", action="store_true",
                   help="leave the folder's tables, plots and README to a later `zoo report` (what each cluster "
                        "job of --launcher does: the report job after them writes them once)")
    p.add_argument("--dry-run", action="store_true",
                   help="check the file and print each run's settings (profile, like and grid applied; only "
                        "those that differ from the built-in defaults) and what zoo run would do with it "
                        "(train, resume, skip, take over); trains and writes nothing")
    _no_progress(p)
    p.add_argument("--device", help="override train.device (cpu, cuda, cuda:1)")
    p.add_argument("--max-minutes", type=_minutes, metavar="M",
                   help="override train.max_minutes: each run stops training at the first epoch end (or "
                        "train.val_every validation) after M minutes of training and validation, then is "
                        "scored from best.pt; the record says so (train.stopped_by_time) and the tables show "
                        "'time limit' or 'not converged'. For a machine held for a fixed time")
    p.add_argument("--nproc", type=_positive_int, default=1, metavar="N",
                   help="train with N data-parallel processes on this machine (DistributedDataParallel: gloo "
                        "on CPU, NCCL on GPUs); same global batch and results as one process. Several machines: "
                        "torchrun --nnodes ... --nproc-per-node N -m seq2seq_zoo run EXP")
    _launcher_options(p)
    _add_common(p)

    p = sub.add_parser("status", help="each run's cluster job of an experiment: pending, running, requeued, done, "
                                      "failed (its one-line error and log)",
                       description="What became of the jobs `zoo run EXP --launcher slurm|local` submitted: one line "
                                   "per run (done, pending, running, requeued, failed or stopped with the job's "
                                   "one-line error and its log file, lost, not submitted). Reads the results folder "
                                   "and Slurm's queue (squeue); needs no accounting database. Exit status 2 when a "
                                   "job failed for a user error, 1 for another failure, else 0.")
    p.add_argument("experiment", help="experiment TOML file, e.g. experiments/pe_ablation.toml")
    p.add_argument("--profile", default="auto", help="the profile whose runs to list (default: the one the jobs "
                                                     "were submitted with; 'none' for full size)")
    _add_common(p)

    p = sub.add_parser("report", help="rebuild tables and plots from stored run records (no training)")
    p.add_argument("experiments", nargs="*", help="experiment names or folders (default: all under --results)")
    _add_common(p)

    p = sub.add_parser("power", help="per judged finding: the effect, the seed sd and the seeds for ~80%% power "
                       "(reads findings.json under --results; writes <results>/seed_plan.json)")
    p.add_argument("--power", type=float, default=0.8, help="target power (default 0.8)")
    p.add_argument("--notes", action="store_true",
                   help="also write each experiment's table into its NOTES.md under '## Seed plan', keeping the "
                        "written plan that follows the table")
    _add_common(p)

    p = sub.add_parser("compare", help="one seed-level comparison of two runs, of one results folder or of two",
                       description="Judge 'A OP B' with the training seed as the unit: the test, verdict rule and "
                                   "power figure of the declared findings (docs/statistics.md), for two runs that "
                                   "need not share a results folder (e.g. one profile's run against another's).",
                       epilog="Examples:\n"
                              "  zoo compare results/cpu_long_h256/cnn_pointer:pg-cov results/cpu_long/cnn_pointer:pg-cov "
                              "--metric best_val_loss --op '<'\n"
                              "  zoo compare results/cpu_long_h256/cnn_pointer:pg-cov/trigram-lp4 "
                              "results/cpu_long_h256/cnn_pointer:lead",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", metavar="A", help="FOLDER:RUN, e.g. results/cpu_long/cnn_pointer:pg-cov (RUN without -seedN; "
                                          "RUN/DECODE for a decoding variant; RUN@init for the runs RUN started from)")
    p.add_argument("b", metavar="B", help="FOLDER:RUN, the same form")
    p.add_argument("--op", choices=[">", "<"], default=">", help="the claim's direction: A above (>, default) or "
                                                                   "below (<) B")
    p.add_argument("--metric", default="rouge1",
                   help="per-example metric (rouge1 (default), rouge2, rougeL, repetition, ...) or per-run quantity "
                        "(best_val_loss; best_score: the validation score a run selected on, e.g. SCST's greedy "
                        "ROUGE-1 as a fraction)")
    p.add_argument("--scale", type=float, default=1.0, metavar="C", help="compare A with C x B (default 1)")
    p.add_argument("--json", action="store_true", help="print the judged comparison as JSON")
    _debug(p)

    p = sub.add_parser("list", help="list registered models, datasets, metrics, schedules, objectives")
    p.add_argument("what", nargs="?", default="all",
                   choices=["all", "models", "datasets", "metrics", "schedules", "objectives"],
                   help="which registry to list (default: all)")
    p.add_argument("--pattern", default="*", help="glob filter on names, e.g. 'trans*'")
    _debug(p)

    p = sub.add_parser("data", help="download corpora or show where the data is looked for")
    dsub = p.add_subparsers(dest="data_cmd", metavar="ACTION")
    d = dsub.add_parser("download", help="fetch the official files with sha256 checks")
    d.add_argument("name", help="dataset name (dialogsum, samsum, gigaword, ...)")
    d.add_argument("--data-dir", default=None, help="target folder (default: $ZOO_DATA or ./data)")
    d.add_argument("--mirror", help="base URL of a mirror (also $ZOO_DATA_MIRROR)")
    d.add_argument("--force", action="store_true", help="re-download files whose checksum is wrong")
    _debug(d)
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
    d.add_argument("--data-dir", help="folder containing <dataset>/ (default: the usual search, as for `zoo run`)")
    _debug(d)

    p = sub.add_parser("summarize", help="summarise text (stdin, --file, or many with --input) with a trained run",
                       description="Without --input: the whole of stdin (or --file) is one text. With --input: "
                                   "one text per line (a JSON object's --field, or the line itself), summarised "
                                   "in batches; one JSON object per line to --output (default: stdout).")
    p.add_argument("run_dir", help="a run folder (e.g. results/smoke/tiny) or a folder written by `zoo export`")
    p.add_argument("--file", help="input text file (default: stdin)")
    p.add_argument("--input", metavar="FILE", help="many texts: a .jsonl file or plain lines ('-': stdin)")
    p.add_argument("--output", metavar="FILE", help="with --input: where the jsonl goes (default: stdout); never "
                                                    "the input, nor a file inside a run folder")
    p.add_argument("--force", action="store_true", help="with --output: replace a file that is not a file of "
                                                         "summaries this command wrote")
    p.add_argument("--field", help="with --input: the JSON key holding the text (default: the first of text, "
                                   "source, dialogue, document that is present)")
    p.add_argument("--batch-size", type=_positive_int, default=16, help="texts per batch (default: 16)")
    p.add_argument("--checkpoint", default="best.pt", help="of a run folder: best.pt (default), last.pt, averaged.pt")
    _no_progress(p)
    p.add_argument("--beam-size", type=_positive_int, help="beam size (default: the run's decode.beam_size)")
    p.add_argument("--max-len", type=_positive_int, help="maximum summary length in tokens")
    p.add_argument("--int8", action="store_true",
                   help="run the model's linear layers in int8 (decode.precision = \"int8\"; CPU): faster, "
                        "ROUGE-1 within 0.2 in docs/performance.md")
    _debug(p)

    p = sub.add_parser("export", help="write a trained run as a self-contained model folder (safetensors, "
                                      "config, vocabulary, model card)")
    p.add_argument("run_dir", help="a run folder, e.g. results/smoke/tiny")
    p.add_argument("out", help="the folder to write (new or empty, or an earlier export); written beside it "
                               "and swapped in whole")
    p.add_argument("--checkpoint", default="best.pt", help="best.pt (default), last.pt or averaged.pt")
    p.add_argument("--force", action="store_true", help="write into a folder that holds other files: the "
                                                         "export's files are replaced, the others kept")
    _debug(p)

    p = sub.add_parser("average", help="average the weights of a run's last N epoch checkpoints",
                       description="Writes RUN/checkpoints/averaged.pt, the mean of the last N epochs' weights "
                                   "(kept by runs trained with train.average_last >= N). Use it with `zoo export "
                                   "RUN OUT --checkpoint averaged.pt` or `zoo summarize RUN --checkpoint averaged.pt`.")
    p.add_argument("run_dir", help="a run folder, e.g. results/smoke/tiny")
    p.add_argument("--last", type=_positive_int, required=True, metavar="N",
                   help="how many of the last epoch checkpoints to average (at most train.average_last)")
    p.add_argument("--force", action="store_true", help="replace an averaged.pt that holds the mean of other "
                                                         "checkpoints (the weights the run was scored with)")
    _debug(p)

    p = sub.add_parser("params", help="trainable parameters per component for every run of an experiment",
                       description="Build every run's model (no training) on the real vocabulary and print "
                                   "its trainable parameters per component (embedding, encoder, decoder, output).")
    p.add_argument("experiment", help="experiment TOML file, e.g. experiments/pe_ablation.toml")
    p.add_argument("--profile", default="auto", help="as for `zoo run`")
    p.add_argument("--data-dir", help="as for `zoo run`: the folder containing <dataset>/")
    _debug(p)

    p = sub.add_parser("eval", help="re-score a run's predictions.jsonl, or re-decode its best checkpoint (--decode)",
                       description="Without --decode: re-score RUN_DIR/predictions.jsonl and print the scores. "
                                   "With --decode: decode the run's best checkpoint again with changed decoding "
                                   "settings (no retraining), score the evaluation split (and the training "
                                   "sample if the run has eval.train_sample), write RUN_DIR/decodes/NAME/ and "
                                   "rebuild the experiment's report, where it appears as a row (run x decode).",
                       epilog="Example:\n  zoo eval results/dialogsum_transformer/strong-seed1 "
                              "--decode beam_size=8,length_penalty=1.0 --name beam8_lp1",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a finished run folder, e.g. results/smoke/tiny")
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
    _decode_source(p)
    p.add_argument("--force", action="store_true", help="decode again even if NAME was already decoded; with "
                                                         "--save, score again what already holds the metrics")
    _no_progress(p)
    p.add_argument("--json", action="store_true", help="print the full record of scores and settings as JSON")
    _debug(p)

    p = sub.add_parser("tune", help="score a grid of decoding settings on the validation split of a finished run",
                       description="Decode the VALIDATION split of a finished run's best checkpoint once per "
                                   "combination of the --grid values (decode.* settings changed from the run's "
                                   "own) and print validation ROUGE per combination, best first. The grid is "
                                   "stored in the run's tune.json (every setting's validation scores), which "
                                   "the leaderboard reads; test outputs are not touched: decode the test split "
                                   "with `zoo eval RUN --decode ...` or the experiment file.",
                       epilog="Example:\n  zoo tune results/dialogsum_transformer/strong-seed1 "
                              "--grid beam_size=1,4 length_penalty=0.6,1.0",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a finished run folder with its best checkpoint, e.g. results/smoke/tiny")
    p.add_argument("--grid", nargs="+", required=True, metavar="KEY=V1,V2,...",
                   help="decode.* settings and the values to try, e.g. beam_size=1,4 length_penalty=0.6,1.0")
    p.add_argument("--max-examples", type=_positive_int, default=None,
                   help="score the first N validation examples only (default: all after data.max_valid)")
    _decode_source(p)
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    _no_progress(p)
    _debug(p)

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
                                   "  - the full-size pointer-generator + coverage update of experiments/cnn_pointer.toml on\n"
                                   "    one thread (with --baseline DIR, against that checkout's code), and its bound;\n"
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
    p.add_argument("--baseline", metavar="DIR",
                   help="a checkout of another commit (e.g. `git worktree add DIR <commit>`): its full-size "
                        "pointer-generator update is timed interleaved with ours")
    p.add_argument("--int8-runs", metavar="DIR",
                   help="a results folder of trained runs also decoded with decode.precision = \"int8\" (zoo eval "
                        "RUN --decode precision=int8): the int8 stage reports their ROUGE-1 change")
    _debug(p)
    for name in ("run", "report", "list", "summarize", "params", "eval"):  # user models from outside the package
        sub.choices[name].add_argument(
            "--models", action="append", metavar="PATH", default=[],
            help="import this model file or folder first (repeatable; its @register_model classes become "
                 "usable by name; see docs/extending-models.md)")
    return ap


def _launcher_options(p: argparse.ArgumentParser) -> None:
    """zoo run's cluster options; each but --launcher and --wait is also a key of a [launcher] table (the
    experiment file's, then the user's config), which the command line overrides (docs/cluster.md)."""
    g = p.add_argument_group("cluster jobs", "one job per run and seed through submitit; also set in a [launcher] "
                             "table (docs/cluster.md)")
    g.add_argument("--launcher", choices=["inprocess", "local", "slurm"], default="inprocess",
                   help="inprocess (default): train here, one run after another; slurm: one Slurm job per run "
                        "and seed that still needs work (a job array), requeued and resumed when pre-empted or "
                        "at its time limit, then a `zoo report` job; local: the same jobs on this machine, one per "
                        "free core")
    g.add_argument("--partition", help="sbatch --partition")
    g.add_argument("--time", type=_positive_int, metavar="MIN",
                   help="each job's time limit in minutes (sbatch --time; default 1440); a run still training "
                        "then is checkpointed, requeued and resumed")
    g.add_argument("--cpus-per-job", type=_positive_int, metavar="N", help="sbatch --cpus-per-task")
    g.add_argument("--gpus-per-job", type=int, metavar="N", help="sbatch --gpus-per-node (with --nproc N: N GPUs)")
    g.add_argument("--mem-gb", type=_gigabytes, metavar="GB", help="sbatch --mem, in GB")
    g.add_argument("--account", help="sbatch --account")
    g.add_argument("--qos", help="sbatch --qos")
    g.add_argument("--max-parallel", type=_positive_int, metavar="N",
                   help="at most N jobs running at once (the array's %%N; local: default one per free core)")
    g.add_argument("--sbatch", action="append", metavar="KEY=VALUE",
                   help="any other sbatch option, e.g. --sbatch constraint=a100 (repeatable; KEY alone: a flag)")
    g.add_argument("--log-dir", metavar="DIR", help="submitit's job folders and logs (default "
                                                    "RESULTS/EXPERIMENT/.jobs/logs)")
    g.add_argument("--no-report-job", action="store_true",
                   help="slurm: no `zoo report` job after the runs' jobs (run `zoo report` yourself)")
    g.add_argument("--wait", action="store_true",
                   help="slurm: wait until every job has ended and print each run's state (as `zoo status`)")


def _decode_source(p: argparse.ArgumentParser) -> None:
    """Where a finished run's checkpoint is decoded (zoo eval --decode, zoo tune): its data and device."""
    p.add_argument("--data-dir", help="folder containing <dataset>/ (default: where the run found it)")
    p.add_argument("--device", help="decode on this device (cpu, cuda); default: the run's train.device")
