"""The word marks of the side-by-side view, the rule the page's script applies (``report.js``, ``markTokens``),
written once more here so that a test can hold the browser's marks against it.

A text is cut into *words* and the text between them: a word is ``<unk>`` or a maximal run of ASCII
letters and digits (``[A-Za-z0-9]+``, the characters rouge-score's tokenizer keeps); a word's *key* is its
lowercase form. Punctuation and other characters are never marked. In a summary, a word is

- ``unk``: the ``<unk>`` token;
- ``span``: its key occurs in the source and it belongs to a run of three summary words that occurs, in that
  order, in the source (copied as a phrase);
- ``copied``: its key occurs among the source's keys (no stemming; "Ms." and "ms" match);
- ``novel``: otherwise;

and ``rep`` is added to each of the three words of a trigram (of keys) that already occurred earlier in the
same summary. In the source, a word is ``copied`` when its key occurs in the summary.
"""
from __future__ import annotations

import functools
import re

WORD = re.compile(r"<unk>|[A-Za-z0-9]+")   # the same pattern as report.js (no flags, ASCII classes only)
UNK = "<unk>"


def words(text: str) -> list[str]:
    return WORD.findall(text)


def keys(text: str) -> list[str]:
    return [w.lower() for w in words(text)]


@functools.lru_cache(maxsize=4096)
def _source_sets(source: str) -> tuple[frozenset, frozenset]:
    """The source's word keys and key trigrams (cached: every run's summary of an example is marked)."""
    src = keys(source)
    return frozenset(src), frozenset(tuple(src[i:i + 3]) for i in range(len(src) - 2))


def copy_shares(source: str, summary: str) -> dict[str, float] | None:
    """Shares of a summary's words (``<unk>`` included) by mark: copied (a copied word or phrase), phrase
    (inside a copied trigram), novel, unk, rep (in a repeated trigram); None for a summary without words."""
    m = summary_marks(source, summary)
    if not m:
        return None
    n = len(m)
    return {"copied": sum(x.startswith(("copied", "span")) for x in m) / n,
            "phrase": sum(x.startswith("span") for x in m) / n,
            "novel": sum(x.startswith("novel") for x in m) / n,
            "unk": sum(x.startswith("unk") for x in m) / n,
            "rep": sum(x.endswith("rep") for x in m) / n}


def summary_marks(source: str, summary: str) -> list[str]:
    """One mark per word of ``summary`` (``words(summary)``): "unk", "span", "copied" or "novel", with
    " rep" appended for a word of a repeated trigram."""
    src_set, src_tri = _source_sets(source)
    k = keys(summary)
    marks = []
    for i, w in enumerate(k):
        if w == UNK:
            marks.append("unk")
        elif w in src_set:
            in_span = any(0 <= j and j + 3 <= len(k) and tuple(k[j:j + 3]) in src_tri for j in range(i - 2, i + 1))
            marks.append("span" if in_span else "copied")
        else:
            marks.append("novel")
    seen: set[tuple] = set()
    rep = [False] * len(k)
    for j in range(len(k) - 2):
        t = tuple(k[j:j + 3])
        if t in seen:
            rep[j] = rep[j + 1] = rep[j + 2] = True
        seen.add(t)
    return [m + (" rep" if r else "") for m, r in zip(marks, rep)]


def source_marks(source: str, summary: str) -> list[str]:
    """One mark per word of ``source``: "copied" when its key occurs in ``summary``, else ""."""
    s = set(keys(summary)) - {UNK}
    return ["copied" if w in s else "" for w in keys(source)]


def novel_share(source: str, text: str) -> float | None:
    """Share of ``text``'s words (``<unk>`` left out) whose key is not in the source; None without words."""
    src = set(keys(source))
    k = [w for w in keys(text) if w != UNK]
    return sum(w not in src for w in k) / len(k) if k else None
