"""Text normalisation and word tokenisation shared by every corpus.

Speaker tags such as ``#Person1#`` stay single tokens; digits can be mapped to ``<num>`` (the seed
paper's Gigaword preprocessing, where digit runs are already '#').
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from seq2seq_zoo.data.vocab import SPECIALS

# one token: a speaker tag (#Person1#), a special (<unk>), a word with inner apostrophes/hyphens/dots
# (don't, e-mail, u.s.), a number, or any single other non-space character.
_TOKEN = re.compile(
    r"#\w+#"                    # speaker tags, kept whole
    r"|<[a-z_]+>"               # specials already in the text (<unk>, <num>)
    r"|\w+(?:['’\-.]\w+)*"      # words
    r"|[^\w\s]",                # punctuation / emoji, one character each
    re.UNICODE,
)


@dataclass(frozen=True)
class TextConfig:
    lowercase: bool = True
    num_token: bool = False     # map numbers (and Gigaword's '#' digit runs) to <num>
    unk_alias: tuple[str, ...] = ("UNK", "<unk>")  # corpus spellings of the unknown word
    turn_separator: str | None = None  # a token put between a source's lines (see tokenize_source)


def normalise(text: str, cfg: TextConfig = TextConfig()) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = " ".join(text.split())  # collapse all whitespace, newlines included
    if cfg.lowercase:
        # lower-case, but keep speaker tags as the corpus writes them (#Person1#)
        text = re.sub(r"#\w+#|[^#]+|#", lambda m: m.group(0) if _is_tag(m.group(0)) else m.group(0).lower(), text)
    return text


def _is_tag(s: str) -> bool:
    return len(s) > 2 and s[0] == "#" and s[-1] == "#" and s[1:-1].isalnum()


def tokenize(text: str, cfg: TextConfig = TextConfig()) -> list[str]:
    # corpus spellings of the unknown word (Gigaword's test set writes UNK) before lower-casing
    text = _UNK_ALIAS(cfg.unk_alias).sub(" <unk> ", text)
    if cfg.num_token:  # numbers, and Gigaword's '#' digit runs such as ## or #.#, become one <num>
        text = _NUMBER.sub(" <num> ", text)
    return _TOKEN.findall(normalise(text, cfg))


def lines(text: str) -> list[str]:
    """The non-empty lines of ``text``, stripped (a line ends at LF, CR LF or CR): a dialogue's turns."""
    return [ln.strip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if ln.strip()]


def tokenize_source(text: str, cfg: TextConfig = TextConfig()) -> list[str]:
    """A source's tokens. With ``cfg.turn_separator`` its lines (a dialogue's turns) are kept apart by
    that token, as Gliwa et al. (2019) give the pointer-generator a separator between SAMSum's
    utterances; without it a line break is whitespace like any other. Targets use ``tokenize``."""
    sep = cfg.turn_separator
    if sep is None:
        return tokenize(text, cfg)
    out: list[str] = []
    for line in lines(text):
        out += [sep, *tokenize(line, cfg)] if out else tokenize(line, cfg)
    return out


_RESERVED = (*SPECIALS, "<num>")   # the vocabulary's own tokens and the number token


def separator_problem(sep) -> str | None:
    """Why ``sep`` cannot be a turn separator (it must stay one token of its own), or None."""
    if sep is None:
        return None
    if not isinstance(sep, str) or _TOKEN.findall(sep) != [sep] or sep != sep.lower() or sep in _RESERVED:
        return (f"{sep!r} is not a token of its own; use a lower-case special such as \"<eot>\" (letters and _ "
                f"between < and >, not one of {', '.join(_RESERVED)})")
    return None


_NUMBER = re.compile(r"(?<![#\w])(?:\d+(?:[.,]\d+)*|#+(?:[.,]#+)*)(?![#\w])")


def _UNK_ALIAS(aliases: tuple[str, ...]) -> re.Pattern:
    return _alias_cache.get(aliases) or _alias_cache.setdefault(
        aliases, re.compile(r"(?<![\w<])(?:" + "|".join(re.escape(a) for a in aliases) + r")(?![\w>])"))


_alias_cache: dict[tuple[str, ...], re.Pattern] = {}


NUM_SURFACE = "#"   # how predictions write <num>: Gigaword's own digit form (its references write digits
                    # as '#'), which rouge-score drops as punctuation like the references' '#' runs; the
                    # literal "<num>" would be scored as a word "num" that no reference contains


def detokenize(tokens: list[str]) -> str:
    """Tokens back to a readable string (ROUGE tokenises again, so spacing is cosmetic); ``<num>``
    becomes ``NUM_SURFACE``."""
    s = " ".join(NUM_SURFACE if t == "<num>" else t for t in tokens)
    s = re.sub(r" ([.,!?;:%)\]}])", r"\1", s)
    s = re.sub(r"([(\[{]) ", r"\1", s)
    s = re.sub(r" ' s\b", "'s", s)
    return s
