"""Rewrite every positional.json and attention.json under a results folder in the lean form the report
needs (seq2seq_zoo/report/artifacts.py): the encoder's positional table and the cross-attention map only,
cut to what the plots draw, 3 decimals. Files already lean are left as they are; the plots drawn from
either form are the same.

    python tools/slim_results.py results/            # rewrite in place, print the sizes before and after
    python tools/slim_results.py results/ --dry-run  # only print what it would save
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seq2seq_zoo.report.artifacts import LEAN, slim_attention, slim_positional, write_lean  # noqa: E402


def _heads(run_dir: Path) -> int | None:
    """Heads of the run's attention: its record's model options, else the model's default, else None."""
    try:
        rec = json.loads((run_dir / "record.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    opts = (rec.get("spec") or {}).get("model_options", {})
    if "heads" in opts:
        return opts["heads"]
    try:
        from seq2seq_zoo.registry import model_options
        return model_options(rec.get("model", "")).get("heads") or 1
    except Exception:  # a model this version no longer has
        return None


def slim(root: Path, dry_run: bool = False) -> tuple[int, int, int]:
    """(files rewritten, bytes before, bytes after) for every file under ``root``."""
    n, before, after = 0, 0, 0
    for path in sorted(root.rglob("*.json")):
        if path.name not in ("positional.json", "attention.json"):
            continue
        d = json.loads(path.read_text(encoding="utf-8"))
        if d.get("format") == LEAN:
            continue
        lean = slim_positional(d) if path.name == "positional.json" else slim_attention(d, _heads(path.parent))
        size = path.stat().st_size
        new = len(json.dumps(lean, ensure_ascii=False).encode()) + 1
        n, before, after = n + 1, before + size, after + new
        if not dry_run:
            write_lean(path, lean)
    return n, before, after


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path, help="a results folder, e.g. results/")
    ap.add_argument("--dry-run", action="store_true", help="print the saving, write nothing")
    args = ap.parse_args(argv)
    if not args.root.is_dir():
        print(f"slim_results: {args.root}: not a folder", file=sys.stderr)
        return 2
    n, before, after = slim(args.root, args.dry_run)
    print(f"{'would rewrite' if args.dry_run else 'rewrote'} {n} file(s): {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
