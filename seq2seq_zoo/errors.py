"""Errors whose message is for the user as is.

Every error the suite raises about user input (experiment files, data, names, checkpoints, downloads)
derives from :class:`UserError`, so ``zoo`` catches this one class, prints the message on one line
and exits with status 2 (``--debug`` shows the traceback). Each class also derives from the built-in
exception that code and tests have always caught (``ValueError``, ``KeyError``, ``RuntimeError``,
``FileNotFoundError``). This module imports nothing from the package, so any module may raise them.
"""
from __future__ import annotations


class UserError(Exception):
    """An error whose message is for the user as is: what is wrong, where, and what to do."""


class ConfigError(UserError, ValueError):
    """An experiment file or a command-line setting is invalid; the message names file, line and key."""


class DataError(UserError, ValueError):
    """Bad or missing data; the message names the file (and line) and what to do."""


class UnknownName(UserError, KeyError):
    """Raised for a name that is not registered; the message names the closest valid choice."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


class InitError(UserError, ValueError):
    """``train.init_from`` names nothing usable."""


class ContractError(UserError):
    """A model that breaks the model contract (``models/base.py``): raised when the model is built, with one
    line naming the model, where its class is defined, the rule it breaks and what to change."""


class PluginError(UserError):
    """A user model file, folder or entry point (``zoo run --models``, ``[experiment] models``, the
    ``seq2seq_zoo.models`` entry point group) that cannot be found or imported."""


class EmbeddingError(UserError, ValueError):
    """Bad embeddings setting or file; the message names it and what to do."""


class MissingFile(UserError, FileNotFoundError):
    """A file the command needs (a run's record, checkpoint, vocabulary) is not there."""


class TrainingStopped(UserError, RuntimeError):
    """Training stopped early for a reason the user must see (non-finite loss, interrupt)."""


class UnsafeCheckpoint(UserError, RuntimeError):
    """A checkpoint that holds more than tensors and plain data (e.g. a pickled code payload)."""


class DownloadError(UserError, RuntimeError):
    """A download failed; the message is one line: what failed, which URL/file, and what to do."""


class DamagedFile(UserError, ValueError):
    """A file the suite wrote itself (record, predictions, scores, vocabulary, spec, checkpoint) that no
    longer reads: truncated, empty or edited by hand. The message names the file (and line)."""


class EmptySelection(UserError, ValueError):
    """The data settings leave a split without examples; raised before anything is trained or written."""


class WriteFailed(UserError, OSError):
    """A write the machine refused (disk full, I/O error, read-only or missing folder). The previous
    file, if any, is left as it was; the message names the file."""

    def __init__(self, path, err: OSError):
        super().__init__(err.errno, err.strerror)
        self.path = path
        why = err.strerror or str(err) or type(err).__name__
        self.message = (f"{path}: could not write ({why}"
                        + (f", errno {err.errno}" if err.errno else "") + "); the previous version of the file, if "
                        "any, is unchanged. Free space (or fix the folder) and run the command again "
                        "(`zoo run ... --resume` continues training from the last checkpoint)")

    def __str__(self) -> str:
        return self.message


class Preempted(KeyboardInterrupt):
    """SIGTERM (a cluster scheduler's pre-emption or time limit): the command stops the way Ctrl-C stops
    it (training finishes the update and writes last.pt) and exits with ``EXIT_PREEMPTED``."""


EXIT_PREEMPTED = 128 + 15  # what a shell reports for a process ended by SIGTERM; requeue scripts test it


class BadExport(UserError, ValueError):
    """A folder given to ``Summarizer.from_pretrained`` (or ``zoo summarize``) that is not a whole, consistent
    folder written by ``zoo export``: a file missing, damaged or of the wrong shape, a weights file that is not
    safetensors or is cut short, a configuration whose shapes do not match the weights, a vocabulary of the
    wrong size or with repeated words, sizes out of bounds. Raised before any tensor is allocated; the
    message names the file and what does not fit."""


class UnsafePath(UserError, ValueError):
    """A path the suite was about to write that would land outside its results folder (a name such as
    ``..``, a path separator in a name, a symbolic link pointing elsewhere); nothing was written."""


class FigureError(UserError, ValueError):
    """A figure marker in a note (``<!-- fig: ... -->``, report/figures.py) that names no row, column or claim
    of its folder."""
