"""Short excerpts of a matched document, around the words an n-gram matched.

    excerpts(text, [(first word, number of words), ...])   -> one excerpt per match, in order
    excerpt_at_char(text, start, end)                      -> the text around characters start..end

Word positions are those of normalize.words(text). One pass over the text's whitespace-separated
pieces finds the characters of the wanted words, without keeping every word's span (a matched
document may be very long). An excerpt is the match and up to CONTEXT characters either side, with
runs of whitespace shown as one space, "…" where it was cut, and at most LIMIT characters.
"""

from __future__ import annotations

import re

from .normalize import normalized

CONTEXT = 80
LIMIT = 400
_PIECE = re.compile(r"\S+")
_SPACE = re.compile(r"\s+")


def excerpt_at_char(text: str, start: int, end: int) -> str:
    lo, hi = max(0, start - CONTEXT), min(len(text), end + CONTEXT)
    if hi - lo > LIMIT:
        hi = lo + LIMIT
    body = _SPACE.sub(" ", text[lo:hi]).strip()
    return ("…" if lo > 0 else "") + body + ("…" if hi < len(text) else "")


def excerpts(text: str, matches: list[tuple[int, int]]) -> list[str]:
    """An excerpt for each (first word, length) match, in the order given."""
    if not matches:
        return []
    want: dict[int, list[tuple[int, str]]] = {}  # word position -> [(match number, "start"/"end")]
    for k, (first, length) in enumerate(matches):
        want.setdefault(first, []).append((k, "start"))
        want.setdefault(first + length - 1, []).append((k, "end"))
    last = max(want)
    spans: dict[int, list[int]] = {k: [0, 0] for k in range(len(matches))}
    w = 0
    for m in _PIECE.finditer(text):
        if not normalized(m.group()).strip():
            continue
        for k, side in want.get(w, ()):
            if side == "start":
                spans[k][0] = m.start()
            else:
                spans[k][1] = m.end()
        if w == last:
            break
        w += 1
    return [excerpt_at_char(text, s, max(s, e)) for s, e in (spans[k] for k in range(len(matches)))]
