"""Transformer encoder-decoder (Vaswani et al. 2017) with three positional encodings.

pe = "learned" | "sinusoidal" | "sinusoidal_tmax" (base 10000 replaced by the maximum length, H. Li et
al. 2019); post-LN (the paper) by default, pre-LN as an option; optional tied embeddings; attention
weights per layer named ``decoder_layer{i}_block1_self_att`` / ``decoder_layer{i}_block2_decenc_att``.

The classes follow the paper (in the Annotated Transformer's order); the incremental decoding step of
inference, which ``Transformer.decode_hidden`` calls, is in ``transformer_incremental.py``.
"""
from __future__ import annotations

import torch
from torch import nn

from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.models import transformer_incremental as incremental
from seq2seq_zoo.models.base import Seq2Seq, StepOutput, at_least, reorder_rows
from seq2seq_zoo.models.fast.kernels import Dropout, log_softmax_fp32
from seq2seq_zoo.models.fast.outputs import LazyOutput
from seq2seq_zoo.models.layers import PE_KINDS, Embeddings, MultiHeadAttention, PositionalEncoding, padding_mask
from seq2seq_zoo.registry import did_you_mean, register_model

ACTIVATIONS = ("relu", "gelu")


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (eq. 2)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu"):
        super().__init__()
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', not {activation!r}")
        self.act = nn.ReLU() if activation == "relu" else nn.GELU()
        self.drop = Dropout(dropout)

    def forward(self, x):
        return self.w2(self.drop(self.act(self.w1(x))))


