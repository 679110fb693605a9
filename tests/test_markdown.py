"""results/markdown.py: text from outside shown in Markdown as itself, on one line, never as markup.

Hand-written cases (input -> exact output), then the property the writers rely on: rendered by a
CommonMark renderer with GFM tables (markdown-it), each escaped text reads back as the text it was,
in a paragraph, a heading and a table cell alike, and the table keeps its width.
"""

import html
import random
import re

import pytest
from markdown_it import MarkdownIt

from base_bench.results.markdown import BLANK, md_cell, md_code, md_text, one_line


@pytest.mark.parametrize(
    "text, expected",
    [
        ("plain words", "plain words"),
        ("org/model-a 1.5B", "org/model-a 1.5B"),
        ("code_completion-050", "code_completion-050"),  # a run of _ between letters is never emphasis
        ("<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)&gt;"),
        ("a & b", "a &amp; b"),
        ("&lt;", "&amp;lt;"),  # an entity in the text stays text
        ("[click](javascript:alert(1))", "\\[click\\](javascript:alert(1))"),
        ("![i](http://e.example/i.png)", "!\\[i\\](http\\://e.example/i.png)"),
        ("https://phish.example/login", "https\\://phish.example/login"),  # GFM autolinks bare URLs ...
        ("see WWW.phish.example now", "see WWW\\.phish.example now"),  # ... www. text ...
        ("mail a.b@phish.example", "mail a.b\\@phish.example"),  # ... and addresses
        ("ftp://x xmpp:a@b.example", "ftp\\://x xmpp:a\\@b.example"),
        ("04:00:00 a:b", "04:00:00 a:b"),
        ("`code`", "\\`code\\`"),
        ("a | b", "a \\| b"),
        ("*bold* _it_ __init__", "\\*bold\\* \\_it\\_ \\_\\_init\\_\\_"),
        ("x_", "x\\_"),
        ("# heading", "\\# heading"),
        ("line one\nline two\r\nthree\rfour", "line one⏎line two⏎three⏎four"),
        ("u\u2028v\u2029w\x85z", "u⏎v⏎w⏎z"),
        ("tab\there", "tab here"),
        ("esc\x1b[2J bell\x07 nul\x00", "esc\ufffd\\[2J bell\ufffd nul\ufffd"),
        ("rtl\u202eevil\u2066", "rtl\ufffdevil\ufffd"),
        ("- item", "\\- item"),
        ("+ item", "\\+ item"),
        ("= setext", "\\= setext"),
        ("12. ordered", "12\\. ordered"),
        ("3) ordered", "3\\) ordered"),
        ("3.5 points", "3.5 points"),
        ("mid - dash 1. not at start", "mid - dash 1. not at start"),
        ("back\\slash", "back\\\\slash"),
        ("{: onclick=x}", "\\{: onclick=x\\}"),
        ("~~strike~~ $math$", "\\~\\~strike\\~\\~ \\$math\\$"),
        (None, "None"),
        (3.5, "3.5"),
        (["a", "<b>"], "\\['a', '&lt;b&gt;'\\]"),
    ],
)
def test_md_text(text, expected):
    assert md_text(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", BLANK),
        ("   ", BLANK),
        (" padded ", "padded"),
        ("a|b", "a\\|b"),
        ("x\n", "x"),
    ],
)
def test_md_cell(text, expected):
    assert md_cell(text) == expected


@pytest.mark.parametrize(
    "text, cell, expected",
    [
        ("org/model", False, "`org/model`"),
        ("<img src=x>", False, "`<img src=x>`"),  # code is shown as it is, never as HTML
        ("a`b", False, "``a`b``"),
        ("``x", False, "``` ``x ```"),
        (" lead", False, "`  lead `"),
        ("a\nb", False, "`a⏎b`"),
        ("a|b", False, "`a|b`"),
        ("a|b", True, "a\\|b"),  # GFM splits cells on a pipe even in code: plain escaped text instead
        ("", False, "\\(blank)"[1:]),
        ("path/x.gguf", True, "`path/x.gguf`"),
    ],
)
def test_md_code(text, cell, expected):
    assert md_code(text, cell=cell) == expected


NASTY = [
    "<img src=x onerror=alert(1)>\n# Owned\n[click](javascript:alert(1))",
    "| a | b |\n|---|---|\n| c | d |",
    "`` ` ``` ` code",
    "\\|\\\\|\\`",
    "***x*** ___y___ **z",
    "<https://e.example> <javascript:alert(1)> <a@b.c>",
    "https://phish.example/login www.phish.example a@phish.example",
    "&amp; &#60; &lt;script&gt;",
    "[a]: http://e.example\n[a]",
    "1. x\n- y\n> z\n    code\n---",
    "a\\\nb  \nc",
    "~~s~~ $x$ {#id}",
    "é_ü __über__ _x_y_",
]


@pytest.mark.parametrize("text", NASTY + ["".join(random.Random(s).choices("w.:/@ ahx", k=30)) for s in range(300)])
def test_escaped_text_has_nothing_gfm_autolinks(text):
    """GFM links bare http(s)://, ftp://, www. and addresses; md_text escapes the character each starts from."""
    shown = md_text(text)
    assert not re.search(r"(?<!\\):(?=//)|(?<!\\)@", shown), shown
    assert not re.search(r"(?i)www\.", shown), shown


def render(md: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)


def _text_of(html_fragment: str, tag: str) -> str:
    inner = html_fragment.split(f"<{tag}>", 1)[1].rsplit(f"</{tag}>", 1)[0]
    return html.unescape(inner)


@pytest.mark.parametrize(
    "text", NASTY + ["".join(random.Random(s).choices("ab _*`|[]()<>&#!~$\\-=.1\n", k=30)) for s in range(300)]
)
def test_escaped_text_renders_as_itself_everywhere(text):
    shown = one_line(text)
    para = render("x " + md_text(text) + " y")
    assert para.startswith("<p>") and para.count("<") == 2, para  # one paragraph, no other tag
    assert _text_of(para, "p") == "x " + shown + " y"
    head = render("## x " + md_text(text))
    assert head.count("<") == 2 and _text_of(head, "h2") == ("x " + shown).strip()
    table = render(f"| a | b |\n|---|---|\n| {md_cell(text)} | {md_code(text, cell=True)} |\n")
    assert table.count("<td>") == 2 and table.count("<th>") == 2
    in_cell = one_line(text.strip()) or BLANK
    assert _text_of(table.split("<td>")[1].split("</td>")[0].join(["<td>", "</td>"]), "td") == in_cell
    cell_code = table.split("<td>")[2].split("</td>")[0]
    assert html.unescape(cell_code.replace("<code>", "").replace("</code>", "")) == in_cell
    code = render("x " + md_code(text) + " y")
    if shown.strip():
        assert _text_of(code, "code") == shown
