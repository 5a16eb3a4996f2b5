"""seq2seq-zoo: train and compare abstractive summarisation models side by side."""
__version__ = "0.1.0"
