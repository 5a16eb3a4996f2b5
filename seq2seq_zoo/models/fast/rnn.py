"""The fast path of the recurrent family (``impl = "fast"``, the default): mixins that a model class
names in its ``FAST`` and that ``rnn._Recurrent.fast_variant()`` puts in front of it (the class
``_Recurrent.create`` builds for ``impl = "fast"``), overriding the encoder run, the teacher-forced pass
and the decoding step. The model's parameters, values (up to float rounding)
and checkpoints are those of the class itself, whose methods (``impl = "reference"``) follow the papers
step by step; tests check the loss, the gradients and greedy and beam decodes of both.

What changes (``rnn_kernels`` says why each is faster):

- the encoder runs unpacked where that is the same computation (``rnn_kernels.run_encoder``);
- the output layer is fused with the loss (``outputs.LazyOutput``, ``outputs.CopyOutput``);
- attention energies use tanh x = 2 sigmoid(2x) - 1 on keys doubled once per source
  (``rnn_kernels.additive_energy``), the context's gradient with respect to the encoder output is taken
  once (``rnn_kernels.DeferredContext``), and the decoder cell runs with its input projection of all
  steps taken before the loop (``rnn_kernels.StackedCell``);
- in beam search, per-source tensors keep one row per source however many hypotheses decode from it
  (``row`` maps each hypothesis to its source) and ``reorder`` moves only the per-hypothesis ones.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.models.base import StepOutput, reorder_rows
from seq2seq_zoo.models.copying import source_words
from seq2seq_zoo.models.fast import native
from seq2seq_zoo.models.fast.outputs import CopyOutput, LazyOutput
from seq2seq_zoo.models.fast.rnn_kernels import (DeferredContext, StackedCell, additive_energy, cpu_bf16_matmuls,
                                                 double_keys, fp32_on_cpu, half_to_float, run_encoder)
from seq2seq_zoo.models.layers import masked_softmax
from seq2seq_zoo.models.losses import coverage_loss


class FastRecurrent:
    """Every recurrent model: the encoder's unpacked run, and the output layer the fused loss takes."""

    def _run_encoder(self, batch):
        mask = batch.src != PAD_ID
        x = self.drop(self.src_embed(batch.src))
        out, final = run_encoder(self.encoder, x, mask)
        return out, final, mask

    def _last_output_layer(self, feats: torch.Tensor):
        """(the input of P_vocab's last linear layer, that layer) for ``self.output(self.drop(feats))``: what a
        loss that fuses the output layer takes (``LazyOutput``, ``CopyOutput``)."""
        x = self.drop(feats)
        if self.output_layers == 1:
            return x, self.output
        return self.output[0](x), self.output[1]


class FastGRU(FastRecurrent):
    """``gru``: the paper's teacher-forced pass with the loss fused into the output layer."""

    def forward(self, batch, need_attention: bool = False) -> StepOutput:
        (h0,) = self._from_state(self.encode(batch))
        y = self.drop(self.tgt_embed(self.feed(batch.tgt_in)))
        s, _ = self.decoder(y, h0)
        return LazyOutput(*self._last_output_layer(s), {})


