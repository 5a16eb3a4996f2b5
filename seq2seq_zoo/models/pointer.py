"""Pointer-generator network (See, Liu & Manning 2017, "Get To The Point", sec. 2.2-2.3) on top of the
BiLSTM + additive-attention model of ``rnn.py``.

Two variants (``variant``), both with context vector h*_t = c_t (2n) and decoder state s_t = (h_t,
cell_t) of the top LSTM layer:

``see`` (default; the paper, sec. 2.1-2.2): the decoder LSTM reads x_t = E y_{t-1} (m) and gives s_t;
attention is queried with s_t:

    e^t_i = v^T tanh(W_h h_i + W_s s_t [+ w_c cov^t_i] + b_attn),  a^t = softmax(e^t)   (eq. 1-2, 11)
    P_vocab = softmax(V'(V [s_t; h*_t] + b) + b')                    (eq. 4; two linear layers)

``bahdanau`` (the rule of the records made before the second-round correctness fixes): attention is queried with s_{t-1}, the
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
words only: ``copy_losses``). The ``pointer`` row of the parameter table is p_gen's 4n + m + 1 weights; with
``variant = "bahdanau"`` everything else equals ``bilstm`` with ``output_layers = 2``; with ``see`` the
decoder LSTM's input is m wide (not m + 2n) and P_vocab's first layer 3n (not 3n + m).

Coverage (``coverage = true``) is the attention models' switch (see ``rnn._Attentional``); See et al.
trained without it and switched it on for a final phase (``train.init_from`` a checkpoint).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.models.kernels import DeferredOutput, logit_stats
from seq2seq_zoo.models.rnn import BiLSTMSeq2Seq
from seq2seq_zoo.registry import register_model

NEG_BIG = -1e4   # log of "no mass": finite, so logaddexp and its gradient stay defined (exp(-1e4) = 0)
VARIANTS = ("see", "bahdanau")


def _up(x: torch.Tensor) -> torch.Tensor:
    """At least fp32 (bf16 under autocast -> fp32; fp64 stays fp64, for gradient checks)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


@register_model("pointer_generator")
class PointerGenerator(BiLSTMSeq2Seq):
    """BiLSTM + attention with a copy switch p_gen over an extended vocabulary (See et al. 2017)."""

    legacy_defaults = {"variant": "bahdanau"}   # runs recorded before records stated model_rules

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

    @property
    def see_rule(self) -> bool:
        return self.variant == "see"

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
        if self.impl == "fast":
            enc["src_same"], enc["src_first"] = source_words(batch.src_ext, enc["keys"].dtype)
        return enc, hid

    def _extra_inputs(self, c, hid, y):
        h, cell = hid[0][-1], hid[1][-1]                          # top decoder layer s_t = (h_t, cell_t)
        return torch.cat([_up(c), _up(h), _up(cell), _up(y)], -1)

    def _gen_logit(self, extra):
        """p_gen's logit (...) from its inputs [h*_t; h_t; cell_t; x_t], in at least fp32."""
        return _up(self.p_gen(extra.to(self.p_gen.weight.dtype))).squeeze(-1)

    def _lazy_output(self, feats, a, extra, enc, att, aux):
        # the loss reads the mixture at the target and source words only (``copy_losses``)
        h, generator = self._last_output_layer(feats)
        return CopyOutput(h, generator, self._gen_logit(extra), a, enc["src_ext"], enc["n_oov"], enc["src_same"],
                          enc["src_first"], att, aux)

    def _distribution(self, feats, a, extra, enc):
        log_vocab = torch.log_softmax(_up(self.output(self.drop(feats))), -1)              # (..., V)
        z = self._gen_logit(extra)                                                          # p_gen logit (...)
        return copy_mixture(log_vocab, z, a, enc["src_ext"], enc["n_oov"], enc.get("src_same"),
                            enc.get("src_first")), torch.sigmoid(z)


def source_words(src_ext: torch.Tensor, dtype: torch.dtype = torch.float32):
    """Which source positions hold the same word, (B, S, S) in ``dtype`` (fp64 stays fp64, anything
    else fp32), and each word's first position (B, S): what ``copy_mixture``'s fast path needs."""
    same = src_ext.unsqueeze(2) == src_ext.unsqueeze(1)
    S = same.size(-1)
    earlier = torch.ones(S, S, dtype=torch.bool, device=same.device).tril(-1)
    return same.to(dtype if dtype == torch.float64 else torch.float32), ~(same & earlier).any(-1)


