"""An exported model folder (what ``zoo export`` writes, export.py) read back: its file names and format,
and ``load_exported``, which ``Summarizer.from_pretrained`` calls. Nothing is unpickled."""
from __future__ import annotations

import json
from pathlib import Path

from seq2seq_zoo.errors import UserError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCAB_FILE = "vocab.json"
FORMAT = 1


def load_exported(folder: str | Path):
    """(model in eval mode on the CPU, vocabulary, RunSpec) of an exported folder."""
    from safetensors.torch import load_model

    from seq2seq_zoo.config import RunSpec
    from seq2seq_zoo.data.vocab import Vocab
    from seq2seq_zoo.models.base import build_model, model_context
    folder = Path(folder)
    for f in (CONFIG_FILE, WEIGHTS_FILE, VOCAB_FILE):
        if not (folder / f).is_file():
            raise UserError(f"{folder / f} not found: {folder} is not a folder written by `zoo export`")
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        spec = RunSpec.from_dict(config["spec"])
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"{folder / CONFIG_FILE}: not a readable export config ({type(e).__name__}: {e})") from None
    if config.get("format", 0) > FORMAT:
        raise UserError(f"{folder}: exported by a newer seq2seq-zoo (format {config['format']}); upgrade to load it")
    vocab = Vocab.load(folder / VOCAB_FILE)
    model = build_model(spec.model, model_context(len(vocab), spec.data), spec.model_options)
    missing, unexpected = load_model(model, str(folder / WEIGHTS_FILE), strict=False)
    if missing or unexpected:
        raise UserError(f"{folder / WEIGHTS_FILE}: does not fit the model in {CONFIG_FILE} (missing "
                        f"{', '.join(missing[:3]) or 'none'}; unexpected {', '.join(unexpected[:3]) or 'none'})")
    return model.eval(), vocab, spec