class Residual(nn.Module):
    """One sub-layer with its residual connection (section 5.4).
    post-LN: LayerNorm(x + Dropout(f(x)));  pre-LN: x + Dropout(f(LayerNorm(x)))."""

    def __init__(self, d_model: int, dropout: float, pre_ln: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.drop = Dropout(dropout)
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
        x, w = self.sub1(x, lambda h: self.self_att(h, mask=mask, need_weights=need_weights))   # sec. 3.2.3, eq. 1
        x, _ = self.sub2(x, lambda h: (self.ffn(h), None))                                     # eq. 2
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

    def forward(self, x, memory, src_mask, need_weights=False, cache=None, cross_kv=None, kv_rows=None):
        causal = cache is None or "k" not in cache  # one query step attends to all cached keys
        causal = causal and x.size(1) > 1
        # masked self-attention (sec. 3.2.3), encoder-decoder attention (sec. 3.2.3), FFN (eq. 2)
        x, w1 = self.sub1(x, lambda h: self.self_att(h, is_causal=causal, need_weights=need_weights, cache=cache))
        x, w2 = self.sub2(x, lambda h: self.cross_att(h, memory, mask=src_mask, need_weights=need_weights,
                                                        kv=cross_kv, kv_rows=kv_rows))
        x, _ = self.sub3(x, lambda h: (self.ffn(h), None))
        return x, w1, w2


class _Stack(nn.Module):
    """What the encoder and the decoder are built from alike: token embeddings (shared when given), the
    positional encoding, dropout, ``layers`` layers of ``layer_class`` and, pre-LN, a final layer norm."""
    layer_class: type

    def __init__(self, vocab_size, d_model=512, heads=8, layers=6, d_ff=2048, dropout=0.1, pe="sinusoidal",
                 max_len=512, pre_ln=False, key_dim=None, attn_dropout=None, pe_tmax=None, activation="relu",
                 embedding: Embeddings | None = None, pe_init_std=1.0):
        super().__init__()
        self.embed = embedding or Embeddings(vocab_size, d_model)
        self.pe = PositionalEncoding(pe, d_model, max_len, pe_tmax, pe_init_std)
        self.drop = Dropout(dropout)
        self.layers = nn.ModuleList(self.layer_class(d_model, heads, d_ff, dropout, pre_ln, key_dim, attn_dropout,
                                                     activation) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model) if pre_ln else nn.Identity()


class Encoder(_Stack):
    layer_class = EncoderLayer

    def forward(self, src, src_mask=None, need_weights=False):
        """src (B, S) ids -> (B, S, d_model), {encoder_layer{i}_self_att: (B, H, S, S)}"""
        if src_mask is None:
            src_mask = padding_mask(src, PAD_ID)
        x = self.drop(self.pe(self.embed(src)))   # sec. 3.4-3.5 and 5.4: dropout(E x sqrt(d) + PE)
        att = {}
        for i, layer in enumerate(self.layers):
            x, w = layer(x, src_mask, need_weights)
            if need_weights:
                att[f"encoder_layer{i + 1}_self_att"] = w
        return self.norm(x), att


class Decoder(_Stack):
    layer_class = DecoderLayer

    def forward(self, tgt, memory, src_mask=None, need_weights=False, caches=None, cross_kv=None, offset=0,
                kv_rows=None):
        """tgt (B, T) ids, memory (B, S, d) -> (B, T, d) and per-layer attention weights
        decoder_layer{i}_block1_self_att (B, H, T, T), decoder_layer{i}_block2_decenc_att (B, H, T, S).
        ``kv_rows``: see ``MultiHeadAttention.forward`` (decoding hypotheses against per-source keys)."""
        x = self.drop(self.pe(self.embed(tgt), offset))   # sec. 3.4-3.5 and 5.4
        att = {}
        for i, layer in enumerate(self.layers):
            x, w1, w2 = layer(x, memory, src_mask, need_weights,
                              cache=None if caches is None else caches[i],
                              cross_kv=None if cross_kv is None else cross_kv[i], kv_rows=kv_rows)
            if need_weights:
                att[f"decoder_layer{i + 1}_block1_self_att"] = w1
                att[f"decoder_layer{i + 1}_block2_decenc_att"] = w2
        return self.norm(x), att


@register_model("transformer")
class Transformer(Seq2Seq):
    """Transformer encoder-decoder (Vaswani et al. 2017); pe learned | sinusoidal | sinusoidal_tmax."""

    option_rules = {k: at_least(1) for k in ("d_model", "d_ff", "heads", "layers")}
    # runs recorded before records stated model_rules were trained with these (a sinusoidal table is not
    # in the checkpoint, so a changed T_max would load silently)
    legacy_defaults = {"pe_tmax_rule": "per_side", "pe_init_std": 0.02}

    def __init__(self, vocab_size: int, d_model: int = 512, d_ff: int = 2048, heads: int = 8, layers: int = 6,
                 enc_layers: int | None = None, dec_layers: int | None = None, key_dim: int | None = None,
                 dropout: float = 0.1, attn_dropout: float = 0.0, pe: str = "sinusoidal",
                 pe_tmax: int | None = None, pe_tmax_rule: str = "shared", pe_init_std: float = 1.0,
                 pre_ln: bool = False, tie_embeddings: bool = True,
                 activation: str = "relu", max_src_len: int = 512, max_tgt_len: int = 128):
        """pe_tmax_rule (``sinusoidal_tmax`` without ``pe_tmax``): "shared" = one T_max for both sides, the
        longest position either table holds (max(max_src_len, max_tgt_len + 1), the source length in
        practice: the paper's T_x); "per_side" = each side's own maximum length. ``pe_tmax`` sets T_max
        for both sides. pe_init_std: std of the learned tables at initialisation; 1.0 = the std of the
        scaled token embeddings they are added to (N(0, 1/d) times sqrt(d)), as BERT and GPT-2 start
        their position and token tables alike."""
        super().__init__()
        # the model checks its own options (the experiment file's errors quote these messages)
        for name, value, choices in (("pe", pe, PE_KINDS), ("activation", activation, ACTIVATIONS),
                                     ("pe_tmax_rule", pe_tmax_rule, ("shared", "per_side"))):
            if value not in choices:
                raise ValueError(f"{name} must be one of {', '.join(choices)}, not {value!r}."
                                 f"{did_you_mean(value, choices)}")
        for name, value in (("dropout", dropout), ("attn_dropout", attn_dropout)):
            if value is not None and not 0.0 <= value < 1.0:
                raise ValueError(f"{name} {value!r} must be in [0, 1)")
        if not pe_init_std > 0:
            raise ValueError(f"pe_init_std {pe_init_std!r} must be > 0")
        if pe_tmax is not None and pe_tmax < 2:
            raise ValueError(f"pe_tmax {pe_tmax!r} must be >= 2")
        self.vocab_size, self.d_model = vocab_size, d_model
        # +1: the decoder input is <bos> + target, one longer than the truncated target
        src_len, tgt_len = max_src_len, max_tgt_len + 1
        tmax_src = tmax_tgt = pe_tmax or (max(src_len, tgt_len) if pe_tmax_rule == "shared" else None)
        self.pe_rule = ("learned table, N(0, %g^2) at initialisation" % pe_init_std if pe == "learned" else
                        "sin/cos, base 10000" if pe == "sinusoidal" else
                        f"sin/cos, base T_max ({'pe_tmax' if pe_tmax else pe_tmax_rule})")
        kw = dict(d_model=d_model, heads=heads, d_ff=d_ff, dropout=dropout, pe=pe, pre_ln=pre_ln,
                  key_dim=key_dim, attn_dropout=attn_dropout, activation=activation, pe_init_std=pe_init_std)
        self.pe_init_std = pe_init_std
        src_emb = Embeddings(vocab_size, d_model)
        tgt_emb = src_emb if tie_embeddings else Embeddings(vocab_size, d_model)
        self.encoder = Encoder(vocab_size, layers=enc_layers or layers, max_len=src_len, embedding=src_emb,
                               pe_tmax=tmax_src, **kw)
        self.decoder = Decoder(vocab_size, layers=dec_layers or layers, max_len=tgt_len, embedding=tgt_emb,
                               pe_tmax=tmax_tgt, **kw)
        self.generator = nn.Linear(d_model, vocab_size)
        if tie_embeddings:  # three-way weight tying (section 3.4)
            self.generator.weight = src_emb.weight
        self.tie = tie_embeddings
        self._init()

    def _init(self):
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name and "pe.table" not in name and p is not self.generator.weight:
                nn.init.xavier_uniform_(p)

    def model_rules(self) -> dict:
        """The positional-encoding rule and bases, for the run record and the tables' settings."""
        out = {"pe_rule": self.pe_rule,
               "pe_base": {"encoder": self.encoder.pe.base, "decoder": self.decoder.pe.base}}
        if self.encoder.pe.kind == "learned":
            out = {"pe_rule": self.pe_rule, "pe_init_std": self.pe_init_std}
        return out

    def components(self):
        emb = list({id(p): p for p in list(self.encoder.embed.parameters()) + list(self.decoder.embed.parameters())}.values())
        enc = [p for n, p in self.encoder.named_parameters() if not n.startswith("embed.")]
        dec = [p for n, p in self.decoder.named_parameters() if not n.startswith("embed.")]
        return {"embedding": emb, "encoder": enc, "decoder": dec, "output": list(self.generator.parameters())}

    def forward(self, batch, need_attention: bool = False) -> StepOutput:
        """log_probs = log_softmax(generator(decoder output)) (B, T, V), computed when read; the
        objective takes the fused ``token_losses`` path (see ``fast.outputs.LazyOutput``)."""
        src_mask = padding_mask(batch.src)
        memory, enc_att = self.encoder(batch.src, src_mask, need_attention)
        h, dec_att = self.decoder(self.feed(batch.tgt_in), memory, src_mask, need_attention)
        return LazyOutput(h, self.generator, attention={**enc_att, **dec_att} if need_attention else {})

    def encode(self, batch):
        """Decoder state. The encoder output, source mask and cross-attention keys/values keep one row
        per source however many hypotheses decode from it: ``row`` maps each hypothesis to its source,
        and ``reorder`` moves only the per-hypothesis self-attention caches."""
        src_mask = padding_mask(batch.src)
        memory, _ = self.encoder(batch.src, src_mask)
        # contiguous once here, so that every decoding step's attention matmuls take them without copies
        cross_kv = [tuple(t.contiguous() for t in layer.cross_att.project_kv(memory)) for layer in self.decoder.layers]
        B = batch.src.size(0)
        k0 = cross_kv[0][0]  # the mask as an additive bias in the keys' precision, built once per source
        src_bias = torch.zeros(src_mask.shape, dtype=k0.dtype, device=k0.device).masked_fill_(~src_mask, float("-inf"))
        return {"memory": memory, "src_mask": src_mask, "src_bias": src_bias, "cross_kv": cross_kv,
                "caches": [{} for _ in self.decoder.layers], "t": torch.zeros((), dtype=torch.long),
                "row": torch.arange(B, device=batch.src.device), "group": 1}

    def decode_step(self, state, prev):
        h = self.decode_hidden(state, prev)
        logits = self.generator(h)
        log_probs = log_softmax_fp32(logits)
        state["logits"] = logits  # for the decoder's repetition penalty (taken out before reorder)
        return log_probs, state

    def decode_hidden(self, state, prev):
        """One decoding step up to the output layer: the decoder's last output (N, d) for ``prev`` (N,),
        with the caches extended and ``state["t"]`` advanced in place."""
        t = int(state["t"])
        group = state.get("group", 1)
        kv_rows = None if group == 1 else (group or state["row"])
        if incremental.applies(self, state):   # inference: transformer_incremental.py
            h = incremental.hidden_step(self, state, prev, t, kv_rows)
        else:
            h, _ = self.decoder(self.feed(prev).unsqueeze(1), state["memory"], state.get("src_bias", state["src_mask"]),
                                caches=state["caches"], cross_kv=state["cross_kv"], offset=t, kv_rows=kv_rows)
        state["t"] = state["t"] + 1
        return h[:, -1]

    def reorder(self, state, index):
        """Hypotheses ``index`` of the state: the self-attention caches are indexed; the per-source
        tensors stay as they are and ``row`` records each hypothesis' source. ``group`` is K when the rows
        are K consecutive hypotheses per source (beam search; cross-attention then shares the keys
        without copies), 1 for one row per source in order, 0 otherwise (keys gathered per row)."""
        if "row" not in state:
            return super().reorder(state, index)
        out = dict(state)
        out["caches"] = [{k: v.index_select(0, index) for k, v in c.items()} for c in state["caches"]]
        reorder_rows(state, out, index, state["src_mask"].size(0))
        return out

    @property
    def cross_attention(self) -> str:
        """The last decoder layer's source-target attention (the report's heat map)."""
        return f"decoder_layer{len(self.decoder.layers)}_block2_decenc_att"

    def attention_maps(self) -> list[str]:
        """The last decoder layer's self-attention and source-target attention (attention.json)."""
        return [f"decoder_layer{len(self.decoder.layers)}_block1_self_att", self.cross_attention]

    def positional_tables(self):
        return {name: mod.table for name, mod in self.named_modules() if isinstance(mod, PositionalEncoding)}