def copy_mixture(log_vocab: torch.Tensor, z: torch.Tensor, a: torch.Tensor, src_ext: torch.Tensor, n_oov: int,
                 src_same: torch.Tensor | None = None, src_first: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 9 in log space over the extended vocabulary: log P(w) = logaddexp(log p_gen + log P_vocab(w),
    log(1 - p_gen) + log sum_{j: w_j = w} a_j), p_gen = sigmoid(z). log_vocab (..., V) fp32+, z (...),
    a (..., S) the copy attention, src_ext (B, S) extended source ids; leading dims (B, T): T steps, or
    a source's hypotheses. P_vocab is zero on the n_oov extended columns: an OOV word can only be copied.

    With ``src_same`` / ``src_first`` (``source_words``; leading dims (B, T) only) the mixture is taken at
    the source positions (copy mass of position j's word = a @ same, (..., S)) and written into
    log p_gen P_vocab there, instead of scattering attention onto the full extended vocabulary and mixing
    every column. Each word is written from its first position (its repeats write the same value, without
    gradient). Columns the source does not hold keep log p_gen P_vocab exactly (the reference adds
    log(1 + (1 - p_gen) e^-1e4) there, which is 0 at any column with a finite log-prob)."""
    # without gradient (decoding) the (..., V + n_oov) result is written once and mixed in place: a beam step
    # of pointer_generator made three copies of it (the sum, the concatenation, the scatter)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (log_vocab, z, a))
    V = log_vocab.size(-1)
    if grad:
        gen = torch.cat([F.logsigmoid(z).unsqueeze(-1) + log_vocab,
                         log_vocab.new_full((*log_vocab.shape[:-1], n_oov), NEG_BIG)], -1)   # log p_gen P_vocab
    else:
        gen = log_vocab.new_empty((*log_vocab.shape[:-1], V + n_oov))
        torch.add(log_vocab, F.logsigmoid(z).unsqueeze(-1), out=gen[..., :V])
        gen[..., V:] = NEG_BIG
    tiny = torch.finfo(gen.dtype).tiny
    if src_same is not None:
        index = src_ext.unsqueeze(1).expand(*a.shape)                                      # (B, T, S)
        copy = torch.bmm(a.to(gen.dtype), src_same.to(gen.dtype))                          # copy mass per position
        log_copy = torch.where(copy > 0, copy.clamp_min(tiny).log(), torch.full_like(copy, NEG_BIG))
        mixed = torch.logaddexp(gen.gather(-1, index), F.logsigmoid(-z).unsqueeze(-1) + log_copy)
        if not grad:
            return gen.scatter_(-1, index, mixed)
        mixed = torch.where(src_first.unsqueeze(1), mixed, mixed.detach())
        return gen.scatter(-1, index, mixed)
    index = src_ext.view(src_ext.size(0), *([1] * (a.dim() - 2)), src_ext.size(1)).expand_as(a)
    copy = torch.zeros_like(gen).scatter_add(-1, index, a.to(gen.dtype))                   # attention on w_j
    log_copy = torch.where(copy > 0, copy.clamp_min(tiny).log(), torch.full_like(copy, NEG_BIG))
    return torch.logaddexp(gen, F.logsigmoid(-z).unsqueeze(-1) + log_copy)


def copy_losses(h: torch.Tensor, generator: nn.Linear, z: torch.Tensor, a: torch.Tensor, src_ext: torch.Tensor,
                n_oov: int, src_same: torch.Tensor, src_first: torch.Tensor, target: torch.Tensor,
                label_smoothing: float = 0.0, smooth_width: int | None = None):
    """``base.token_losses(copy_mixture(log_softmax(generator(h)), z, a, ...), target, ...)`` without the
    (B, T, V + n_oov) log-probabilities: (sum of training loss, sum of NLL, target tokens).

    The loss reads the mixture at the target word and at the source words only; everywhere else
    log P(w) = log p_gen + z_w - lse. So the output layer gives, per real target row, its log-sum-exp
    and its logits at the target and the source words (``kernels.logit_stats``, in row blocks), and
    the smoothing term's sum over the first ``width`` columns is width (log p_gen - lse) + sum_w z_w
    (h . sum_w W_w + sum_w b_w, from the weights) plus, at each source word (its first position), the
    mixture's excess over log p_gen P_vocab. h (B, T, d) is the generator's input, z (B, T) the p_gen
    logit, a (B, T, S) the copy attention, target (B, T) extended ids; ``source_words`` gives
    src_same / src_first. Same values and gradients as the unfused path up to float rounding."""
    V = generator.weight.size(0)
    width = smooth_width or V + n_oov
    target = target.masked_fill(target >= V + n_oov, 1)            # base.targets_for: -> <unk>
    keep = (target != PAD_ID).reshape(-1)
    n = int(keep.sum())
    B, T, S = a.shape
    if n == 0:
        zero = (h.sum() * 0).float() + (z.sum() * 0).float()
        return zero, zero.detach(), 0
    # everything but the output layer in fp32 (fp64 for fp64 models), outside any autocast
    no_autocast = torch.autocast(h.device.type, enabled=False)
    with no_autocast:
        rows = keep.nonzero().squeeze(1)
        copy = torch.bmm(a.to(src_same.dtype), src_same)             # copy mass of each position's word
        src = src_ext.unsqueeze(1).expand(B, T, S).reshape(B * T, S).index_select(0, rows)      # (N, S)
        first = src_first.unsqueeze(1).expand(B, T, S).reshape(B * T, S).index_select(0, rows)
        copy = copy.reshape(B * T, S).index_select(0, rows)
        y = target.reshape(-1).index_select(0, rows)                                             # (N,)
        zf = _up(z).reshape(-1).index_select(0, rows)
        hf = h.reshape(B * T, -1).index_select(0, rows)
        ids = torch.cat([y.unsqueeze(1), src], 1)                                                # (N, 1 + S)
        in_vocab = ids < V
    # the output layer in the forward's precision (bf16 under autocast, as nn.Linear), statistics in fp32
    lse, picked = logit_stats(hf, generator.weight, generator.bias, ids.masked_fill(~in_vocab, 0))
    with no_autocast:
        return _copy_loss_terms(hf, generator, zf, lse, picked, in_vocab, copy, src, first, y, V, width,
                                label_smoothing, n)


def _copy_loss_terms(hf, generator, zf, lse, picked, in_vocab, copy, src, first, y, V, width, label_smoothing, n):
    """``copy_losses`` from the output layer's statistics on: the mixture at the target and source words."""
    log_gen, log_copy_gate = F.logsigmoid(zf), F.logsigmoid(-zf)
    gen = torch.where(in_vocab, log_gen.unsqueeze(1) + picked - lse.unsqueeze(1),
                      torch.full_like(picked, NEG_BIG))                                          # log p_gen P_vocab
    tiny = torch.finfo(gen.dtype).tiny
    copy = copy.to(gen.dtype)
    log_copy = torch.where(copy > 0, copy.clamp_min(tiny).log(), torch.full_like(copy, NEG_BIG))
    mixed = torch.logaddexp(gen[:, 1:], log_copy_gate.unsqueeze(1) + log_copy)                 # (N, S)
    at = (src == y.unsqueeze(1)) & first                                                         # y's first position
    log_p = torch.where(at.any(1), mixed.gather(1, at.to(torch.uint8).argmax(1, keepdim=True)).squeeze(1),
                        gen[:, 0])
    nll_sum = -log_p.sum()
    if label_smoothing <= 0:
        return nll_sum, nll_sum.detach(), n
    base = min(width, V)
    w = generator.weight[:base]
    col_sum = hf.to(gen.dtype) @ w.sum(0).to(gen.dtype)              # sum of the first ``base`` logits
    if generator.bias is not None:
        col_sum = col_sum + generator.bias[:base].sum().to(gen.dtype)
    total = base * (log_gen - lse) + col_sum + max(0, width - V) * NEG_BIG
    excess = torch.where(first & (src < width), mixed - gen[:, 1:], torch.zeros_like(mixed)).sum(1)
    uniform = -(total + excess) / width
    loss_sum = (1 - label_smoothing) * nll_sum + label_smoothing * uniform.sum()
    return loss_sum, nll_sum.detach(), n


class CopyOutput(DeferredOutput):
    """A copy model's output whose (B, T, V + n_oov) log-probabilities are made only when read (the
    unfused ``copy_mixture``, in the forward's precision and grad mode); the cross-entropy objective asks
    for ``token_losses`` instead, which ``copy_losses`` takes without them."""

    def __init__(self, h, generator, z, a, src_ext, n_oov, src_same, src_first, attention, aux_losses=None):
        self._args = (h, generator, z, a, src_ext, int(n_oov), src_same, src_first)
        super().__init__(h, attention, aux_losses, extras={"p_gen": torch.sigmoid(z)})

    def _make_log_probs(self):
        h, generator, z, a, src_ext, n_oov, same, first = self._args
        return copy_mixture(torch.log_softmax(_up(generator(h)), -1), z, a, src_ext, n_oov, same, first)

    def _losses(self, target, label_smoothing, smooth_width):
        return copy_losses(*self._args, target, label_smoothing, smooth_width)
