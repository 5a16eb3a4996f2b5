"""Command line: zoo run | report | list | data | summarize | eval | tune | export | average | params |
bench | power; one module per command group (``app`` holds the entry point and the command table).

Errors in user input (experiment files, data, names) print one clear message and exit with status 2;
``--debug`` shows the traceback.
"""
from seq2seq_zoo.cli.app import COMMANDS, keep_freed_memory, main
from seq2seq_zoo.cli.common import EXIT_USAGE
from seq2seq_zoo.cli.parser import build_parser

__all__ = ["COMMANDS", "EXIT_USAGE", "build_parser", "keep_freed_memory", "main"]
