"""seq2seq-zoo: train and compare abstractive summarisation models side by side."""
__version__ = "0.1.0"


def __getattr__(name):  # ``from seq2seq_zoo import Summarizer`` without importing torch for every command
    if name == "Summarizer":
        from seq2seq_zoo.inference import Summarizer
        return Summarizer
    raise AttributeError(f"module 'seq2seq_zoo' has no attribute {name!r}")
