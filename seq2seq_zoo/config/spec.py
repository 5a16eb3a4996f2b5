"""The run spec (a run's settings, written to spec.json and every record) and the experiment: what
load.py makes of a file. A spec read back from JSON is checked with the same value rules."""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seq2seq_zoo.config.schema import (SECTIONS, DataConfig, DecodeConfig, EvalConfig, TrainConfig, decode_dict, decode_with,
                                       train_dict)
from seq2seq_zoo.config.values import build_section
from seq2seq_zoo.names import run_group


@dataclass
class RunSpec:
    experiment: str
    name: str
    seed: int
    model: str
    model_options: dict[str, Any]
    data: DataConfig
    train: TrainConfig
    decode: DecodeConfig
    eval: EvalConfig
    profile: str | None = None
    data_dir: str | None = None
    description: str = ""
    same_as: str | None = None   # "EXPERIMENT/RUN": the same run, trained by another experiment (see reuse.py)

    @property
    def group(self) -> str:
        """The run's name without its -seedN suffix: the row of tables and findings its seeds share."""
        return run_group(self.name, self.seed)

    def to_dict(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "name": self.name, "seed": self.seed, "model": self.model,
                "model_options": dict(self.model_options), "profile": self.profile,
                "description": self.description, **({"same_as": self.same_as} if self.same_as else {}),
                **{k: decode_dict(self.decode) if k == "decode" else train_dict(self.train) if k == "train"
                   else dataclasses.asdict(getattr(self, k)) for k in SECTIONS}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunSpec":
        return cls(experiment=d["experiment"], name=d["name"], seed=d["seed"], model=d["model"],
                   model_options=d.get("model_options", {}), profile=d.get("profile"),
                   description=d.get("description", ""), same_as=d.get("same_as"),
                   **{k: build_section(c, d.get(k, {}), k, "<record>") for k, c in SECTIONS.items()})


@dataclass
class Experiment:
    name: str
    path: Path
    runs: list[RunSpec]
    dataset: str
    description: str = ""
    profile: str | None = None
    raw: dict = field(default_factory=dict)
    decodes: list[DecodeVariant] = field(default_factory=list)   # [[decode]] entries (the sweep)
    findings: list = field(default_factory=list)                 # [[findings]] entries (findings.Finding)


@dataclass
class DecodeVariant:
    """One [[decode]] entry: re-decode every run's best checkpoint (or those of ``runs``) with these
    decode.* overrides."""
    name: str
    overrides: dict[str, Any]
    headline: bool = False   # chosen on validation: the leaderboard and README show the runs decoded so
    runs: tuple[str, ...] | None = None   # the runs it decodes (names without -seedN); None: every trained run

    def applies_to(self, spec: RunSpec) -> bool:
        return self.runs is None or spec.group in self.runs

    def apply(self, base: DecodeConfig) -> DecodeConfig:
        return decode_with(base, copy.deepcopy(self.overrides))
