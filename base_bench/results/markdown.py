"""Text from outside (a model name, an item id, a corpus excerpt, a report someone sent) made safe to
put into a Markdown file: it shows as the same text, on one line, and can never become markup.

    f"## Data: {md_text(description)}"          # a heading, a paragraph, a list item
    f"| {md_cell(item_id)} | ... |"             # one table cell ("(blank)" when empty)
    f"Model {md_code(spec)}."                   # a code span; md_code(spec, cell=True) in a table

Every Markdown writer of base-bench (predictions.md, compare.md, leaderboard.md, trajectory.md,
contamination.md, contamination_report.md, canary_probe.md) puts each field that it did not make
itself through one of these three. What they do, so that no renderer (GitHub, GitLab, CommonMark,
Python-Markdown) finds markup in the text:

* `&`, `<`, `>` become HTML entities, so there is no raw HTML (`<img onerror=...>`, `<script>`),
  no autolink (`<javascript:...>`) and no entity smuggled in;
* `\\`, backticks, `*`, `[`, `]`, `{`, `}`, `#`, `|`, `~` and `$` get a backslash, so there is no
  code span, emphasis, link or image (`[x](javascript:...)`; `![x](...)` needs the `[` too),
  attribute list, heading, table cell break, strike-through or math;
* so does a run of `_` unless it stands between two letters or digits (`code_completion-050`
  stays as it is: CommonMark never reads such a run as emphasis);
* so does what GFM's autolink extension would make a link from (the `:` of `://`, the `.` of
  `www.`, an `@`), so `https://phish.example`, `www.phish.example` and `a@phish.example` stay text
  on GitHub too (the escape renders as the character itself);
* a `-`, `+` or `=` at the start, or a number followed by `.` or `)` and a space, is escaped too,
  so a field at the start of a line starts no list item, rule or setext heading;
* line breaks (CR, LF, VT, FF, NEL, U+2028, U+2029) become "⏎", a tab a space, and every other
  control character and the bidirectional overrides (U+202A-U+202E, U+2066-U+2069) become U+FFFD,
  so a field stays on its line and reads in the order it is stored.

A code span cannot hold escapes, so `md_code` picks a run of backticks longer than any inside the
text instead. GFM splits table cells on a `|` even inside code, so in a cell a text holding one is
given as md_cell text instead of code.
"""

from __future__ import annotations

import re

NEWLINE = "⏎"
BLANK = "(blank)"
_LINE_BREAKS = "\r\n|[\r\n\x0b\x0c\x85\u2028\u2029]"
_CONTROL = "[\x00-\x08\x0e-\x1f\x7f\x80-\x84\x86-\x9f\u202a-\u202e\u2066-\u2069]"
_BREAK_RE = re.compile(_LINE_BREAKS)
_CONTROL_RE = re.compile(_CONTROL)
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_BACKSLASHED = "\\`*[]{}#|~$"
_SPECIAL_RE = re.compile("[" + re.escape("&<>" + _BACKSLASHED) + "]|(?<![^\\W_])_+|_+(?![^\\W_])")
_LEADING_RE = re.compile(r"^([-+=])|^(\d{1,9})([.)])(?=\s|$)")
# what GFM's autolink extension starts a link from: the ":" of "://" (http://, https://, ftp://),
# the "." of "www.", and the "@" of an address (a@b.example, mailto:, xmpp:)
_AUTOLINK_RE = re.compile(r"(?i)(?<=www)\.|:(?=//)|@")


def one_line(text) -> str:
    """str(text) on one line: line breaks as ⏎, a tab as a space, other control characters and the
    bidirectional overrides as U+FFFD. No Markdown escaping (see md_text)."""
    s = _BREAK_RE.sub(NEWLINE, str(text)).replace("\t", " ")
    return _CONTROL_RE.sub("\ufffd", s)


def md_text(text) -> str:
    """`text` (any value; str() is taken) as Markdown inline text that renders as itself."""
    s = one_line(text)
    s = _SPECIAL_RE.sub(lambda m: _ENTITIES.get(m[0]) or "".join("\\" + c for c in m[0]), s)
    s = _AUTOLINK_RE.sub(lambda m: "\\" + m[0], s)
    return _LEADING_RE.sub(lambda m: "\\" + m[1] if m[1] else m[2] + "\\" + m[3], s)


def md_cell(text) -> str:
    """`text` as the content of one Markdown table cell: md_text, trimmed, "(blank)" when empty."""
    return md_text(str(text).strip()) or BLANK


def md_code(text, cell: bool = False) -> str:
    """`text` as one Markdown code span (with its backticks); `cell=True` inside a table cell."""
    s = one_line(str(text).strip() if cell else text)
    if cell:
        if "|" in s:  # GFM splits cells on a pipe inside code too, and "\\|" would end the cell
            return md_cell(s)
    if not s.strip():
        return md_text(BLANK)
    longest = max((len(r) for r in re.findall("`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s[0] in "` " or s[-1] in "` " else ""
    return f"{fence}{pad}{s}{pad}{fence}"
