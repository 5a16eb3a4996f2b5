"""The optional second peer: eole's closest models to ours, trained on the same batch."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch

from seq2seq_zoo.bench.flops import flop_params
from seq2seq_zoo.bench.measure import Trainer, measure_training, peer_update
from seq2seq_zoo.bench.shapes import Plan, Shape
from seq2seq_zoo.bench.timing import log, precision_name
from seq2seq_zoo.bench.workloads import our_model, source_tokens, target_tokens
from seq2seq_zoo.data.batching import Batch
from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.models.base import count_parameters
from seq2seq_zoo.precision import autocast


EOLE_VERSION = "0.6.4"


# our model -> (eole architecture, what eole builds at the closest shape it can)
EOLE_PAIRS = {
    "transformer": ("transformer", "Transformer: the same d_model, d_ff, heads and layers, sinusoidal positions; "
                    "eole keeps separate source and target embeddings and output layer (ours share one table)"),
    "gru": ("gru_none", "GRU encoder + GRU decoder without attention or input feeding, hidden {n}, the encoder's "
            "last state starting the decoder and the output layer reading the {n}-wide state, as ours; eole keeps "
            "separate source and target embeddings and output layer (ours share one table)"),
    "bahdanau": ("gru_mlp", "GRU encoder + input-feeding GRU decoder with MLP (additive) attention, hidden {n}: "
                 "its decoder reads [E y; attentional h~] ({m} + {n}) where ours reads [E y; c], and its output "
                 "layer reads the {n}-wide attentional state where ours reads [s; E y; c] ({w_gru})"),
    "bilstm": ("brnn_lstm_mlp", "brnn encoder (2 x {half}: eole splits the hidden size over the directions; ours "
               "2 x {n}) + input-feeding LSTM decoder of our decoder width {n} with MLP attention; output layer "
               "from {n} (ours from [s; E y; c], {w_lstm})"),
}


# our models eole cannot build: why (printed and kept in bench.json, so the table names every family)
EOLE_NONE = {"pointer_generator": "no counterpart: eole 0.6.4 has no copy attention (OpenNMT-py's copy_attn "
                                  "was not carried over), so it cannot build a pointer-generator"}


def eole_available() -> str | None:
    """None if eole's models can be built here, else why not."""
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import eole  # noqa: F401
            import pyonmttok  # noqa: F401
            from eole.models.model import get_model_class  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means: no peer
        return f"eole not importable ({type(e).__name__}: {e}); pip install --no-deps eole=={EOLE_VERSION} pyonmttok"
    return None


def eole_model(kind: str, shape: Shape, device: torch.device, seed: int = 0):
    """eole's model of ``kind`` (see EOLE_PAIRS), randomly initialised, at the bench shape; eole's own
    vocabulary order puts <unk> at 0 and <pad> at 1 (``EoleTrainer`` swaps our two ids)."""
    import warnings
    from collections import Counter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pyonmttok
        from eole.config.data import Dataset
        from eole.config.models import RnnModelConfig, TransformerModelConfig
        from eole.config.run import TrainConfig
        from eole.constants import DefaultTokens
        from eole.models.model import get_model_class
        specials = [DefaultTokens.UNK, DefaultTokens.PAD, DefaultTokens.BOS, DefaultTokens.EOS]
        vocab = pyonmttok.build_vocab_from_tokens(Counter({f"w{i}": 1 for i in range(shape.vocab - 4)}),
                                                  maximum_size=0, minimum_frequency=1, special_tokens=specials)
        vocabs = {"src": vocab, "tgt": vocab, "specials": {"bos_token": DefaultTokens.BOS, "pad_token": DefaultTokens.PAD,
                                                           "eos_token": DefaultTokens.EOS,
                                                           "unk_token": DefaultTokens.UNK}}
        if kind == "transformer":
            mc = TransformerModelConfig(embeddings={"word_vec_size": shape.d_model,
                                                    "position_encoding_type": "SinusoidalInterleaved"},
                                        hidden_size=shape.d_model, transformer_ff=shape.d_ff, heads=shape.heads,
                                        layers=shape.layers)
        else:   # gru_none: no attention and input_feed 0 (eole's StdRNNDecoder), which is a plain GRU decoder
            attention = None if kind == "gru_none" else "mlp"
            mc = RnnModelConfig(embeddings={"word_vec_size": shape.rnn_emb}, hidden_size=shape.rnn_hidden, layers=1,
                                rnn_type="LSTM" if kind == "brnn_lstm_mlp" else "GRU",
                                input_feed=int(attention is not None), decoder={"global_attention": attention})
            if kind == "brnn_lstm_mlp":   # RnnModelConfig resets encoder_type to "rnn" when it validates
                mc.encoder.encoder_type = "brnn"
                mc.decoder.bidirectional_encoder = True
        cfg = TrainConfig(data={"bench": Dataset(path_src="-")}, src_vocab="bench", share_vocab=True, model=mc)
        cfg.training.self_attn_backend = "pytorch"
        cfg.training.dropout = [shape.dropout]
        torch.manual_seed(seed)
        model = get_model_class(cfg.model).build(cfg.model, vocabs, cfg.training)
        model.init_weights(cfg.training)     # as its training entry point does (``build`` leaves them empty)
    return model.to(device)


