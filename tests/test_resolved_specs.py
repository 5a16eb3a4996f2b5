"""Every committed experiment file under every one of its profiles resolves to the same run settings as
recorded in tests/fixtures/resolved_specs.json: one SHA-256 per (file, profile) of the runs' ``spec.json``
texts (the bytes ``zoo run`` writes), so a change to the configuration code that moves a setting, renames
a key or changes a default cannot silently change a committed experiment. After a deliberate change to
an experiment file, write the fixture again: ``python tests/test_resolved_specs.py``."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).parent / "fixtures" / "resolved_specs.json"


def resolved() -> dict[str, str]:
    from seq2seq_zoo.config import load_experiment
    from seq2seq_zoo.config.toml_lines import parse_toml
    from seq2seq_zoo.utils.io import dumps_json
    out = {}
    for f in sorted((ROOT / "experiments").glob("*.toml")):
        for profile in [None, *parse_toml(f.read_text(encoding="utf-8")).get("profiles", {})]:
            runs = load_experiment(f, profile=profile).runs
            text = "".join(dumps_json(s.to_dict(), indent=2) + "\n" for s in runs)   # as runner writes spec.json
            out[f"{f.name} profile={profile or 'none'}"] = hashlib.sha256(text.encode()).hexdigest()
    return out


def test_committed_experiments_resolve_to_the_recorded_specs(monkeypatch):
    from seq2seq_zoo.config import load
    monkeypatch.setattr(load, "_try_build", lambda *a, **k: None)   # the meta-device builds: checks only
    want = json.loads(FIXTURE.read_text(encoding="utf-8"))
    got = resolved()
    changed = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
    assert not changed, f"resolved run settings changed for {changed}; if deliberate: python {__file__}"
    assert got.keys() == want.keys(), f"experiment files or profiles added or removed: python {__file__}"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    FIXTURE.write_text(json.dumps(resolved(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}")
