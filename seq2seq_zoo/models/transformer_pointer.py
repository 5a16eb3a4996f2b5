"""Transformer with a copy switch: See et al.'s (2017) pointer-generator mixture on top of ``transformer``.

The copy distribution comes from one extra attention head over the encoder output, queried with the
decoder's last output h_t (after the final LayerNorm with pre-LN):

    a_t   = softmax((h_t W_q)(H W_k)^T / sqrt(d) + mask)         (one head, d = d_model; H: encoder output)
    h*_t  = a_t H                                                 (its context vector)
    p_gen = sigmoid(w^T [h_t; h*_t; x_t] + b)                     (x_t: the scaled embedding of y_{t-1})
    P(w)  = p_gen P_vocab(w) + (1 - p_gen) sum_{j: w_j = w} a_tj  (eq. 9, over the extended vocabulary)

P_vocab is the Transformer's own output layer (tied to the embeddings when ``tie_embeddings``). The
mixture is ``pointer.copy_mixture``: in log space, over |V| + the batch's source OOV words, so an OOV word
of the source (a name, in dialogue summaries) can be written although the vocabulary lacks it; extended
ids fed back to the decoder become <unk>. A dedicated head, rather than one of the cross-attention heads
(Gehrmann et al. 2018 pick one at random), keeps the cross-attention on PyTorch's fused kernels, which do
not return their weights; it adds 2 d^2 + 3 d + 1 weights (the ``pointer`` component). In training the
loss is ``losses.copy_losses`` (through ``fast.outputs.CopyOutput``): the mixture read at the target and
source words only, without the (B, T, V + OOVs) log-probabilities.

Everything else (options, positional encodings, pre/post-LN, incremental decoding with one key/value
copy per source) is ``transformer``'s.
"""
from __future__ import annotations

import inspect
import math

import torch
from torch import nn

from seq2seq_zoo.models.base import StepOutput
from seq2seq_zoo.models.layers import padding_mask
from seq2seq_zoo.models.copying import copy_mixture, source_words, upcast
from seq2seq_zoo.models.fast.outputs import CopyOutput
from seq2seq_zoo.models.transformer import Transformer
from seq2seq_zoo.registry import register_model


@register_model("transformer_pointer")
class TransformerPointer(Transformer):
    """Transformer encoder-decoder with a pointer-generator copy switch (one dedicated copy head)."""

    legacy_defaults = {}   # every run of it was recorded with model_rules

    def __init__(self, vocab_size: int, **options):
        super().__init__(vocab_size, **options)
        d = self.d_model
        self.copy_q = nn.Linear(d, d, bias=False)
        self.copy_k = nn.Linear(d, d, bias=False)
        self.p_gen = nn.Linear(3 * d, 1)             # [h_t; h*_t; x_t] -> p_gen logit
        for lin in (self.copy_q, self.copy_k):
            nn.init.xavier_uniform_(lin.weight)

    # the options are transformer's: the registry's option checks and data context read this signature
    __init__.__signature__ = inspect.signature(Transformer.__init__)

    def model_rules(self) -> dict:
        return {**super().model_rules(),
                "copy": "one dedicated head over the encoder output, queried with the decoder output; "
                        "p_gen from [h_t; h*_t; x_t]; mixture in log space (pointer.copy_mixture)"}

    def components(self):
        out = super().components()
        out["pointer"] = [*self.copy_q.parameters(), *self.copy_k.parameters(), *self.p_gen.parameters()]
        return out

    def _copy(self, h, keys, memory, bias):
        """h (B, T, d) queries, keys/memory (B, S, d), bias (B, 1, S) additive mask -> a (B, T, S) fp32+,
        context (B, T, d)."""
        scores = torch.matmul(self.copy_q(h), keys.transpose(1, 2).to(h.dtype)) / math.sqrt(self.d_model)
        a = torch.softmax(upcast(scores) + bias, -1)
        return a, torch.matmul(a.to(memory.dtype), memory)

    def _gen_logit(self, h, context, x):
        """p_gen's logit (B, T) from [h_t; h*_t; x_t], in at least fp32."""
        feats = torch.cat([h, context.to(h.dtype), x.to(h.dtype)], -1)
        return upcast(self.p_gen(feats.to(self.p_gen.weight.dtype))).squeeze(-1)

    def _mix(self, h, context, x, a, src_ext, n_oov, same, first):
        """Log-probs over the extended vocabulary (B, T, V + n_oov) and p_gen (B, T)."""
        log_vocab = torch.log_softmax(upcast(self.generator(h)), -1)
        z = self._gen_logit(h, context, x)
        return copy_mixture(log_vocab, z, a, src_ext, n_oov, same, first), torch.sigmoid(z)

    def forward(self, batch, need_attention: bool = False) -> StepOutput:
        src_mask = padding_mask(batch.src)
        memory, enc_att = self.encoder(batch.src, src_mask, need_attention)
        tgt = self.feed(batch.tgt_in)
        h, dec_att = self.decoder(tgt, memory, src_mask, need_attention)
        bias = torch.zeros(src_mask.shape, dtype=torch.float32, device=h.device).masked_fill(~src_mask, float("-inf"))
        a, context = self._copy(h, self.copy_k(memory), memory, bias.view(bias.size(0), 1, -1))
        same, first = source_words(batch.src_ext, a.dtype)
        att = {**enc_att, **dec_att} if need_attention else {}
        if need_attention:
            att["copy_att"] = a.unsqueeze(1)
        # log-probs made only when read; the loss reads the mixture at the target and source words only
        z = self._gen_logit(h, context, self.decoder.embed(tgt))
        return CopyOutput(h, self.generator, z, a, batch.src_ext, int(batch.n_oov), same, first, att)

    def encode(self, batch):
        state = super().encode(batch)
        memory = state["memory"]
        state["copy_keys"] = self.copy_k(memory)
        state["src_ext"], state["n_oov"] = batch.src_ext, int(batch.n_oov)
        state["src_same"], state["src_first"] = source_words(batch.src_ext, memory.dtype)
        return state

    def decode_step(self, state, prev):
        x = self.decoder.embed(self.feed(prev))                    # (N, d): x_t of p_gen
        h = self.decode_hidden(state, prev)                         # (N, d)
        N, B = h.size(0), state["src_ext"].size(0)
        group = state.get("group", 1)
        per_source = ("copy_keys", "memory", "src_bias", "src_ext", "src_same", "src_first")
        src = {k: state[k] for k in per_source}
        if group == 0:       # hypotheses in no fixed order: each row takes its source's tensors
            src = {k: v.index_select(0, state["row"]) for k, v in src.items()}
            K, B = 1, N
        else:                # K consecutive hypotheses per source (K = 1: one row per source, in order)
            K = N // B
        h, x = h.view(B, K, -1), x.view(B, K, -1)
        a, context = self._copy(h, src["copy_keys"], src["memory"], upcast(src["src_bias"]).view(B, 1, -1))
        log_probs, _ = self._mix(h, context, x, a, src["src_ext"], state["n_oov"], src["src_same"],
                                 src["src_first"])
        return log_probs.reshape(N, -1), state
