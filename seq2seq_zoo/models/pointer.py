"""Pointer-generator network (See, Liu & Manning 2017, "Get To The Point", sec. 2.2-2.3) on top of the
BiLSTM + additive-attention model of ``rnn.py``.

At every decoder step t, with context vector h*_t = c_t (2n), decoder state s_t = (h_t, cell_t) of the
top LSTM layer (2n) and decoder input x_t = E y_{t-1} (m):

    P_vocab = softmax(V'(V [s_t; E y_{t-1}; c_t] + b) + b')          (eq. 4; two linear layers)
    p_gen   = sigmoid(w_h*^T h*_t + w_s^T s_t + w_x^T x_t + b_ptr)    (eq. 8; 2n + 2n + m + 1 weights)
    P(w)    = p_gen P_vocab(w) + (1 - p_gen) sum_{j: w_j = w} a_tj     (eq. 9)

over the extended vocabulary V_ext = V + this batch's largest number of source OOV words (each source's
OOV words have ids |V|, |V|+1, ... in ``batch.src_ext``). P_vocab is zero on the extension; an OOV word
can only be copied. Extended ids fed back to the decoder become <unk> (``Seq2Seq.feed``); the loss is
taken on the extended target ids (``batch.tgt_out``), so a target OOV word that occurs in the source is
learned as a copy. Relative to ``bilstm`` with ``output_layers = 2`` the pointer adds exactly
4n + m + 1 trainable weights (the ``pointer`` row of the parameter table).

Coverage (``coverage = true``) is the attention models' switch (see ``rnn._Attentional``); See et al.
trained without it and switched it on for a final phase (``train.init_from`` a checkpoint).
"""
from __future__ import annotations

import torch
from torch import nn

from seq2seq_zoo.models.rnn import BiLSTMSeq2Seq
from seq2seq_zoo.registry import register_model

PROB_FLOOR = 1e-30  # log(0) guard: extended ids absent from a source get log-prob log(1e-30) ~ -69


def _up(x: torch.Tensor) -> torch.Tensor:
    """At least fp32 (bf16 under autocast -> fp32; fp64 stays fp64, for gradient checks)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


@register_model("pointer_generator")
class PointerGenerator(BiLSTMSeq2Seq):
    """BiLSTM + attention with a copy switch p_gen over an extended vocabulary (See et al. 2017)."""

    def __init__(self, vocab_size: int, emb_dim: int = 128, hidden: int = 256, layers: int = 1,
                 dropout: float = 0.0, share_embeddings: bool = True, embeddings: str = "random",
                 freeze_embeddings: bool = False, coverage: bool = False, cov_loss_weight: float = 1.0,
                 output_layers: int = 2, pretrained_embeddings: torch.Tensor | None = None):
        super().__init__(vocab_size, emb_dim, hidden, layers, dropout, share_embeddings, embeddings,
                         freeze_embeddings, coverage, cov_loss_weight, output_layers, pretrained_embeddings)

    def build(self):
        super().build()
        n, m = self.hidden, self.emb_dim
        self.p_gen = nn.Linear(2 * n + 2 * n + m, 1)   # [h*_t; h_t; cell_t; x_t] -> p_gen logit

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
        return torch.cat([_up(c), _up(h), _up(cell), _up(y)], -1)

    def _distribution(self, feats, a, extra, enc):
        p_vocab = _up(self.output(self.drop(feats))).softmax(-1)                 # (..., V)
        p_gen = torch.sigmoid(_up(self.p_gen(extra.to(self.p_gen.weight.dtype)))).squeeze(-1)   # (...)
        lead = p_vocab.shape[:-1]
        p_ext = torch.cat([p_gen.unsqueeze(-1) * p_vocab, p_vocab.new_zeros(*lead, enc["n_oov"])], -1)
        src_ext = enc["src_ext"]
        index = src_ext.view(src_ext.size(0), *([1] * (a.dim() - 2)), src_ext.size(1)).expand_as(a)
        p_ext = p_ext.scatter_add(-1, index, (1.0 - p_gen).unsqueeze(-1) * _up(a))   # copy mass onto w_j
        return p_ext.clamp_min(PROB_FLOOR).log(), p_gen
