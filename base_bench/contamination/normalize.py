"""GPT-3's text normalisation for n-gram matching, and the choice of N.

    words("It's a Well-Known fact.")      -> [b"its", b"a", b"wellknown", b"fact"]
    normalized(text)                      -> the same text lowercased, punctuation deleted (bytes, unsplit)
    word_spans(text)                      -> [(start, end), ...] the characters of each word in `text`
    choose_n([item lengths in words])     -> (N, p5): GPT-3's N, the 5th percentile clamped to 8..13

A word is what is left of a whitespace-separated piece of the text once it is lowercased and every
punctuation mark and symbol (Unicode categories P* and S*: `.,;:!?'"-()[]{}`, `$+<=>^|~`, curly
quotes, dashes, `£`, `°`...) is deleted; a piece with nothing left is no word. This is GPT-3's rule
(lowercase, punctuation removed, split on whitespace), as lm-eval's janitor implements it. Deleting
rather than spacing keeps "don't" and "dont" one word; "well-known" and "well known" differ.

The hot path is bytes: an ASCII text is encoded (a copy), lowercased and stripped of ASCII
punctuation by one `bytes.translate`, and split. Any other text is lowercased as a str, encoded, and
its non-ASCII runs fixed up one by one (rare in English text), so both paths give the same words.
`word_spans` is the slow, offset-keeping twin used only to cut excerpts from matched documents.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from functools import cache

N_MIN, N_MAX = 8, 13  # GPT-3's clamp for N
PERCENTILE = 5

# \x1c-\x1f are whitespace to str.split() but not to bytes.split(): make them spaces.
_ASCII_TABLE = bytes.maketrans(
    string.ascii_uppercase.encode() + bytes(range(0x1C, 0x20)),
    string.ascii_lowercase.encode() + b" " * 4,
)
_ASCII_DELETE = string.punctuation.encode()  # exactly the ASCII characters of categories P* and S*
_NON_ASCII_RUN = re.compile(rb"[\x80-\xff]+")


@cache
def _drop(c: str) -> bool:
    """A punctuation mark or symbol (Unicode category P* or S*)."""
    return unicodedata.category(c)[0] in "PS"


def _fix_run(m: re.Match) -> bytes:
    text = m.group().decode("utf-8", "surrogatepass")
    return "".join(" " if c.isspace() else c for c in text if not _drop(c)).encode("utf-8", "surrogatepass")


def normalized(text: str) -> bytes:
    """`text` lowercased, with punctuation and symbols deleted and all whitespace kept as ASCII whitespace."""
    if text.isascii():
        return text.encode("ascii").translate(_ASCII_TABLE, _ASCII_DELETE)
    b = text.lower().encode("utf-8", "surrogatepass").translate(_ASCII_TABLE, _ASCII_DELETE)
    return _NON_ASCII_RUN.sub(_fix_run, b)


def words(text: str) -> list[bytes]:
    """The normalised words of `text`, as UTF-8 bytes."""
    return normalized(text).split()


_PIECE = re.compile(r"\S+")


def word_spans(text: str) -> list[tuple[int, int]]:
    """Character spans in `text` of the words `words(text)` returns, one per word, in order."""
    out = []
    for m in _PIECE.finditer(text):
        if normalized(m.group()).strip():
            out.append(m.span())
    return out


def nearest_rank_percentile(values, pct: float) -> int:
    """The pct-th percentile by the nearest-rank rule: the ceil(pct/100 * n)-th smallest value."""
    v = sorted(values)
    if not v:
        raise ValueError("no values")
    return v[max(1, math.ceil(pct / 100 * len(v))) - 1]


def choose_n(lengths) -> tuple[int, int]:
    """GPT-3's N: the 5th-percentile item length in words, clamped to 8..13. Returns (N, p5)."""
    p5 = nearest_rank_percentile(lengths, PERCENTILE)
    return min(N_MAX, max(N_MIN, p5)), p5
