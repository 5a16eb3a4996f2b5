"""The recurrent family of the seed paper ("Variations in Seq2seq Models for Abstractive Summarisation"):

gru       GRU encoder -> GRU decoder, no attention (Cho et al. 2014; Sutskever et al. 2014)
bahdanau  the same with additive attention (Bahdanau et al. 2015)
bilstm    bidirectional LSTM encoder, its final states reduced into an LSTM decoder, additive attention
(pointer_generator, in pointer.py, builds on bilstm; coverage is an option of the attention models)

Equation numbers refer to Bahdanau, Cho & Bengio (2015), "Neural Machine Translation by Jointly
Learning to Align and Translate" (section 3.1 and appendix A).

Padding never reaches a state: the encoder runs on packed sequences (``layers.run_packed``), so its final
state is the one after each source's last real token and padded outputs are zeros; and the attention
softmax gives padded
positions exactly zero weight. The decoder input is ``batch.tgt_in`` fed through ``feed`` (extended ids
-> <unk>); target padding only follows the real tokens, so it cannot change earlier steps. Every
decoder state tensor is batch-first, so the default ``reorder`` (index dim 0) serves beam search.

Parameter counts (what ``count_parameters`` reports per component; PyTorch RNNs carry two bias
vectors, b_ih and b_hh). V = vocab_size, m = emb_dim, n = hidden, L = layers, E = 1 with
share_embeddings else 2; frozen embeddings count 0.

  GRU layer, input size i:          3(n^2 + n i + 2n)
  LSTM layer, input size i:         4(n^2 + n i + 2n)      (bidirectional: twice that)
  additive attention, query n, key k, attention size n:  n^2 (W) + k n + n (U, b) + n (v)

  gru       embedding  E V m
            encoder    3(n^2 + n m + 2n) + (L-1) 3(2n^2 + 2n)
            decoder    3(n^2 + n m + 2n) + (L-1) 3(2n^2 + 2n)
            output     n V + V
  bahdanau  embedding  E V m
            encoder    3(n^2 + n m + 2n) + (L-1) 3(2n^2 + 2n)
            decoder    3(n^2 + n (m + n) + 2n) + (L-1) 3(2n^2 + 2n)  +  2n^2 + 2n (attention)
            output     (2n + m) V + V
  bilstm    embedding  E V m
            encoder    8(n^2 + n m + 2n) + (L-1) 8(3n^2 + 2n)  +  2(2n^2 + n) (the two reduce layers)
            decoder    4(n^2 + n (m + 2n) + 2n) + (L-1) 4(2n^2 + 2n)  +  3n^2 + 2n (attention)
            output     (3n + m) V + V
  options   output_layers = 2: output becomes (in) n + n + n V + V (See et al.'s two-layer P_vocab)
            coverage = true:   + n (w_c, in the decoder's attention)
"""
from __future__ import annotations

import inspect
from pathlib import Path

import torch
from torch import nn

from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.models.base import Seq2Seq, StepOutput, at_least
from seq2seq_zoo.models.fast.kernels import log_softmax_fp32
from seq2seq_zoo.models.fast.rnn import FastAttentional, FastGRU, FastRecurrent
from seq2seq_zoo.models.layers import masked_softmax, run_packed
from seq2seq_zoo.models.losses import coverage_loss
from seq2seq_zoo.registry import register_model

ATTENTION_NAME = "decoder_layer1_block2_decenc_att"  # the name the report's heat map looks for
_FAST_VARIANTS: dict[type, type] = {}   # paper class -> its fast variant (``_Recurrent.fast_variant``)



