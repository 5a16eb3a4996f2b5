"""Transformer encoder-decoder (Vaswani et al. 2017) with three positional encodings.

pe = "learned" | "sinusoidal" | "sinusoidal_tmax" (base 10000 replaced by the maximum length, H. Li et
al. 2019); post-LN (the paper) by default, pre-LN as an option; optional tied embeddings; attention
weights per layer named ``decoder_layer{i}_block1_self_att`` / ``decoder_layer{i}_block2_decenc_att``.
"""
from __future__ import annotations

import torch
from torch import nn

from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.models.base import Seq2Seq, StepOutput
from seq2seq_zoo.models.layers import Embeddings, MultiHeadAttention, PositionalEncoding, padding_mask
from seq2seq_zoo.registry import register_model


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (eq. 2)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu"):
        super().__init__()
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', not {activation!r}")
        self.act = nn.ReLU() if activation == "relu" else nn.GELU()
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.w2(self.drop(self.act(self.w1(x))))


class Residual(nn.Module):
    """One sub-layer with its residual connection (section 5.4).
    post-LN: LayerNorm(x + Dropout(f(x)));  pre-LN: x + Dropout(f(LayerNorm(x)))."""

    def __init__(self, d_model: int, dropout: float, pre_ln: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.pre_ln = pre_ln

    def forward(self, x, f):
        if self.pre_ln:
            y, w = f(self.norm(x))
            return x + self.drop(y), w
        y, w = f(x)
        return self.norm(x + self.drop(y)), w


class EncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout, pre_ln, key_dim=None, attn_dropout=None, activation="relu"):
        super().__init__()
        ad = dropout if attn_dropout is None else attn_dropout
        self.self_att = MultiHeadAttention(d_model, heads, key_dim, ad, self_attention=True)
        self.ffn = FeedForward(d_model, d_ff, dropout, activation)
        self.sub1 = Residual(d_model, dropout, pre_ln)
        self.sub2 = Residual(d_model, dropout, pre_ln)

    def forward(self, x, mask, need_weights=False):
        x, w = self.sub1(x, lambda h: self.self_att(h, mask=mask, need_weights=need_weights))
        x, _ = self.sub2(x, lambda h: (self.ffn(h), None))
        return x, w


class DecoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout, pre_ln, key_dim=None, attn_dropout=None, activation="relu"):
        super().__init__()
        ad = dropout if attn_dropout is None else attn_dropout
        self.self_att = MultiHeadAttention(d_model, heads, key_dim, ad, self_attention=True)
        self.cross_att = MultiHeadAttention(d_model, heads, key_dim, ad, self_attention=False)
        self.ffn = FeedForward(d_model, d_ff, dropout, activation)
        self.sub1 = Residual(d_model, dropout, pre_ln)
        self.sub2 = Residual(d_model, dropout, pre_ln)
        self.sub3 = Residual(d_model, dropout, pre_ln)

    def forward(self, x, memory, src_mask, need_weights=False, cache=None, cross_kv=None):
        causal = cache is None or "k" not in cache  # one query step attends to all cached keys
        causal = causal and x.size(1) > 1
        x, w1 = self.sub1(x, lambda h: self.self_att(h, is_causal=causal, need_weights=need_weights, cache=cache))
        x, w2 = self.sub2(x, lambda h: self.cross_att(h, memory, mask=src_mask, need_weights=need_weights,
                                                        kv=cross_kv))
        x, _ = self.sub3(x, lambda h: (self.ffn(h), None))
        return x, w1, w2


class Encoder(nn.Module):
    def __init__(self, vocab_size, d_model=512, heads=8, layers=6, d_ff=2048, dropout=0.1, pe="sinusoidal",
                 max_len=512, pre_ln=False, key_dim=None, attn_dropout=None, pe_tmax=None, activation="relu",
                 embedding: Embeddings | None = None):
        super().__init__()
        self.embed = embedding or Embeddings(vocab_size, d_model)
        self.pe = PositionalEncoding(pe, d_model, max_len, pe_tmax)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(EncoderLayer(d_model, heads, d_ff, dropout, pre_ln, key_dim, attn_dropout,
                                                 activation) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model) if pre_ln else nn.Identity()

    def forward(self, src, src_mask=None, need_weights=False):
        """src (B, S) ids -> (B, S, d_model), {encoder_layer{i}_self_att: (B, H, S, S)}"""
        if src_mask is None:
            src_mask = padding_mask(src, PAD_ID)
        x = self.drop(self.pe(self.embed(src)))
        att = {}
        for i, layer in enumerate(self.layers):
            x, w = layer(x, src_mask, need_weights)
            if need_weights:
                att[f"encoder_layer{i + 1}_self_att"] = w
        return self.norm(x), att