class FastAttentional(FastRecurrent):
    """The attention models (``bahdanau``, ``bilstm``; ``FastPointer`` adds the copy model's parts)."""

    see_rule = False   # True: the LSTM reads E y_{t-1} only and attention is queried with s_t
    PER_HYPOTHESIS = ("h", "c", "cov", "p_gen")

    def encode(self, batch):
        state = super().encode(batch)
        # per-source tensors keep one row per source however many hypotheses decode from it: ``row``
        # maps each hypothesis to its source and ``reorder`` moves only the per-hypothesis ones
        B = state["mask"].size(0)
        state.update(row=torch.arange(B, device=state["mask"].device), group=1, keys2=double_keys(state["keys"]))
        return state

    def reorder(self, state, index):
        """The per-hypothesis entries (states, coverage) are indexed; the encoder output, keys, mask and
        source ids stay one row per source and ``row`` records each hypothesis' source. ``group`` is K when
        the rows are K consecutive hypotheses per source (beam search), so attention takes the K queries of
        a source side by side without copies; 0 otherwise."""
        if "row" not in state:
            return super().reorder(state, index)
        out = dict(state)
        for k in self.PER_HYPOTHESIS:
            if k in state:
                out[k] = state[k].index_select(0, index)
        reorder_rows(state, out, index, state["mask"].size(0))
        return out

    def _per_source(self, state):
        """(keys, memory, mask, extra per-source entries) with one row per source group of the state's
        hypotheses, and K, the hypotheses per row."""
        names = ("keys", "keys2", "memory", "mask", "src_ext", "src_same", "src_first")
        src = {k: state[k] for k in names if k in state}
        N = state["h"].size(0)
        if state["group"] == 0:      # arbitrary rows: gather the sources
            src = {k: v.index_select(0, state["row"]) for k, v in src.items()}
        return src, N // src["mask"].size(0)

    def _lazy_output(self, feats, a, extra, enc, att, aux) -> StepOutput | None:
        """An output whose loss is fused (a copy model's ``CopyOutput``), or None for ``_distribution``'s
        log-probabilities."""
        return None

    def _attention_weights(self):
        att = self.attention
        return att.W.weight, att.v.weight[0], att.w_c

    def _teacher_forcing(self, enc, hid, y, low=None):
        """(features (B, T, F), attention (B, T, S), extra inputs (B, T, E) or None): the same values as the
        step loop of the reference ``forward``; ``low``: the cell's products in bf16
        (``rnn_kernels.cpu_bf16_matmuls``)."""
        keys, memory, mask = enc["keys2"], enc["memory"], enc["mask"]
        W, v, w_c = self._attention_weights()
        cov = enc["cov"].to(keys.dtype) if w_c is not None else None
        cell = StackedCell(self.decoder, self.emb_dim, self.training, low)
        pre = cell.project_steps(y).unbind(1)     # layer 0's E y_{t-1} part, all steps (unbind: one backward op)
        T = y.size(1)
        if self.see_rule:        # the recurrence does not read attention: cells first, then attention
            hs, cs = [], []
            for t in range(T):
                s, hid = cell(pre[t], None, hid)
                hs.append(s)
                cs.append(hid[-1][-1])
            H = torch.stack(hs, 1)
            q = F.linear(H, W)
            if cov is None:    # every step at once, in chunks of steps whose (B, t, S, n) buffers stay
                # under 16 MB in fp32 (glibc maps larger buffers afresh, and their page faults cost more
                # than the arithmetic)
                step = max(1, (1 << 22) // max(1, keys.numel()))
                E = torch.cat([additive_energy(keys, q[:, t:t + step], v) for t in range(0, T, step)], 1)
                A = masked_softmax(half_to_float(E), mask.unsqueeze(1))
            elif native.usable(keys, q, cov):   # every step in compiled loops (``native``)
                A = native.coverage_attention(keys, q, v, w_c, mask, cov)
            else:
                weights = []
                for t in range(T):
                    e = additive_energy(keys, q[:, t:t + 1], v, cov.unsqueeze(1), w_c)[:, 0]
                    a = masked_softmax(half_to_float(e), mask)
                    cov = cov + a
                    weights.append(a)
                A = torch.stack(weights, 1)
            C = torch.bmm(A.to(memory.dtype), memory)
            feats = torch.cat([H, C.to(H.dtype)], -1)
            return feats, A, self._extra_inputs(C, (H.unsqueeze(0), torch.stack(cs, 1).unsqueeze(0)), y)
        context = DeferredContext(memory)
        hs, ctxs, cells, weights = [], [], [], []
        for t in range(T):
            q = F.linear(hid[0][-1], W).unsqueeze(1)
            e = additive_energy(keys, q, v, None if cov is None else cov.unsqueeze(1), w_c)[:, 0]
            a = masked_softmax(half_to_float(e), mask)
            c = context(a)
            s, hid = cell(pre[t], c.to(pre[t].dtype), hid)
            if cov is not None:
                cov = cov + a
            hs.append(s)
            ctxs.append(c)
            weights.append(a)
            if len(hid) == 2:
                cells.append(hid[1][-1])
        H, C, A = torch.stack(hs, 1), torch.stack(ctxs, 1), torch.stack(weights, 1)
        feats = torch.cat([H, y.to(H.dtype), C.to(H.dtype)], -1)
        top = (H.unsqueeze(0),) + ((torch.stack(cells, 1).unsqueeze(0),) if cells else ())
        return feats, A, self._extra_inputs(C, top, y)

    def _fast_step(self, state, hid, y):
        """One decoding step: (features (N, F), new state, a (N, S), extra, per-source entries, K)."""
        src, K = self._per_source(state)
        keys, memory, mask = src["keys2"], src["memory"], src["mask"]
        B0, S = mask.shape
        W, v, w_c = self._attention_weights()
        cov = state["cov"].view(B0, K, S).to(keys.dtype) if w_c is not None else None
        cell = StackedCell(self.decoder, self.emb_dim, False)
        pre = cell.project_steps(y)

        def attend(query):
            q = F.linear(query, W).view(B0, K, -1)
            a = masked_softmax(half_to_float(additive_energy(keys, q, v, cov, w_c)), mask.unsqueeze(1))   # (B0, K, S)
            c = torch.bmm(a.to(memory.dtype), memory)
            return c.view(B0 * K, -1), a.view(B0 * K, S)

        if self.see_rule:
            s, hid = cell(pre, None, hid)
            c, a = attend(hid[0][-1])
            feats = torch.cat([s, c.to(s.dtype)], -1)
        else:
            c, a = attend(hid[0][-1])
            s, hid = cell(pre, c.to(pre.dtype), hid)
            feats = torch.cat([s, y.to(s.dtype), c.to(s.dtype)], -1)
        return feats, hid, a, self._extra_inputs(c, hid, y), src, K

    def forward(self, batch, need_attention: bool = False) -> StepOutput:
        enc = self.encode(batch)
        y = self.drop(self.tgt_embed(self.feed(batch.tgt_in)))   # (B, T, m): E y_{t-1}
        low = cpu_bf16_matmuls(y)
        with fp32_on_cpu(y.device):
            feats, a, extra = self._teacher_forcing(enc, tuple(half_to_float(h) for h in self._from_state(enc)), y, low)
        self.attention.weights = a[:, -1].detach()
        aux = {}
        if self.coverage and self.cov_loss_weight > 0:
            aux["coverage"] = self.cov_loss_weight * coverage_loss(a, batch.tgt_out != PAD_ID)
        att = {self.cross_attention: a.unsqueeze(1)} if need_attention else {}   # (B, 1, T, S)
        if extra is None:   # the loss fuses the (last) output layer
            return LazyOutput(*self._last_output_layer(feats), att, aux)
        lazy = self._lazy_output(feats, a, extra, enc, att, aux)
        if lazy is not None:
            return lazy
        log_probs, p_gen = self._distribution(feats, a, extra, enc)
        return StepOutput(log_probs, aux_losses=aux, attention=att,
                          extras={"p_gen": p_gen} if p_gen is not None else {})

    def decode_step(self, state, prev):
        if "row" not in state:
            return super().decode_step(state, prev)
        y = self.drop(self.tgt_embed(self.feed(prev)))
        with fp32_on_cpu(y.device):
            hidden = tuple(half_to_float(h) for h in self._from_state(state))
            f, hid, a, extra, src, K = self._fast_step(state, hidden, y)
        self.attention.weights = a.detach()
        view = {**state, **src}
        if "src_ext" in src:   # copy models: the mixture takes each source's K hypotheses side by side
            N, B0 = f.size(0), src["src_ext"].size(0)
            log_probs, p_gen = self._distribution(f.view(B0, K, -1), a.view(B0, K, -1), extra.view(B0, K, -1), view)
            log_probs, p_gen = log_probs.reshape(N, -1), p_gen.reshape(N)
        else:
            log_probs, p_gen = self._distribution(f, a, extra, view)
        new = {k: v for k, v in state.items() if k not in self.PER_HYPOTHESIS}
        if "logits" in view:
            new["logits"] = view["logits"]
        new.update(self._to_state(hid), cov=state["cov"] + a)
        if p_gen is not None:
            new["p_gen"] = p_gen
        return log_probs, new

    def attention_coverage(self, state):
        if "row" in state and state["group"] != 1:
            return state["cov"], state["mask"].index_select(0, state["row"])
        return super().attention_coverage(state)


class FastPointer(FastAttentional):
    """``pointer_generator``: the loss reads the copy mixture at the target and source words only
    (``losses.copy_losses``), from the source's word identities computed once per batch."""

    @property
    def see_rule(self) -> bool:
        return self.variant == "see"

    def init_state(self, batch):
        enc, hid = super().init_state(batch)
        enc["src_same"], enc["src_first"] = source_words(batch.src_ext, enc["keys"].dtype)
        return enc, hid

    def _lazy_output(self, feats, a, extra, enc, att, aux):
        h, generator = self._last_output_layer(feats)
        return CopyOutput(h, generator, self._gen_logit(extra), a, enc["src_ext"], enc["n_oov"], enc["src_same"],
                          enc["src_first"], att, aux)
