"""The Hugging Face peer: a BART of our Transformer's shape, and its ``generate`` decoder."""
from __future__ import annotations

from typing import Any

import torch

from seq2seq_zoo.bench.shapes import Shape
from seq2seq_zoo.data.batching import Batch
from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.precision import autocast


def peer_config(shape: Shape) -> dict[str, Any]:
    """Hugging Face BART of our Transformer's shape; defaults otherwise (dropout 0.1, attention and
    activation dropout 0, SDPA attention), except ReLU in the feed-forward layers as in ours."""
    return dict(vocab_size=shape.vocab, d_model=shape.d_model, encoder_layers=shape.layers,
                decoder_layers=shape.layers, encoder_attention_heads=shape.heads,
                decoder_attention_heads=shape.heads, encoder_ffn_dim=shape.d_ff, decoder_ffn_dim=shape.d_ff,
                max_position_embeddings=max(shape.src_len, shape.tgt_len + 2), dropout=shape.dropout,
                activation_function="relu", pad_token_id=PAD_ID, bos_token_id=2, eos_token_id=3,
                decoder_start_token_id=2, forced_bos_token_id=None, forced_eos_token_id=None)


def peer_available() -> str | None:
    """None if the HF peer can be built, else why not."""
    try:
        import transformers  # noqa: F401
        from transformers import BartConfig, BartForConditionalGeneration  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means: no peer
        return f"transformers not importable ({type(e).__name__}: {e})"
    return None


def peer_model(shape: Shape, device: torch.device, seed: int = 0):
    from transformers import BartConfig, BartForConditionalGeneration
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    torch.manual_seed(seed)
    return BartForConditionalGeneration(BartConfig(**peer_config(shape))).to(device)


class PeerDecoder:
    """HF ``generate`` with the same settings: ``beams`` beams, exactly ``length`` new tokens."""

    def __init__(self, model, batch: Batch, device, dtype, beams: int, length: int):
        from transformers import GenerationConfig
        self.model, self.device, self.dtype = model.eval(), device, dtype
        self.src = batch.src.to(device)
        self.mask = self.src != PAD_ID
        self.gen = GenerationConfig(num_beams=beams, max_new_tokens=length, min_new_tokens=length, do_sample=False,
                                    length_penalty=0.0, no_repeat_ngram_size=0, early_stopping=False,
                                    use_cache=True, pad_token_id=PAD_ID, bos_token_id=2, eos_token_id=3,
                                    decoder_start_token_id=2, forced_bos_token_id=None, forced_eos_token_id=None)
        self.tokens = batch.size * length

    def __call__(self):
        with torch.no_grad(), autocast(self.device, self.dtype):
            return self.model.generate(input_ids=self.src, attention_mask=self.mask, generation_config=self.gen)
