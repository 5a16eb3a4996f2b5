"""A small GRU encoder-decoder with attention, written only against the model contract of
``seq2seq_zoo/models/base.py`` (walked through in docs/extending-models.md).

It lives outside the package. Make it known to ``zoo`` in one of three ways:

    zoo run examples/my_rnn.toml                       # the file lists it: [experiment] models = [...]
    zoo run EXP.toml --models examples/models/my_rnn.py
    an installed package's entry point in the "seq2seq_zoo.models" group

Then ``model = "my_rnn"`` works in any experiment file, with the keyword arguments of ``__init__`` as
its options (checked against ``option_rules``, with did-you-mean for misspelt names).

The model: a one-layer GRU reads the source; a GRU cell writes the summary one word at a time, feeding
back the previous attention context (input feeding); the attention is Luong et al. (2015)'s "general"
score h_t^T W h_s over the encoder states, and the output layer reads [h_t; c_t].
"""
from __future__ import annotations

import torch
from torch import nn

from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.models.base import Seq2Seq, StepOutput, at_least, between
from seq2seq_zoo.registry import register_model

ATTENTION = "source_attention"   # the key of StepOutput.attention that holds our (B, 1, T, S) map


@register_model("my_rnn")   # the name experiment files use; `zoo list models` shows it with this docstring
class MyRNN(Seq2Seq):
    """GRU encoder-decoder with Luong ("general") attention: an example of a model outside the package."""

    # Option rules, checked when the experiment file is read (before data or model exist); an option
    # without a rule is only type-checked against its default. Checks between options belong in
    # __init__: a ValueError raised there becomes the experiment file's error at that option's line.
    option_rules = {"emb_dim": at_least(1), "hidden": at_least(1), "dropout": between(0, 1)}

    # Pretrained word vectors: the runner reads this option ("random", "word2vec" or
    # "pretrained:<GloVe text file>"), builds a (vocab_size, embedding_dim(options)) matrix and passes
    # it to __init__ as ``pretrained_embeddings``. Leave embeddings_option None if the model takes none.
    embeddings_option = "embeddings"

    @classmethod
    def embedding_dim(cls, options):
        return options["emb_dim"]

    # The attention map the report draws as a heat map (a key of StepOutput.attention). attention_maps()
    # (what attention.json keeps) defaults to this one map.
    cross_attention = ATTENTION

    def __init__(self, vocab_size: int, emb_dim: int = 64, hidden: int = 128, dropout: float = 0.0,
                 embeddings: str = "random", pretrained_embeddings: torch.Tensor | None = None):
        # vocab_size (and max_src_len / max_tgt_len, if asked for) come from the data, not the file
        super().__init__()            # contract: first, before any layer is assigned
        self.vocab_size = vocab_size  # contract: the output vocabulary |V| (feed() and the decoder use it)
        self.hidden = hidden
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        if pretrained_embeddings is not None:
            with torch.no_grad():
                self.embed.weight.copy_(pretrained_embeddings)
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.GRU(emb_dim, hidden, batch_first=True)
        self.cell = nn.GRUCell(emb_dim + hidden, hidden)     # input: [y_{t-1}; c_{t-1}]
        self.score = nn.Linear(hidden, hidden, bias=False)   # W of h_t^T W h_s
        self.combine = nn.Linear(2 * hidden, hidden)         # tanh(W_c [h_t; c_t])
        self.out = nn.Linear(hidden, vocab_size)

    # -------------------------------------------------------------------------------- required hooks
    def encode(self, batch):
        """Run the encoder once; the decoder state is a dict of tensors whose first dimension is the
        batch (so the default ``reorder`` can index every entry for beam search)."""
        memory, _ = self.encoder(self.drop(self.embed(batch.src)))           # (B, S, H)
        last = (batch.src_len - 1).clamp(min=0).view(-1, 1, 1).expand(-1, 1, self.hidden)
        h = memory.gather(1, last).squeeze(1)                                 # the state at the last word
        return {"memory": memory, "keys": self.score(memory), "mask": batch.src_mask,
                "h": h, "ctx": torch.zeros_like(h)}

    def decode_step(self, state, prev):
        """One step: log-probabilities (B, |V|) of the next word given ``prev`` (B,), and the new state.
        ``feed`` maps copied-word ids (beyond |V|) to <unk>; this model copies nothing, so it returns
        |V| columns and the loss maps targets it cannot produce to <unk>."""
        x = self.drop(self.embed(self.feed(prev)))
        h = self.cell(torch.cat([x, state["ctx"]], -1), state["h"])
        energy = torch.einsum("bh,bsh->bs", h, state["keys"]).masked_fill(~state["mask"], float("-inf"))
        a = energy.softmax(-1)                                                # (B, S)
        ctx = torch.einsum("bs,bsh->bh", a, state["memory"])
        logits = self.out(self.drop(torch.tanh(self.combine(torch.cat([h, ctx], -1)))))
        # "logits" (optional) lets the decoder apply a repetition penalty to the raw logits
        return logits.log_softmax(-1), {**state, "h": h, "ctx": ctx, "att": a, "logits": logits}

    def forward(self, batch, need_attention: bool = False):
        """Teacher forcing over batch.tgt_in (<bos> y_1 .. y_n): log-probs (B, T, |V|) for the loss.
        ``need_attention``: also return the attention weights, (B, heads=1, T, S), for the report."""
        state = self.encode(batch)
        steps, maps = [], []
        for t in range(batch.tgt_in.size(1)):
            lp, state = self.decode_step(state, batch.tgt_in[:, t])
            state.pop("logits")
            steps.append(lp)
            maps.append(state["att"])
        attention = {ATTENTION: torch.stack(maps, 1).unsqueeze(1)} if need_attention else {}
        return StepOutput(torch.stack(steps, 1), attention=attention)

    # Optional hooks keep their defaults here: reorder (index every state tensor), components (one
    # "model" component in the parameter tables), schedule_dim (the embedding width, for the Noam
    # schedule), positional_tables (none), attention_coverage (none), model_rules (none).