class Decoder(nn.Module):
    def __init__(self, vocab_size, d_model=512, heads=8, layers=6, d_ff=2048, dropout=0.1, pe="sinusoidal",
                 max_len=128, pre_ln=False, key_dim=None, attn_dropout=None, pe_tmax=None, activation="relu",
                 embedding: Embeddings | None = None):
        super().__init__()
        self.embed = embedding or Embeddings(vocab_size, d_model)
        self.pe = PositionalEncoding(pe, d_model, max_len, pe_tmax)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(DecoderLayer(d_model, heads, d_ff, dropout, pre_ln, key_dim, attn_dropout,
                                                 activation) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model) if pre_ln else nn.Identity()

    def forward(self, tgt, memory, src_mask=None, need_weights=False, caches=None, cross_kv=None, offset=0):
        """tgt (B, T) ids, memory (B, S, d) -> (B, T, d) and per-layer attention weights
        decoder_layer{i}_block1_self_att (B, H, T, T), decoder_layer{i}_block2_decenc_att (B, H, T, S)."""
        x = self.drop(self.pe(self.embed(tgt), offset))
        att = {}
        for i, layer in enumerate(self.layers):
            x, w1, w2 = layer(x, memory, src_mask, need_weights,
                              cache=None if caches is None else caches[i],
                              cross_kv=None if cross_kv is None else cross_kv[i])
            if need_weights:
                att[f"decoder_layer{i + 1}_block1_self_att"] = w1
                att[f"decoder_layer{i + 1}_block2_decenc_att"] = w2
        return self.norm(x), att


@register_model("transformer")
class Transformer(Seq2Seq):
    """Transformer encoder-decoder (Vaswani et al. 2017); pe learned | sinusoidal | sinusoidal_tmax."""

    def __init__(self, vocab_size: int, d_model: int = 512, d_ff: int = 2048, heads: int = 8, layers: int = 6,
                 enc_layers: int | None = None, dec_layers: int | None = None, key_dim: int | None = None,
                 dropout: float = 0.1, attn_dropout: float = 0.0, pe: str = "sinusoidal",
                 pe_tmax: int | None = None, pre_ln: bool = False, tie_embeddings: bool = True,
                 activation: str = "relu", max_src_len: int = 512, max_tgt_len: int = 128):
        super().__init__()
        self.vocab_size, self.d_model = vocab_size, d_model
        kw = dict(d_model=d_model, heads=heads, d_ff=d_ff, dropout=dropout, pe=pe, pre_ln=pre_ln,
                  key_dim=key_dim, attn_dropout=attn_dropout, pe_tmax=pe_tmax, activation=activation)
        src_emb = Embeddings(vocab_size, d_model)
        tgt_emb = src_emb if tie_embeddings else Embeddings(vocab_size, d_model)
        # +1: the decoder input is <bos> + target, one longer than the truncated target
        self.encoder = Encoder(vocab_size, layers=enc_layers or layers, max_len=max_src_len, embedding=src_emb, **kw)
        self.decoder = Decoder(vocab_size, layers=dec_layers or layers, max_len=max_tgt_len + 1,
                               embedding=tgt_emb, **kw)
        self.generator = nn.Linear(d_model, vocab_size)
        if tie_embeddings:  # three-way weight tying (section 3.4)
            self.generator.weight = src_emb.weight
        self.tie = tie_embeddings
        self._init()

    def _init(self):
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name and "pe.table" not in name and p is not self.generator.weight:
                nn.init.xavier_uniform_(p)

    def components(self):
        emb = list({id(p): p for p in list(self.encoder.embed.parameters()) + list(self.decoder.embed.parameters())}.values())
        enc = [p for n, p in self.encoder.named_parameters() if not n.startswith("embed.")]
        dec = [p for n, p in self.decoder.named_parameters() if not n.startswith("embed.")]
        return {"embedding": emb, "encoder": enc, "decoder": dec, "output": list(self.generator.parameters())}

    def forward(self, batch, need_attention: bool = False) -> StepOutput:
        src_mask = padding_mask(batch.src)
        memory, enc_att = self.encoder(batch.src, src_mask, need_attention)
        h, dec_att = self.decoder(self.feed(batch.tgt_in), memory, src_mask, need_attention)
        log_probs = self.generator(h).float().log_softmax(-1)
        return StepOutput(log_probs, attention={**enc_att, **dec_att} if need_attention else {})

    def encode(self, batch):
        src_mask = padding_mask(batch.src)
        memory, _ = self.encoder(batch.src, src_mask)
        cross_kv = [layer.cross_att.project_kv(memory) for layer in self.decoder.layers]
        return {"memory": memory, "src_mask": src_mask, "cross_kv": cross_kv,
                "caches": [{} for _ in self.decoder.layers], "t": torch.zeros((), dtype=torch.long)}

    def decode_step(self, state, prev):
        t = int(state["t"])
        h, _ = self.decoder(self.feed(prev).unsqueeze(1), state["memory"], state["src_mask"],
                            caches=state["caches"], cross_kv=state["cross_kv"], offset=t)
        log_probs = self.generator(h[:, -1]).float().log_softmax(-1)
        state["t"] = state["t"] + 1
        return log_probs, state

    def attention_maps(self, batch):
        """All attention weights for one teacher-forced pass (plots)."""
        return self.forward(batch, need_attention=True).attention