class EoleTrainer:
    """One full update of an eole model on the bench batch: its forward (``model(src, tgt, src_len)``)
    and generator under autocast, cross-entropy (label smoothing 0.1 as ours, padding ignored), backward,
    gradient clipping, Adam step."""

    def __init__(self, model, batch: Batch, device: torch.device, dtype, clip_norm: float = 1.0):
        self.model, self.device, self.dtype, self.kind, self.clip = model.train(), device, dtype, "eole", clip_norm
        b = batch.to(device)

        def swap(x):   # our <pad> 0 / <unk> 1 -> eole's <unk> 0 / <pad> 1
            return torch.where(x == 0, 1, torch.where(x == 1, 0, x))
        self.src = swap(b.src)
        self.tgt = swap(torch.cat([b.tgt_in, b.tgt_out[:, -1:]], 1))     # <bos> y_1 .. y_n <eos>
        self.labels = self.tgt[:, 1:].masked_fill(self.tgt[:, 1:] >= model.generator.out_features, 0)
        self.src_len = (b.src != PAD_ID).sum(1)
        self.params = list(model.parameters())
        self.opt = torch.optim.Adam(self.params, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        self.src_tokens, self.tgt_tokens = source_tokens(batch), target_tokens(batch)

    def __call__(self):
        import torch.nn.functional as F
        with autocast(self.device, self.dtype):
            out = self.model(self.src, self.tgt, self.src_len)
            dec_out = out.dec_out if hasattr(out, "dec_out") else out[0]
            logits = self.model.generator(dec_out)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), self.labels.reshape(-1),
                                   ignore_index=1, label_smoothing=0.1)
        return peer_update(loss, self.params, self.opt, self.clip)


def measure_eole(shape: Shape, device: torch.device, plan: Plan, peaks: dict[str, float], batch: Batch,
                 dtype, progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Training tokens/s of ours against eole's closest model, per pair of EOLE_PAIRS, interleaved in
    ``dtype``; parameter counts and the shape difference beside each ratio."""
    out: dict[str, Any] = {"version": None, "precision": precision_name(dtype), "pairs": {}}
    try:
        import importlib.metadata as md
        out["version"] = md.version("eole")
    except Exception:  # noqa: BLE001
        pass
    for ours_name, (kind, difference) in EOLE_PAIRS.items():
        try:
            ours, _ = our_model(ours_name, shape, device)
            peer = eole_model(kind, shape, device)
            trainers = {"ours": Trainer(ours, batch, device, dtype), "eole": EoleTrainer(peer, batch, device, dtype)}
            fps = {"ours": flop_params(ours), "eole": flop_params(peer)}
            it = plan.iters if ours_name == "transformer" else plan.rnn_iters
            figs = measure_training(trainers, replace(plan, iters=it), fps, peaks, lambda s: None)
        except Exception as e:  # noqa: BLE001 - a peer that cannot be built here must not stop the bench
            out["pairs"][ours_name] = {"eole_model": kind, "error": f"{type(e).__name__}: {str(e)[:200]}"}
            progress(f"    {ours_name} vs eole {kind}: not measured ({out['pairs'][ours_name]['error']})")
            continue
        ratio = figs["ours"]["tokens_per_s"] / figs["eole"]["tokens_per_s"]
        n, m = shape.rnn_hidden, shape.rnn_emb
        difference = difference.format(n=n, m=m, half=n // 2, w_gru=2 * n + m, w_lstm=3 * n + m)
        out["pairs"][ours_name] = {"eole_model": kind, "difference": difference, "ratio": ratio,
                                   "ours_params": count_parameters(ours)["total"],
                                   "eole_params": sum(p.numel() for p in peer.parameters() if p.requires_grad),
                                   "ours": figs["ours"], "eole": figs["eole"]}
        progress(f"    {ours_name} {figs['ours']['tokens_per_s']:.0f} tok/s vs eole {kind} "
                 f"{figs['eole']['tokens_per_s']:.0f} tok/s: {ratio:.2f}x")
        del trainers, ours, peer
    for ours_name, why in EOLE_NONE.items():
        out["pairs"][ours_name] = {"eole_model": None, "none": why}
        progress(f"    {ours_name}: {why}")
    return out
