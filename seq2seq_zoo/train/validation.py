"""What validation measures: the token NLL of a split (sharded over the ranks of a data-parallel run), a
decode metric of greedy decodes (``train.val_metric``) and a few decoded samples for the live logs."""
from __future__ import annotations

from typing import Sequence

import torch

from seq2seq_zoo.config import TrainConfig
from seq2seq_zoo.data.batching import Encoded, bucket_batches, collate, iterate
from seq2seq_zoo.metrics import sentence_scorer
from seq2seq_zoo.precision import autocast
from seq2seq_zoo.train.distributed import LOCAL
from seq2seq_zoo.models.base import token_losses
from seq2seq_zoo.train.objectives import greedy_ids
from seq2seq_zoo.train.rewards import row_text


@torch.no_grad()
def validation_loss(model, data: Sequence[Encoded], batch_size: int, device, dtype, ddp=None,
                    max_tokens: int | None = None) -> float:
    """Mean token NLL (no label smoothing) over a split (sharded over the ranks of a DDP run), in the
    training batches' sizes."""
    ddp = ddp or LOCAL
    was = model.training
    model.eval()
    nll, n = 0.0, 0
    for _, batch in iterate(data, bucket_batches(data, batch_size, max_tokens=max_tokens,
                                                   shuffle=False)[ddp.rank::ddp.world_size]):
        batch.to(device)
        with autocast(device, dtype):
            out = model(batch)
        _, s, k = token_losses(out.log_probs.float(), batch.tgt_out)
        nll += float(s)
        n += k
    model.train(was)
    nll, n = ddp.sum(nll, n)
    return nll / max(n, 1)


@torch.no_grad()
def validation_score(model, data: Sequence[Encoded], vocab, cfg: TrainConfig, device, dtype) -> float:
    """Mean ``cfg.val_metric`` (0-1; ROUGE: F1) of greedy decodes (up to ``cfg.rl_max_len`` tokens, and no longer
    than the longest target) against the first reference."""
    score = sentence_scorer([cfg.val_metric])
    max_len = _decode_len(data, cfg)
    total, n = 0.0, 0
    for _, batch in iterate(data, bucket_batches(data, cfg.batch_size, max_tokens=cfg.max_tokens, shuffle=False)):
        batch.to(device)
        with autocast(device, dtype):
            ids = greedy_ids(model, batch, max_len)
        texts = [row_text(vocab, row, oovs) for row, oovs in zip(ids.tolist(), batch.oovs)]
        total += sum(score(texts, [r[0] for r in batch.references])[cfg.val_metric])
        n += batch.size
    return total / max(n, 1)


def _decode_len(data: Sequence[Encoded], cfg: TrainConfig) -> int:
    """``cfg.rl_max_len`` (``train.scst.max_len`` in files), but no longer than the longest target of ``data`` (the data's max_tgt_len cut
    bounds it, and a Transformer's decoder positions end there)."""
    longest = max((len(e.tgt) + 1 for e in data), default=cfg.rl_max_len)  # + EOS
    return max(1, min(cfg.rl_max_len, longest))


@torch.no_grad()
def decoded_samples(model, data: Sequence[Encoded], vocab, cfg: TrainConfig, device, dtype) -> list[dict]:
    """Greedy decodes (up to ``cfg.rl_max_len`` tokens) of a few examples, for the live logs."""
    if not data:
        return []
    batch = collate(list(data)).to(device)
    with autocast(device, dtype):
        ids = greedy_ids(model, batch, _decode_len(data, cfg))
    return [{"id": str(e.id), "prediction": row_text(vocab, row, oovs), "reference": e.references[0]}
            for e, row, oovs in zip(data, ids.tolist(), batch.oovs)]
