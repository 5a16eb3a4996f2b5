"""Models. Every module in this package is imported on first registry lookup, so a new architecture
is one new file with a ``@register_model("name")`` class and nothing else."""
from seq2seq_zoo.models.base import DecoderState, Seq2Seq, StepOutput, build_model  # noqa: F401
