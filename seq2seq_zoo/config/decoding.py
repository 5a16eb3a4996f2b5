"""Decoding variants: [[decode]] entries of an experiment file and ``zoo eval --decode k=v,...``; a
decoding's settings in words (``describe``: what records and tables print)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from seq2seq_zoo.config.schema import DEFAULT_DECODE_NAME, DecodeConfig, decode_too_long, decode_with
from seq2seq_zoo.config.spec import DecodeVariant, RunSpec
from seq2seq_zoo.config.toml_lines import Where, parse_value
from seq2seq_zoo.config.values import build_section
from seq2seq_zoo.errors import ConfigError
from seq2seq_zoo.names import NAME_RULE, name_problem
from seq2seq_zoo.registry import did_you_mean


def decode_variants(ctx: Where, entries: list, specs: list[RunSpec], profiles: tuple[str, ...],
                    profile: str | None) -> list[DecodeVariant]:
    """[[decode]] entries: a plain unique name, decode.* keys checked like [defaults.decode] and against
    every run it decodes (decode.max_len may not exceed a run's data.max_tgt_len), and ``runs``, the runs
    it decodes (names as in the tables, without -seedN; default every trained run): a variant that only
    makes sense for some of a file's runs, e.g. a headline decoding in a file that also has dialogues.

    ``headline`` is true (the decoding chosen on validation for every size of the file) or a list of the
    file's profiles (``"none"``: full size) for which it was chosen: a small and a full-size model can
    prefer different decodings on validation. At most one entry is the headline of any one profile; the
    returned variants carry ``headline`` for ``profile`` (None: full size)."""
    out: list[DecodeVariant] = []
    claimed: dict[str, str] = {}   # profile ("*": every profile) -> the entry that is its headline
    trained = list(dict.fromkeys(s.group for s in specs))
    for i, entry in enumerate(entries):
        label = f"decode[{i}]"
        if not isinstance(entry, dict):
            raise ctx.fail(label, "must be an array of tables ([[decode]] with name = \"...\" and decode keys)")
        over = dict(entry)
        name = over.pop("name", None)
        headline = over.pop("headline", False)
        runs = over.pop("runs", None)
        if runs is not None:
            if not (isinstance(runs, list) and runs and all(isinstance(r, str) for r in runs)):
                raise ctx.fail(f"{label}.runs", f"expected a non-empty list of run names, got {runs!r}")
            for r in runs:
                if r not in trained:
                    raise ctx.fail(f"{label}.runs", f"no trained run named '{r}' in this file (a baseline has "
                                   f"nothing to decode).{did_you_mean(r, trained)} Trained runs: {', '.join(trained)}")
            runs = tuple(dict.fromkeys(runs))
        if isinstance(headline, list) and headline and all(isinstance(p, str) for p in headline):
            for p in headline:
                if p != "none" and p not in profiles:
                    raise ctx.fail(f"{label}.headline", f"no profile {p!r} in this file.{did_you_mean(p, profiles)} "
                                   f"Profiles: {', '.join(('none',) + tuple(profiles))} ('none': full size)")
            where = tuple(dict.fromkeys(headline))
        elif isinstance(headline, bool):
            where = ("*",) if headline else ()
        else:
            raise ctx.fail(f"{label}.headline", "expected true, false or a non-empty list of profile names "
                           f"(e.g. [\"cpu\"]), got {headline!r}")
        for p in where:   # two claims clash when they name the same profile or either names every one
            clash = next((n for q, n in claimed.items() if q == p or "*" in (p, q)), None)
            if clash:
                scope = "" if p == "*" else f" of profile '{p}'"
                raise ctx.fail(f"{label}.headline", f"only one [[decode]] entry can be the headline decoding{scope} "
                               f"('{clash}' already is)")
        claimed.update({p: name for p in where})
        if name is None:
            raise ctx.fail(label, "every [[decode]] entry needs a name (it labels the table rows)")
        if name_problem(name):
            raise ctx.fail(f"{label}.name", f"{name_problem(name)}; it must be {NAME_RULE}")
        if name == DEFAULT_DECODE_NAME or name in {v.name for v in out}:
            what = "is the name of the runs' own decoding" if name == DEFAULT_DECODE_NAME else "is used twice"
            raise ctx.fail(f"{label}.name", f"duplicate decode name '{name}': it {what}; names must be unique")
        if not over:
            raise ctx.fail(label, f"[[decode]] '{name}' changes nothing; give decode keys "
                           f"({', '.join(f.name for f in dataclasses.fields(DecodeConfig))})")
        build_section(DecodeConfig, over, label, ctx)  # unknown keys, types, ranges, choices
        for spec in (s for s in specs if runs is None or s.group in runs):
            too_long = decode_too_long(decode_with(spec.decode, over), spec.data)
            if too_long:
                raise ctx.fail(f"{label}.max_len" if "max_len" in over else label,
                               f"decode '{name}' of run '{spec.name}': {too_long}")
        out.append(DecodeVariant(name, over, "*" in where or (profile or "none") in where, runs))
    return out


def parse_decode_overrides(text: str, where: str = "--decode") -> dict[str, Any]:
    """``beam_size=8,length_penalty=1.0,method=greedy`` -> checked decode.* overrides (values are TOML
    values; a bare word is a string)."""
    over: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" not in part:
            raise ConfigError(f"{where}: {part!r} is not KEY=VALUE (e.g. beam_size=8,length_penalty=1.0)")
        k, v = (x.strip() for x in part.split("=", 1))
        over[k] = parse_value(v)
    if not over:
        raise ConfigError(f"{where}: no decode settings given (e.g. beam_size=8,length_penalty=1.0)")
    ctx = Where(Path(where), "")
    build_section(DecodeConfig, over, "decode", ctx)
    return over


def describe(d: dict) -> str:
    """Every decoding option in one line: the method, then each registered decoding rule's words
    (``describe`` of its class, in label order; the length penalty as its exact formula)."""
    from seq2seq_zoo.registry import decoding_rules
    head = "greedy" if d["method"] == "greedy" else f"beam {d['beam_size']}"
    return ", ".join([head, *(w for c in decoding_rules("label_order") if (w := c.describe(d)))])


def decoding_inert(d: dict) -> set[str]:
    """decode.* keys (without the prefix) that cannot change results under the settings ``d``, as the
    decoding rules declare (e.g. the repetition rule's style without a repetition penalty)."""
    from seq2seq_zoo.registry import decoding_rules
    return set().union(*(c.inert(d) for c in decoding_rules()))
