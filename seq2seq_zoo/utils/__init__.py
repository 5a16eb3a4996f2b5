"""Small shared helpers, one concern a module: io (atomic writes, JSON read back with clear errors),
seeding, hardware, device (the run's device, GPU settings), version (the code's git commit),
checkpoints (atomic saves, safe loading). ``from seq2seq_zoo.utils import X`` finds every name here."""
from seq2seq_zoo.errors import DamagedFile, UnsafeCheckpoint, WriteFailed
from seq2seq_zoo.utils.checkpoints import atomic_torch_save, load_checkpoint, load_weights
from seq2seq_zoo.utils.device import no_cudnn_attention, pick_device
from seq2seq_zoo.utils.hardware import cpu_has_fast_bf16, hardware, hardware_str
from seq2seq_zoo.utils.io import (atomic_write_bytes, atomic_write_json, atomic_write_text, dumps_json,
                                  loads_finite, read_json, read_jsonl)
from seq2seq_zoo.utils.seeding import seed_everything, seed_span
from seq2seq_zoo.utils.version import code_version, invocation, process_code_version

__all__ = ["DamagedFile", "UnsafeCheckpoint", "WriteFailed", "atomic_torch_save", "atomic_write_bytes",
           "atomic_write_json", "atomic_write_text", "dumps_json", "code_version", "cpu_has_fast_bf16", "hardware",
           "hardware_str", "invocation", "load_checkpoint", "load_weights", "loads_finite", "no_cudnn_attention",
           "pick_device", "process_code_version", "read_json", "read_jsonl", "seed_everything", "seed_span"]
