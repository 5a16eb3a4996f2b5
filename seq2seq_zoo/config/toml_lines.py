"""An experiment file's text: parsed once, and the line of a key in it, so that every error names
``file:line: key``."""
from __future__ import annotations

import copy
import functools
import tomllib
import re
from pathlib import Path

from seq2seq_zoo.errors import ConfigError


def parse_value(text: str):
    """A command-line VALUE (``--option k=VALUE``, ``--decode k=VALUE``) read as TOML: numbers, booleans,
    lists and quoted strings keep their type; anything TOML cannot read is the bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_toml(text: str) -> dict:
    """The TOML ``text`` as a dict (``tomllib.TOMLDecodeError`` when it is not TOML). One command reads an
    experiment file more than once (its profiles for ``--profile auto``, then the runs), so the parse of
    the same text is kept: the file is parsed once per process; callers get their own copy."""
    return copy.deepcopy(_parsed(text))


@functools.lru_cache(maxsize=8)
def _parsed(text: str) -> dict:
    return tomllib.loads(text)


def line_of(text: str, key: str) -> int | None:
    """Line of ``key`` (e.g. ``runs[2].train.lr``) in the TOML text: inside the i-th [[runs]] table
    first, else anywhere (the value may come from [defaults] or a profile)."""
    if key.startswith("[") and key.endswith("]"):  # a table header
        h = re.search(rf"^[ \t]*\[+[ \t]*{re.escape(key.strip('[]'))}[ \t]*\]+", text, re.M)
        return text.count("\n", 0, h.start()) + 1 if h else None
    m = re.match(r"(runs|decode)\[(\d+)\]\.?(.*)", key)  # the i-th [[runs]] or [[decode]] entry
    array = m.group(1) if m else "runs"
    start, end = 0, len(text)
    table = re.match(r"(experiment|grid|profiles\.[\w-]+)\.(.+)", key)
    if table and not m:  # search inside that table first
        h = re.search(rf"^[ \t]*\[[ \t]*{re.escape(table.group(1))}[ \t]*\]", text, re.M)
        if h:
            nxt = re.search(r"^[ \t]*\[(?![ \t]*" + re.escape(table.group(1)) + r"\.)", text[h.end():], re.M)
            start, end = h.end(), h.end() + nxt.start() if nxt else len(text)
            last = re.escape(table.group(2).split(".")[-1])
            pat = re.compile(rf"^[ \t]*(?:[\w.]*\.)?{last}[ \t]*=", re.M)
            found = pat.search(text, start, end)
            if found:
                return text.count("\n", 0, found.start()) + 1
    if m:
        heads = list(re.finditer(rf"^[ \t]*\[\[\s*{array}\s*\]\]", text, re.M))
        i = int(m.group(2))
        if i < len(heads):
            start = heads[i].start()
            # the entry ends at the next header that is not one of its sub-tables ([runs.train])
            nxt = re.compile(rf"^[ \t]*\[+[ \t]*(?!{array}[ \t]*\.)", re.M).search(text, heads[i].end())
            end = nxt.start() if nxt else len(text)
        key = m.group(3) or f"[[{array}]]"
        if key == f"[[{array}]]":
            return text.count("\n", 0, start) + 1 if heads else None
    last = re.escape(key.split(".")[-1])
    pat = re.compile(rf"^[ \t]*(?:[\w.]*\.)?{last}[ \t]*=|^[ \t]*\[+[ \t]*(?:[\w.]*\.)?{last}[ \t]*\]+", re.M)
    found = pat.search(text, start, end) or (pat.search(text) if m else None)
    return text.count("\n", 0, found.start()) + 1 if found else None


class Where:
    """Where an experiment file's errors point: the file, and its text for line numbers."""

    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text
        self.runs: list[dict] = []   # the [[runs]] entries as written, once their names are checked

    def fail(self, key: str, msg: str) -> ConfigError:
        at, note = self._taken_over(key) if key else (key, "")
        line = line_of(self.text, at) if key else None
        where = f"{self.path}:{line}" if line else str(self.path)
        return ConfigError(_one_line(f"{where}: {key + ': ' if key else ''}{msg}{note}"))

    def _taken_over(self, key: str) -> tuple[str, str]:
        """A run's setting that came from another run through ``like``: the key where it is written (for
        the line) and a note saying so; else ``key`` unchanged and no note."""
        m = re.match(r"runs\[(\d+)\]\.(.+)", key)
        if not m or not self.runs:
            return key, ""
        first = i = int(m.group(1))
        parts = m.group(2).split(".")
        names = [r.get("name") for r in self.runs]

        def own(run: dict) -> bool:
            tables = [run, *[t for t in run.get("profiles", {}).values() if isinstance(t, dict)]]
            for t in tables:
                for p in parts[:-1]:
                    t = t.get(p) if isinstance(t, dict) else None
                if isinstance(t, dict) and parts[-1] in t:
                    return True
            return False

        for _ in range(len(self.runs)):   # a chain a -> b -> c; loops are reported elsewhere
            if i >= len(self.runs) or own(self.runs[i]) or self.runs[i].get("like") not in names:
                break
            i = names.index(self.runs[i]["like"])
        if i == first or i >= len(self.runs) or not own(self.runs[i]):
            return key, ""
        return (f"runs[{i}].{m.group(2)}", f" (taken over from run '{names[i]}' through like = "
                f"\"{self.runs[first]['like']}\"; set it in this run to override)")




def _one_line(text: str) -> str:
    """Line breaks and other control characters (from keys or values in the file) shown escaped, so the
    message stays one line."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)
