"""The evaluator's metrics, one file each, registered with ``@register_metric`` and the output columns
they declare (``Column``: label, per-example or not, higher-is-better, CIs, usable as ``train.val_metric``
or a reward). Each returns (scores, settings): the settings travel with the numbers.

rouge       ROUGE-1/2/3/L/Lsum F1 x 100 (rouge.py)
bertscore   BERTScore P/R/F1 (bertscore.py)
length      mean prediction and reference length in words (length.py)
repetition  the share of a summary's words that repeat an earlier one (repetition.py)
unk_ratio   the share of generated words that are <unk> (unk_ratio.py)
"""
from seq2seq_zoo.metrics.base import Column, columns, evaluate, metric_of, scale_of, sentence_scorer
from seq2seq_zoo.metrics.bertscore import bertscore, resolve_bertscore_backbone
from seq2seq_zoo.metrics.length import length
from seq2seq_zoo.metrics.repetition import STOP_WORDS, repetition, repetition_ratio, words
from seq2seq_zoo.metrics.rouge import ROUGE_LSUM_ABBREVIATIONS, ROUGE_TYPES, rouge, sentences_newline, strip_unk
from seq2seq_zoo.metrics.unk_ratio import unk_ratio

__all__ = ["Column", "columns", "evaluate", "metric_of", "scale_of", "sentence_scorer", "bertscore", "resolve_bertscore_backbone",
           "length", "STOP_WORDS", "repetition", "repetition_ratio", "words", "ROUGE_LSUM_ABBREVIATIONS",
           "ROUGE_TYPES", "rouge", "sentences_newline", "strip_unk", "unk_ratio"]