class AdditiveAttention(nn.Module):
    """Additive attention (Bahdanau et al. 2015, appendix A.1.2), optionally with coverage (See et al.
    2017, eq. 10-11):

        e_tj = v^T tanh(W s_{t-1} + U h_j + w_c cov_tj + b)   (eq. 6, alignment model a; w_c only with coverage)
        a_tj = exp(e_tj) / sum_k exp(e_tk)                   (eq. 6, over real source positions only)
        c_t  = sum_j a_tj h_j                                (eq. 5)

    ``U h_j + b`` does not depend on t: ``project`` computes it once per source. The weights of the last
    call are kept in ``self.weights`` (B, S) and returned by ``forward``. ``w_c`` starts at zero, so
    switching coverage on for a final phase of training (See et al. sec. 7) starts from exactly the
    attention the checkpoint learned.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int, coverage: bool = False):
        super().__init__()
        self.W = nn.Linear(query_dim, attn_dim, bias=False)
        self.U = nn.Linear(key_dim, attn_dim)
        self.v = nn.Linear(attn_dim, 1, bias=False)
        self.w_c = nn.Parameter(torch.zeros(attn_dim)) if coverage else None
        self.weights: torch.Tensor | None = None

    def project(self, memory: torch.Tensor) -> torch.Tensor:
        """(B, S, key_dim) -> U h_j + b, (B, S, attn_dim)."""
        return self.U(memory)

    def forward(self, query, memory, mask, keys=None, cov=None):
        """query (B, q) = s_{t-1}; memory (B, S, k) = h_j; mask (B, S) True at real tokens;
        keys: ``project(memory)`` if already computed; cov (B, S): the coverage vector sum_{t'<t} a_t'
        (used only if the attention has coverage). Returns c_t (B, k) and a_t (B, S)."""
        if keys is None:
            keys = self.project(memory)
        pre = keys + self.W(query).unsqueeze(1)
        if self.w_c is not None and cov is not None:
            pre = pre + cov.unsqueeze(-1).to(pre.dtype) * self.w_c.to(pre.dtype)
        e = self.v(torch.tanh(pre)).squeeze(-1)   # (B, S)
        a = masked_softmax(e.float(), mask)
        c = torch.bmm(a.unsqueeze(1).to(memory.dtype), memory).squeeze(1)       # (B, k)
        self.weights = a.detach()
        return c, a


class _Recurrent(Seq2Seq):
    """Embeddings, option checks and parameter components shared by the recurrent models.

    Options: emb_dim (m), hidden (n), layers (L, both encoder and decoder), dropout (embeddings, between
    RNN layers, before the output layer), share_embeddings (one table for source and target),
    embeddings ("random" | "word2vec" | "pretrained:<path>": the runner resolves it to vectors and
    passes them, like vocab_size, as ``pretrained_embeddings``, a (vocab_size, emb_dim) tensor that is
    copied into the table(s); the model never reads the label), freeze_embeddings (the table(s) get no
    gradient, so they count 0 trainable parameters), impl ("reference": this module's step-by-step
    code, which follows the papers; "fast", the default: the same model behind the mixins ``FAST`` of
    ``models.fast.rnn``; both give the same values up to float rounding, with the same parameters, so
    checkpoints load into either).

    Which class runs an ``impl`` is chosen when the model is built: ``build_model`` and the registry call
    ``create(**options)``, which builds ``implementation(impl)``, the class itself for "reference" or
    ``fast_variant()`` for "fast". Calling the class directly builds the reference only.
    """

    IMPLS = ("fast", "reference")
    # the model contract's declarations (models/base.py): option ranges checked when the file is read,
    # and the option naming pretrained vectors, which the runner resolves to (vocab_size, emb_dim)
    option_rules = {k: at_least(1) for k in ("emb_dim", "hidden", "layers")}
    embeddings_option = "embeddings"

    @classmethod
    def embedding_dim(cls, options):
        return options["emb_dim"]

    FAST: tuple[type, ...] = (FastRecurrent,)   # the mixins impl = "fast" puts in front of the class
    IMPL = "reference"                          # what this class runs; its fast variant says "fast"

    @classmethod
    def create(cls, *args, **kwargs) -> _Recurrent:
        """The model built by the class that runs its ``impl`` option (``implementation``)."""
        try:
            bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
        except TypeError:   # __init__ reports the bad arguments
            return cls(*args, **kwargs)
        bound.apply_defaults()
        return cls.implementation(bound.arguments.get("impl", cls.IMPL))(*args, **kwargs)

    @classmethod
    def implementation(cls, impl: str) -> type[_Recurrent]:
        """The class that runs ``impl``: "reference", the paper class itself (the step-by-step code of this
        module); "fast", its ``fast_variant()``. An unknown ``impl`` gives the paper class, whose
        ``__init__`` says what is wrong."""
        paper = cls.paper_class()
        return paper.fast_variant() if impl == "fast" else paper

    @classmethod
    def paper_class(cls) -> type[_Recurrent]:
        """The class without its fast mixins (the class itself unless it is a fast variant)."""
        return cls.__dict__.get("_paper", cls)

    @classmethod
    def fast_variant(cls) -> type[_Recurrent]:
        """The paper class behind its fast mixins (``FAST``): a subclass with the same name, options,
        parameters and checkpoints, made once per class."""
        paper = cls.paper_class()
        if paper not in _FAST_VARIANTS:
            _FAST_VARIANTS[paper] = type(paper.__name__, (*paper.FAST, paper),
                                         {"_paper": paper, "IMPL": "fast", "__module__": paper.__module__,
                                          "__qualname__": paper.__qualname__, "__doc__": paper.__doc__})
        return _FAST_VARIANTS[paper]

    def __init__(self, vocab_size: int, emb_dim: int = 128, hidden: int = 256, layers: int = 1,
                 dropout: float = 0.0, share_embeddings: bool = True, embeddings: str = "random",
                 freeze_embeddings: bool = False, coverage: bool = False, cov_loss_weight: float = 1.0,
                 output_layers: int = 1, pretrained_embeddings: torch.Tensor | None = None, impl: str = "fast"):
        super().__init__()
        if impl not in self.IMPLS:
            raise ValueError(f"impl must be one of {self.IMPLS}, not {impl!r}")
        if impl != self.IMPL:
            raise ValueError(f"{type(self).__name__}(...) builds impl {self.IMPL!r} only; build impl {impl!r} with "
                             f"{type(self).__name__}.create(...) or build_model, which pick the class that runs it")
        self.impl = impl
        for name, v in (("vocab_size", vocab_size), ("emb_dim", emb_dim), ("hidden", hidden), ("layers", layers)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, not {v!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), not {dropout!r}")
        if not isinstance(embeddings, str) or not (embeddings in ("random", "word2vec")
                                                   or embeddings.startswith("pretrained:")):
            raise ValueError(f"embeddings {embeddings!r} must be \"random\", \"word2vec\" or \"pretrained:<path to a "
                             "GloVe text file>\"")
        if embeddings.startswith("pretrained:") and not Path(embeddings.split(":", 1)[1]).is_file():
            raise ValueError(f"embeddings file {embeddings.split(':', 1)[1]!r} not found (relative paths are taken "
                             "from the folder you run zoo in)")
        if output_layers not in (1, 2):
            raise ValueError(f"output_layers must be 1 or 2, not {output_layers!r}")
        if coverage and not self.has_attention:
            raise ValueError(f"coverage needs an attention model; {type(self).__name__} has no attention "
                             "(use bahdanau, bilstm or pointer_generator)")
        if cov_loss_weight < 0:
            raise ValueError(f"cov_loss_weight must be >= 0, not {cov_loss_weight!r}")
        self.coverage, self.cov_loss_weight, self.output_layers = bool(coverage), cov_loss_weight, output_layers
        self.vocab_size, self.emb_dim, self.hidden, self.layers = vocab_size, emb_dim, hidden, layers
        self.d_model = hidden  # the Noam schedule's d
        self.embeddings = embeddings
        self.src_embed = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.tgt_embed = self.src_embed if share_embeddings else nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.drop = nn.Dropout(dropout)
        self.rnn_dropout = dropout if layers > 1 else 0.0  # nn.GRU/LSTM apply it between layers only
        self.build()
        self._init_embeddings(pretrained_embeddings, freeze_embeddings)

    has_attention = False

    def build(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def make_output(self, in_dim: int) -> nn.Module:
        """P_vocab's layer(s): W_o x + b_o, or with output_layers = 2 the two linear layers of See et al.
        (2017, eq. 4), V'(V x + b) + b', whose inner size is the hidden size n."""
        if self.output_layers == 1:
            return nn.Linear(in_dim, self.vocab_size)
        return nn.Sequential(nn.Linear(in_dim, self.hidden), nn.Linear(self.hidden, self.vocab_size))

    def _tables(self) -> list[nn.Embedding]:
        return [self.src_embed] if self.tgt_embed is self.src_embed else [self.src_embed, self.tgt_embed]

    def _init_embeddings(self, pretrained, freeze: bool) -> None:
        for table in self._tables():
            nn.init.normal_(table.weight, std=0.1)
            with torch.no_grad():
                table.weight[PAD_ID].zero_()
        if pretrained is not None:
            pretrained = torch.as_tensor(pretrained)
            want = (self.vocab_size, self.emb_dim)
            if tuple(pretrained.shape) != want:
                raise ValueError(f"pretrained_embeddings has shape {tuple(pretrained.shape)}, expected "
                                 f"(vocab_size, emb_dim) = {want}")
            with torch.no_grad():
                for table in self._tables():
                    table.weight.copy_(pretrained.to(table.weight.dtype))
        if freeze:
            for table in self._tables():
                table.weight.requires_grad_(False)

    def components(self):
        emb = [t.weight for t in self._tables()]
        return {"embedding": [p for p in emb if p.requires_grad],
                "encoder": [p for m in self.encoder_modules() for p in m.parameters() if p.requires_grad],
                "decoder": [p for m in self.decoder_modules() for p in m.parameters() if p.requires_grad],
                "output": [p for p in self.output.parameters() if p.requires_grad]}

    def encoder_modules(self) -> list[nn.Module]:
        return [self.encoder]

    def decoder_modules(self) -> list[nn.Module]:
        return [self.decoder]

    def _run_encoder(self, batch):
        """Packed RNN over the source: outputs (B, S, dirs*n) with zeros at padding, final state(s)
        (L*dirs, B, n) taken after each source's last real token, and the mask (B, S)."""
        mask = batch.src != PAD_ID
        x = self.drop(self.src_embed(batch.src))
        out, final = run_packed(self.encoder, x, mask)
        return out, final, mask

    @staticmethod
    def _to_state(hid: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
        """(L, B, n) RNN states -> batch-first state entries h (and c), (B, L, n)."""
        return dict(zip(("h", "c"), (t.transpose(0, 1) for t in hid)))

    @staticmethod
    def _from_state(state) -> tuple[torch.Tensor, ...]:
        return tuple(state[k].transpose(0, 1).contiguous() for k in ("h", "c") if k in state)


@register_model("gru")
class GRUSeq2Seq(_Recurrent):
    """GRU encoder-decoder without attention; the encoder's last state initialises the decoder."""

    FAST = (FastGRU,)

    def build(self):
        m, n, L = self.emb_dim, self.hidden, self.layers
        self.encoder = nn.GRU(m, n, L, batch_first=True, dropout=self.rnn_dropout)
        self.decoder = nn.GRU(m, n, L, batch_first=True, dropout=self.rnn_dropout)
        self.output = self.make_output(n)

    def encode(self, batch):
        # the fixed-length summary of the source: s_0 = h_S, its last real state (Cho et al. 2014)
        _, h, _ = self._run_encoder(batch)
        return self._to_state((h,))

    def forward(self, batch, need_attention: bool = False) -> StepOutput:
        (h0,) = self._from_state(self.encode(batch))
        y = self.drop(self.tgt_embed(self.feed(batch.tgt_in)))           # E y_{t-1}
        s, _ = self.decoder(y, h0)                                         # s_t = GRU(s_{t-1}, y_{t-1})
        log_probs = log_softmax_fp32(self.output(self.drop(s)))    # p(y_t | y_<t, x) = softmax(W_o s_t + b_o)
        return StepOutput(log_probs)

    def decode_step(self, state, prev):
        (h,) = self._from_state(state)
        y = self.drop(self.tgt_embed(self.feed(prev))).unsqueeze(1)
        s, h = self.decoder(y, h)
        logits = self.output(self.drop(s[:, 0]))
        state = self._to_state((h,))
        state["logits"] = logits  # for the decoder's repetition penalty (taken out before reorder)
        return log_softmax_fp32(logits), state


class _Attentional(_Recurrent):
    """Decoder of Bahdanau et al. (2015), one step at a time (teacher forcing loops over t):

        c_t = Attend(s_{t-1}, h_1..h_S [, cov_t])          (eq. 5-6; s_{t-1} = top decoder layer)
        s_t = RNN(s_{t-1}, [E y_{t-1}; c_t])              (eq. 4: s_i = f(s_{i-1}, y_{i-1}, c_i))
        p(y_t | y_<t, x) = softmax(W_o [s_t; E y_{t-1}; c_t] + b_o)   (eq. 4: g(y_{i-1}, s_i, c_i))

    Coverage (See et al. 2017, sec. 2.3), option ``coverage = true``: cov_t = sum_{t'<t} a_t' enters the
    attention energies, and the model reports the auxiliary loss

        covloss = cov_loss_weight * (1 / #target tokens) sum_t sum_j min(a_tj, cov_tj)     (eq. 12-13)

    The decoder state always carries ``cov`` (even without the option), so beam search can apply a
    coverage penalty to any attention model.
    """

    attention: AdditiveAttention
    has_attention = True
    cross_attention = ATTENTION_NAME
    FAST = (FastAttentional,)

    def decoder_modules(self):
        return [self.decoder, self.attention]

    def init_state(self, batch) -> tuple[dict, tuple[torch.Tensor, ...]]:  # pragma: no cover - abstract
        """-> ({memory, keys, mask}, decoder's initial RNN state(s) (L, B, n))."""
        raise NotImplementedError

    def encode(self, batch):
        enc, hid = self.init_state(batch)
        return {**enc, "cov": torch.zeros(enc["mask"].shape, device=enc["mask"].device), **self._to_state(hid)}

    def _step(self, enc, hid, y, cov):
        """One decoder step: y = E y_{t-1} (B, m) -> (features [s_t; E y_{t-1}; c_t], new state, a_t,
        extra inputs for the output distribution (see ``_distribution``))."""
        c, a = self.attention(hid[0][-1], enc["memory"], enc["mask"], enc["keys"], cov)   # eq. 5-6, from s_{t-1}
        x = torch.cat([y, c.to(y.dtype)], -1).unsqueeze(1)                                 # [E y_{t-1}; c_t]
        if len(hid) == 2:
            s, hid = self.decoder(x, hid)                                                  # eq. 4: s_t = f(...)
        else:
            s, h = self.decoder(x, hid[0])
            hid = (h,)
        s = s[:, 0]
        # the input of g(y_{t-1}, s_t, c_t) (eq. 4): [s_t; E y_{t-1}; c_t]
        return torch.cat([s, y.to(s.dtype), c.to(s.dtype)], -1), hid, a, self._extra_inputs(c, hid, y)

    def _extra_inputs(self, c, hid, y):
        return None

    def _distribution(self, feats, a, extra, enc) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log p(y_t | ...) over the output width, and p_gen if the model has one. Leading dims of
        ``feats`` / ``a`` are (B, T) in teacher forcing and (B,) in a decoding step."""
        logits = self.output(self.drop(feats))
        if feats.dim() == 2:  # a decoding step: the raw logits for the decoder's repetition penalty
            enc["logits"] = logits
        return log_softmax_fp32(logits), None

    def forward(self, batch, need_attention: bool = False) -> StepOutput:
        enc = self.encode(batch)
        hid = self._from_state(enc)
        cov = enc["cov"]
        y = self.drop(self.tgt_embed(self.feed(batch.tgt_in)))   # (B, T, m): E y_{t-1}
        feats, weights, extras = [], [], []
        for t in range(y.size(1)):
            f, hid, a, extra = self._step(enc, hid, y[:, t], cov)
            cov = cov + a                                             # See et al. eq. 10
            feats.append(f)
            weights.append(a)
            extras.append(extra)
        a = torch.stack(weights, 1)                                   # (B, T, S)
        extra = torch.stack(extras, 1) if extras[0] is not None else None
        log_probs, p_gen = self._distribution(torch.stack(feats, 1), a, extra, enc)
        aux = {}
        if self.coverage and self.cov_loss_weight > 0:     # See et al. eq. 12-13
            aux["coverage"] = self.cov_loss_weight * coverage_loss(a, batch.tgt_out != PAD_ID)
        att = {ATTENTION_NAME: a.unsqueeze(1)} if need_attention else {}   # (B, 1, T, S)
        return StepOutput(log_probs, aux_losses=aux, attention=att,
                          extras={"p_gen": p_gen} if p_gen is not None else {})

    def decode_step(self, state, prev):
        y = self.drop(self.tgt_embed(self.feed(prev)))
        f, hid, a, extra = self._step(state, self._from_state(state), y, state["cov"])
        log_probs, p_gen = self._distribution(f, a, extra, state)
        new = {k: v for k, v in state.items() if k not in ("h", "c", "cov", "p_gen")}
        new.update(self._to_state(hid), cov=state["cov"] + a)
        if p_gen is not None:
            new["p_gen"] = p_gen
        return log_probs, new

    def attention_coverage(self, state):
        return state["cov"], state["mask"]


@register_model("bahdanau")
class BahdanauSeq2Seq(_Attentional):
    """GRU encoder-decoder with additive attention (Bahdanau et al. 2015); encoder's last state -> s_0."""

    def build(self):
        m, n, L = self.emb_dim, self.hidden, self.layers
        self.encoder = nn.GRU(m, n, L, batch_first=True, dropout=self.rnn_dropout)
        self.attention = AdditiveAttention(n, n, n, self.coverage)
        self.decoder = nn.GRU(m + n, n, L, batch_first=True, dropout=self.rnn_dropout)
        self.output = self.make_output(n + m + n)

    def init_state(self, batch):
        memory, h, mask = self._run_encoder(batch)
        return {"memory": memory, "keys": self.attention.project(memory), "mask": mask}, (h,)


@register_model("bilstm")
class BiLSTMSeq2Seq(_Attentional):
    """Bidirectional LSTM encoder, reduced final states -> LSTM decoder with additive attention."""

    def build(self):
        m, n, L = self.emb_dim, self.hidden, self.layers
        self.encoder = nn.LSTM(m, n, L, batch_first=True, dropout=self.rnn_dropout, bidirectional=True)
        # s_0 = tanh(W_h [h_fwd; h_bwd] + b_h), cell_0 = tanh(W_c [c_fwd; c_bwd] + b_c), per layer
        self.reduce_h = nn.Linear(2 * n, n)
        self.reduce_c = nn.Linear(2 * n, n)
        self.attention = AdditiveAttention(n, 2 * n, n, self.coverage)   # h_j = [h_fwd_j; h_bwd_j] (Bahdanau et al. sec. 3.2)
        self.decoder = nn.LSTM(m + 2 * n, n, L, batch_first=True, dropout=self.rnn_dropout)
        self.output = self.make_output(n + m + 2 * n)

    def encoder_modules(self):
        return [self.encoder, self.reduce_h, self.reduce_c]

    def init_state(self, batch):
        memory, (h, c), mask = self._run_encoder(batch)
        L, B, n = self.layers, h.size(1), self.hidden

        def merge(x, lin):  # (2L, B, n) -> (L, 2, B, n) -> [fwd; bwd] (L, B, 2n) -> tanh(W x + b) (L, B, n)
            x = x.view(L, 2, B, n)
            return torch.tanh(lin(torch.cat([x[:, 0], x[:, 1]], -1)))

        hid = (merge(h, self.reduce_h), merge(c, self.reduce_c))
        return {"memory": memory, "keys": self.attention.project(memory), "mask": mask}, hid
