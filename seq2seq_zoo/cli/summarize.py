"""zoo summarize: summaries of new texts with a trained run."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from seq2seq_zoo.errors import UserError
from seq2seq_zoo.cli.common import checked_path


def cmd_summarize(args) -> int:
    from seq2seq_zoo.inference import Summarizer
    checked_path(args.run_dir, "dir", "the run (a folder such as results/smoke/tiny)")
    if args.file:
        checked_path(args.file, "file", "--file (the text to summarise)")
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
        if args.output:   # never over its own input, the run or another run's files (before any work)
            from seq2seq_zoo.utils.io import check_output
            check_output(args.output, inputs=[args.input, args.run_dir, args.file])
            checked_path(args.output, "file", "--output")
            if Path(args.output).exists() and not args.force and not _is_summaries(Path(args.output)):
                raise UserError(f"{args.output}: exists and is not a file of summaries this command wrote; "
                                "--force replaces it (or give a new path)")
        return _summarize_many(args)
    if args.output:
        raise UserError("--output goes with --input (many texts, one per line)")
    s = Summarizer.load(args.run_dir, args.checkpoint)   # a bad model folder is named before stdin is read
    raw = Path(args.file).read_bytes() if args.file else sys.stdin.buffer.read()
    text = raw.decode("utf-8", errors="replace")
    print(s(text, beam_size=args.beam_size, max_len=args.max_len, int8=args.int8))
    return 0


_TEXT_FIELDS = ("text", "source", "dialogue", "document")


def _is_summaries(path: Path) -> bool:
    """Whether ``path`` is empty or holds only lines {"id", "summary"} (what --output writes)."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    obj = json.loads(line)
                    if not isinstance(obj, dict) or set(obj) != {"id", "summary"}:
                        return False
    except (OSError, ValueError):
        return False
    return True


def _summarize_many(args) -> int:
    """zoo summarize RUN --input FILE [--output OUT]: one text per line, summaries in batches."""
    from seq2seq_zoo.inference import Summarizer
    if args.file:
        raise UserError("--file and --input are alternatives: --file is one text, --input one text per line")
    if args.input == "-":
        lines = sys.stdin.read().splitlines()
    else:
        checked_path(args.input, "file", "--input")
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
                      progress=not args.no_progress, int8=args.int8)
    text = "".join(json.dumps({"id": i, "summary": o}, ensure_ascii=False) + "\n" for i, o in zip(ids, out))
    if args.output:
        from seq2seq_zoo.utils import atomic_write_text
        atomic_write_text(args.output, text)
        print(f"wrote {len(out)} summaries to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
