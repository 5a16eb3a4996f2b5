"""Shared fixtures: a tiny DialogSum-format corpus written to tmp_path, tiny encoded data, tiny models.

Everything here is small on purpose: the suite runs on 2 busy CPU cores.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import submitit  # noqa: F401  (imported first: see below)
import torch

# submitit configures logging when it is imported (logging.config.dictConfig), which closes every logging
# handler made so far; absl's handler (absl is imported by rouge-score) then closes its stream unless it
# is the current sys.stderr. Imported for the first time inside a test that redirects sys.stderr (a
# command run in the test's process with its output captured), it closed pytest's own capture file, and
# every later test of that pytest-xdist worker failed in its setup ("I/O operation on closed file").
# Imported here, before absl, it has no such handler to close.

from seq2seq_zoo.data.batching import Encoded, collate, encode_examples
from seq2seq_zoo.data.corpora import Example
from seq2seq_zoo.data.text import TextConfig, tokenize
from seq2seq_zoo.data.vocab import Vocab

# tiny models are faster on one thread, and the machine is shared with a training job
torch.set_num_threads(1)

def load_tool(name: str):
    """``tools/<name>.py`` imported as a module (the tools are scripts, not part of the package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_PEOPLE = ["amy", "bob", "carl", "dana"]
_ITEMS = ["car", "book", "phone", "lamp"]
_COLOURS = ["red", "blue", "green", "black"]


def tiny_pairs(n: int, offset: int = 0) -> list[tuple[str, str]]:
    """Deterministic template dialogues whose summary is mostly copied from the dialogue."""
    out = []
    for j in range(offset, offset + n):
        who = _PEOPLE[j % 4]
        item = _ITEMS[(j // 4) % 4]
        col = _COLOURS[(j // 2) % 4]
        dia = (f"#Person1#: Hello {who.title()}, I want to buy a {col} {item}.\n"
               f"#Person2#: The {col} {item} is in the shop.\n"
               f"#Person1#: Great, I will take the {item}.")
        summ = f"#Person1# buys a {col} {item} from {who}."
        out.append((dia, summ))
    return out


def write_dialogsum(root: Path, n_train: int = 16, n_dev: int = 4, n_test: int = 3) -> Path:
    """``root/dialogsum/dialogsum.{train,dev,test}.jsonl`` in the official format; returns ``root``.
    The test split has three references (summary1..3), like the real corpus."""
    d = Path(root) / "dialogsum"
    d.mkdir(parents=True, exist_ok=True)

    def dump(name, rows):
        (d / f"dialogsum.{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    dump("train", [{"fname": f"train_{i}", "dialogue": a, "summary": b, "topic": "shop"}
                   for i, (a, b) in enumerate(tiny_pairs(n_train))])
    dump("dev", [{"fname": f"dev_{i}", "dialogue": a, "summary": b, "topic": "shop"}
                 for i, (a, b) in enumerate(tiny_pairs(n_dev, offset=1))])
    rows = []
    for i, (a, b) in enumerate(tiny_pairs(n_test, offset=2)):
        rows.append({"fname": f"test_{i}", "dialogue": a, "summary1": b, "topic1": "shop",
                     "summary2": b.replace("buys", "gets"), "topic2": "shop",
                     "summary3": f"a purchase happens, item {i}.", "topic3": "shop"})
    dump("test", rows)
    return Path(root)


@pytest.fixture
def dialogsum_dir(tmp_path) -> Path:
    """A data folder holding a tiny ``dialogsum/``."""
    return write_dialogsum(tmp_path / "data")


@pytest.fixture(autouse=True, scope="session")
def _no_zoo_data_env():
    """ZOO_DATA outranks the experiment file's data_dir: tests must not inherit it. Session-scoped, so it
    is gone before the module-scoped fixtures that train on fixture data run (a function-scoped one came
    too late for them: with ZOO_DATA set, test_cli_e2e's fixture trained on the real DialogSum)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("ZOO_DATA", raising=False)
        yield


def tiny_examples(n: int = 16, offset: int = 0) -> list[Example]:
    return [Example(f"ex{i + offset}", a, [b]) for i, (a, b) in enumerate(tiny_pairs(n, offset))]


def tiny_encoded(n: int = 16, offset: int = 0, vocab: Vocab | None = None, max_src: int = 64, max_tgt: int = 24):
    cfg = TextConfig()
    exs = tiny_examples(n, offset)
    if vocab is None:
        vocab = Vocab.build(tokenize(x, cfg) for e in exs for x in (e.source, e.references[0]))
    return vocab, encode_examples(exs, vocab, cfg, max_src, max_tgt)


def make_encoded(src: list[int], tgt: list[int], id_: str = "x", src_ext=None, tgt_ext=None, oovs=None) -> Encoded:
    return Encoded(id=id_, src=np.asarray(src, dtype=np.int64),
                   src_ext=np.asarray(src if src_ext is None else src_ext, dtype=np.int64), oovs=oovs or [],
                   tgt=np.asarray(tgt, dtype=np.int64),
                   tgt_ext=np.asarray(tgt if tgt_ext is None else tgt_ext, dtype=np.int64),
                   references=["r"], source_text="s")


def random_batch(vocab_size: int, src_lens: list[int], tgt_lens: list[int], seed: int = 0):
    """A collated batch of random in-vocabulary ids (>= 4, so no specials) with the given lengths."""
    g = np.random.default_rng(seed)
    items = [make_encoded(g.integers(4, vocab_size, s).tolist(), g.integers(4, vocab_size, t).tolist(), f"r{i}")
             for i, (s, t) in enumerate(zip(src_lens, tgt_lens))]
    return collate(items)


def tiny_transformer(vocab_size: int = 24, seed: int = 0, **kw):
    """A small Transformer in eval mode with a fixed seed."""
    from seq2seq_zoo.models.transformer import Transformer
    opts = dict(d_model=16, d_ff=32, heads=2, layers=2, dropout=0.0, max_src_len=32, max_tgt_len=40)
    opts.update(kw)
    torch.manual_seed(seed)
    return Transformer(vocab_size, **opts).eval()


def run_cli(argv: list[str]) -> int:
    """``zoo ARGV`` in this process (``cli.main``); torch's thread count, which a run sets, is restored."""
    from seq2seq_zoo.cli import main
    threads = torch.get_num_threads()
    try:
        return main(argv)
    finally:
        torch.set_num_threads(threads)


def trained_tiny_experiment(tmp: Path, name: str, runs: str, epochs: int = 1, seeds: int = 3):
    """``tiny_experiment`` NAME with RUNS (seed SEEDS) written under TMP beside a tiny DialogSum, and run
    into TMP/results -> (data_dir, experiment file, results folder)."""
    data_dir = write_dialogsum(tmp / "data", n_train=16, n_dev=4, n_test=3)
    toml = tmp / f"{name}.toml"
    toml.write_text(tiny_experiment(name, runs, seeds=seeds, data_dir=data_dir, epochs=epochs), encoding="utf-8")
    results = tmp / "results"
    assert run_cli(["run", str(toml), "--results", str(results), "--no-progress"]) == 0
    return data_dir, toml, results


@contextlib.contextmanager
def figures_unrendered():
    """While it lasts, every report figure is still built from the records, then a 1x1 PNG is written in its
    place instead of rendering it (most of a tiny report's time): for ``zoo run`` / ``zoo report`` calls
    whose checks read tables, notes and records, not figures.
    test_using_runs.test_every_plot_renders_with_titled_axes renders and checks them."""
    import io

    from PIL import Image

    from seq2seq_zoo.report import plots
    from seq2seq_zoo.utils import atomic_write_bytes
    buf = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buf, "PNG")

    def blank(fig, path):
        plots.plt.close(fig)
        atomic_write_bytes(path, buf.getvalue())
        return path
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "save_figure", blank)
        yield


@pytest.fixture(scope="module")
def figures_not_rendered():
    """``figures_unrendered`` for a whole module, its module fixtures that train included
    (``pytestmark = pytest.mark.usefixtures("figures_not_rendered")``)."""
    with figures_unrendered():
        yield


def tiny_experiment(name: str, runs: str, *, seeds: int = 3, data_dir=None, description: str | None = None,
                    epochs: int = 2, batch_size: int = 8, decode_max_len: int = 20, extra_defaults: str = "") -> str:
    """The tiny Transformer experiment the end-to-end tests run (d_model 16, one layer, fp32 on one
    thread, beam 2) as TOML text; ``runs``: the [[runs]] / [[decode]] tables that follow [defaults]."""
    head = [f'name = "{name}"'] + ([f'description = "{description}"'] if description else [])
    head += ['dataset = "dialogsum"', 'metrics = ["rouge"]', f"seeds = [{seeds}]"]
    if data_dir is not None:
        head.append(f'data_dir = "{data_dir}"')
    return ("[experiment]\n" + "\n".join(head) + "\n\n[defaults]\n"
            'model = "transformer"\nd_model = 16\nd_ff = 32\nheads = 2\nlayers = 1\ndropout = 0.0\n'
            "data.max_src_len = 64\ndata.max_tgt_len = 24\n"
            f"train.epochs = {epochs}\ntrain.batch_size = {batch_size}\ntrain.lr = 0.003\n"
            'train.precision = "fp32"\ntrain.threads = 1\n'
            f"decode.beam_size = 2\ndecode.max_len = {decode_max_len}\n{extra_defaults}\n{runs}")
