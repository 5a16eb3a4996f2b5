"""Experiment files -> validated run specs.

    schema.py      the settings' dataclasses, defaults, ranges, choices and key lists (imports nothing
                   from the package)
    toml_lines.py  the file parsed once; the line of a key, for ``file:line: key`` errors
    values.py      a section's keys checked against the schema and built; seeds; registered names
    spec.py        RunSpec (a run's settings, as spec.json and records hold them) and Experiment
    decoding.py    [[decode]] variants and ``zoo eval --decode`` overrides
    launcher.py    the [launcher] table (of an experiment file or the user's config) for ``--launcher``
    objective_tables.py  an objective's table (``train.scst = {...}``), checked by the objective's own
                   declarations and written as the ``train.*`` keys specs and records store (SCST's ``rl_*``)
    load.py        load_experiment: [experiment], [defaults], [profiles.X], [[runs]] with ``like``, [grid],
                   [[findings]]; the checks that need the registries (model options, a meta-device build,
                   reader options), whose data/model/training imports stay inside those functions

``from seq2seq_zoo.config import X`` finds every public name here.
"""
from seq2seq_zoo.config.decoding import parse_decode_overrides
from seq2seq_zoo.config.load import (is_trainable, load_experiment, option_type_problem, read_spec, select_runs,
                                     settings)
from seq2seq_zoo.config.schema import (CHOICES, DEFAULT_DECODE_NAME, EXPERIMENT_KEYS, LEGACY_VALUES,
                                       NOT_INHERITED, RANGES, RUN_KEYS, SAME_AS_PATTERN, SECTIONS, SEED_MAX,
                                       SEEDS_MAX, TOP_KEYS, DataConfig, DecodeConfig, EvalConfig, TrainConfig,
                                       decode_dict, decode_too_long, decode_with, inert_settings, toml_value)
from seq2seq_zoo.config.spec import DecodeVariant, Experiment, RunSpec
from seq2seq_zoo.config.toml_lines import parse_toml
from seq2seq_zoo.errors import ConfigError

__all__ = ["CHOICES", "DEFAULT_DECODE_NAME", "EXPERIMENT_KEYS", "LEGACY_VALUES", "NOT_INHERITED", "RANGES",
           "RUN_KEYS", "SAME_AS_PATTERN", "SECTIONS", "SEED_MAX", "SEEDS_MAX", "TOP_KEYS", "ConfigError",
           "DataConfig", "DecodeConfig", "DecodeVariant", "EvalConfig", "Experiment", "RunSpec", "TrainConfig",
           "decode_dict", "decode_too_long", "decode_with", "inert_settings", "is_trainable", "load_experiment", "option_type_problem",
           "parse_decode_overrides", "parse_toml", "read_spec", "select_runs", "settings", "toml_value"]
