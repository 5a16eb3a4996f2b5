"""`zoo COMMAND --help`: every subcommand (and `zoo data download|info`) documents each of its arguments,
and offers --debug; the ones that draw progress bars offer --no-progress, with the same words everywhere."""
from __future__ import annotations

import argparse

import pytest

from seq2seq_zoo.cli.parser import build_parser


def _commands(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                inner = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                if inner:
                    yield from _commands(sub, f"{prefix}{name} ")
                else:
                    yield f"{prefix}{name}", sub


COMMANDS = dict(_commands(build_parser()))


def test_every_subcommand_is_walked():
    assert {"run", "report", "eval", "tune", "summarize", "data download", "data info", "bench"} <= set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_is_documented_and_debug_is_everywhere(name):
    sub = COMMANDS[name]
    options = {o: a for a in sub._actions for o in a.option_strings}
    undocumented = sorted((a.option_strings or [a.dest])[0] for a in sub._actions
                          if not isinstance(a, argparse._HelpAction) and (not a.help or a.help == argparse.SUPPRESS))
    assert not undocumented, f"zoo {name}: arguments without help text: {undocumented}"
    assert options["--debug"].help == "show full tracebacks"
    if "--no-progress" in options:
        assert options["--no-progress"].help == "no progress bars"


def test_the_commands_that_draw_progress_bars_can_hide_them():
    with_bars = {n for n, sub in COMMANDS.items() if any("--no-progress" in a.option_strings for a in sub._actions)}
    assert {"run", "eval", "tune", "summarize"} <= with_bars
