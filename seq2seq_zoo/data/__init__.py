"""Data: corpora readers (registered by name), text normalisation, vocabulary, batching, download."""
from seq2seq_zoo.data.corpora import Example, load_split, resolve_data_dir  # noqa: F401
