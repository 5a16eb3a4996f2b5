"""zoo report: tables, plots, findings and the leaderboard from the run records."""
from __future__ import annotations

import sys
from pathlib import Path

from seq2seq_zoo.errors import UserError
from seq2seq_zoo.cli.common import EXIT_USAGE, checked_path


def cmd_report(args) -> int:
    from seq2seq_zoo.report import build_report
    root = checked_path(args.results, "dir", "--results")
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
    from seq2seq_zoo.report.html import write_index   # results/index.html: every experiment's page, the board
    print(f"wrote {write_index(root, dirs)}")
    docs = Path("docs/experiments.md")   # its figures, generated like the notes' (report.figures)
    if root.resolve() == Path("results").resolve() and docs.is_file():
        from seq2seq_zoo.report.figures import fill_docs
        if fill_docs(root, docs, warn=problems.append):
            print(f"wrote {docs}")
    for msg in problems:
        print(f"zoo report: error: {msg} (left out of the report)", file=sys.stderr)
    return EXIT_USAGE if problems else 0
