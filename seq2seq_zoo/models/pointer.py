"""Pointer-generator network (See, Liu & Manning 2017, "Get To The Point", sec. 2.2-2.3) on top of the
BiLSTM + additive-attention model of ``rnn.py``.

Two variants (``variant``), both with context vector h*_t = c_t (2n) and decoder state s_t = (h_t,
cell_t) of the top LSTM layer:

``see`` (default; the paper, sec. 2.1-2.2): the decoder LSTM reads x_t = E y_{t-1} (m) and gives s_t;
attention is queried with s_t:

    e^t_i = v^T tanh(W_h h_i + W_s s_t [+ w_c cov^t_i] + b_attn),  a^t = softmax(e^t)   (eq. 1-2, 11)
    P_vocab = softmax(V'(V [s_t; h*_t] + b) + b')                    (eq. 4; two linear layers)

``bahdanau`` (the rule of older records, kept so they load): attention is queried with s_{t-1}, the
LSTM reads [E y_{t-1}; c_t], and P_vocab's input is [s_t; E y_{t-1}; c_t] (``bilstm``'s decoder).

In both:

    p_gen   = sigmoid(w_h*^T h*_t + w_s^T s_t + w_x^T x_t + b_ptr)    (eq. 8; 2n + 2n + m + 1 weights)
    P(w)    = p_gen P_vocab(w) + (1 - p_gen) sum_{j: w_j = w} a_tj     (eq. 9)

taken in log space: log P(w) = logaddexp(log p_gen + log_softmax(...)(w), log(1 - p_gen) + log(copy
mass of w)), so a word with P below 1e-30 keeps its true log-prob and its gradient (only a copy mass
below the smallest normal float is floored).

over the extended vocabulary V_ext = V + this batch's largest number of source OOV words (each source's
OOV words have ids |V|, |V|+1, ... in ``batch.src_ext``). P_vocab is zero on the extension; an OOV word
can only be copied. Extended ids fed back to the decoder become <unk> (``Seq2Seq.feed``); the loss is
taken on the extended target ids (``batch.tgt_out``), so a target OOV word that occurs in the source is
learned as a copy (the fast implementation's training loss reads the mixture at the target and source
words only: ``losses.copy_losses``). The ``pointer`` row of the parameter table is p_gen's 4n + m + 1 weights; with
``variant = "bahdanau"`` everything else equals ``bilstm`` with ``output_layers = 2``; with ``see`` the
decoder LSTM's input is m wide (not m + 2n) and P_vocab's first layer 3n (not 3n + m).

Coverage (``coverage = true``) is the attention models' switch (see ``rnn._Attentional``); See et al.
trained without it and switched it on for a final phase (``train.init_from`` a checkpoint).
"""
from __future__ import annotations

import torch
from torch import nn

from seq2seq_zoo.models.copying import copy_mixture, upcast
from seq2seq_zoo.models.fast.rnn import FastPointer
from seq2seq_zoo.models.rnn import BiLSTMSeq2Seq
from seq2seq_zoo.registry import register_model

VARIANTS = ("see", "bahdanau")


@register_model("pointer_generator")
class PointerGenerator(BiLSTMSeq2Seq):
    """BiLSTM + attention with a copy switch p_gen over an extended vocabulary (See et al. 2017)."""

    legacy_defaults = {"variant": "bahdanau"}   # runs recorded before records stated model_rules
    FAST = (FastPointer,)

    def __init__(self, vocab_size: int, emb_dim: int = 128, hidden: int = 256, layers: int = 1,
                 dropout: float = 0.0, share_embeddings: bool = True, embeddings: str = "random",
                 freeze_embeddings: bool = False, coverage: bool = False, cov_loss_weight: float = 1.0,
                 output_layers: int = 2, pretrained_embeddings: torch.Tensor | None = None, variant: str = "see",
                 impl: str = "fast"):
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, not {variant!r}")
        self.variant = variant
        super().__init__(vocab_size, emb_dim, hidden, layers, dropout, share_embeddings, embeddings,
                         freeze_embeddings, coverage, cov_loss_weight, output_layers, pretrained_embeddings, impl)

    def build(self):
        super().build()
        n, m = self.hidden, self.emb_dim
        if self.variant == "see":  # the LSTM reads E y_{t-1}; P_vocab reads [s_t; h*_t] (eq. 4)
            self.decoder = nn.LSTM(m, n, self.layers, batch_first=True, dropout=self.rnn_dropout)
            self.output = self.make_output(n + 2 * n)
        self.p_gen = nn.Linear(2 * n + 2 * n + m, 1)   # [h*_t; h_t; cell_t; x_t] -> p_gen logit

    def model_rules(self) -> dict:
        return {"pointer_variant": "see: attention queried with s_t, P_vocab from [s_t; h*_t] (eq. 4), LSTM input "
                                   "E y_{t-1}" if self.variant == "see" else
                                   "bahdanau: attention queried with s_{t-1}, P_vocab from [s_t; E y_{t-1}; c_t]",
                "mixture": "log space (logaddexp of the generation and copy terms)"}

    def _step(self, enc, hid, y, cov):
        if self.variant != "see":
            return super()._step(enc, hid, y, cov)
        s, hid = self.decoder(y.unsqueeze(1), hid)                        # s_t = LSTM(s_{t-1}, E y_{t-1})
        c, a = self.attention(hid[0][-1], enc["memory"], enc["mask"], enc["keys"], cov)   # eq. 1-3, with s_t
        s = s[:, 0]
        return torch.cat([s, c.to(s.dtype)], -1), hid, a, self._extra_inputs(c, hid, y)

    def components(self):
        out = super().components()
        out["decoder"] = [p for p in out["decoder"] if all(p is not q for q in self.p_gen.parameters())]
        out["pointer"] = list(self.p_gen.parameters())
        return out

    def init_state(self, batch):
        enc, hid = super().init_state(batch)
        enc["src_ext"] = batch.src_ext
        enc["n_oov"] = int(batch.n_oov)
        return enc, hid

    def _extra_inputs(self, c, hid, y):
        h, cell = hid[0][-1], hid[1][-1]                          # top decoder layer s_t = (h_t, cell_t)
        return torch.cat([upcast(c), upcast(h), upcast(cell), upcast(y)], -1)

    def _gen_logit(self, extra):
        """p_gen's logit (...) from its inputs [h*_t; h_t; cell_t; x_t], in at least fp32 (eq. 8)."""
        return upcast(self.p_gen(extra.to(self.p_gen.weight.dtype))).squeeze(-1)

    def _distribution(self, feats, a, extra, enc):
        log_vocab = torch.log_softmax(upcast(self.output(self.drop(feats))), -1)              # P_vocab, eq. 4
        z = self._gen_logit(extra)                                                          # p_gen, eq. 8
        return copy_mixture(log_vocab, z, a, enc["src_ext"], enc["n_oov"], enc.get("src_same"),   # eq. 9
                            enc.get("src_first")), torch.sigmoid(z)
