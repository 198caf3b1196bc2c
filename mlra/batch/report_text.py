"""Text from a run made safe for Markdown: report.md (batch/report_tables.py,
batch/report_curves.py) and the parameters table a TensorBoard export writes (its text
plugin renders Markdown, images included); and for the report's plots, whose titles,
labels and ticks matplotlib reads as math between `$`s (`$\\frac{a$` would stop the
report with a parse error): there every `$` is `\\$`, a dollar sign.

What a run's scripts printed or wrote names its series (`![p](https://host/p.png?d=1)`,
`<img src=x onerror=alert(1)>`), and a task, a model, a reason, a tag or a file name
may come from anywhere: rendered as written, a Markdown viewer would fetch the image,
follow the disguised link or run the HTML. So each such text is escaped where it is
written: its control characters as in the terminal (mlra/terminal_text.py, one line),
`<` as `&lt;` (no HTML, no `<url>` autolink; `>` too where it would open a quote), an
`&` that would open an entity as `&amp;`, and a backslash before what Markdown reads
as markup: `[` `]` (no link or image), a `(` after a `]`, `` ` `` (no code span), `*`
`~` `|` (emphasis, strikethrough, a table's cell), a `_` that is not inside a word
(`answer__m__s1` keeps its underscores: inside a word they are never emphasis), a
backslash before punctuation, and an opening `#` `-` `+` `=` or `1. `. What GitHub's
Markdown links by itself is broken the same way: the `:` of `://`, the `.` of `www.`,
an `@` (an e-mail address). A viewer that guesses links in bare domains (`example.com`,
markdown-it's fuzzy links) may still link one: shown as itself, never fetched. report.md
stays readable with `cat`: names and numbers read as they are, only markup gains a
backslash.
"""

from __future__ import annotations

import re

from mlra.terminal_text import printable_line

_MARKUP = re.compile(r"[<>&\[\]`*~|_(\\@]|:(?=//)|(?<![\w.])(?i:www)\.")
_ENTITY = re.compile(r"&(#\d+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")
_OPENS_BLOCK = re.compile(r"[#=]|[-+](?=[ \t]|$)|-(?=-*[ \t]*$)|\d{1,9}[.)](?=[ \t]|$)")
"""What opens a heading, a list item, a thematic break or an underline at a line's start
(after `- ` too: a list item may hold a heading or a list)."""
_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _inside_word(text: str, i: int) -> bool:
    """Whether the run of `_` holding position `i` has a letter or digit on each side."""
    start, end = i, i
    while start > 0 and text[start - 1] == "_":
        start -= 1
    while end < len(text) and text[end] == "_":
        end += 1
    return start > 0 and end < len(text) and text[start - 1].isalnum() and text[end].isalnum()


def md_text(value: object, *, line_start: bool = True) -> str:
    """`value` as one line of Markdown that renders as the very text: no image, link,
    HTML, code span or emphasis formed from it."""
    text = printable_line(str(value))

    def escape(match: re.Match[str]) -> str:
        char, i = match.group(), match.start()
        if len(char) > 1:  # `www.`: an autolink's opening, its dot escaped
            return char[:-1] + "\\."
        if char == "<":
            return "&lt;"
        if char == ">":
            return "&gt;" if i == 0 else char  # mid-line it closes nothing (no `<` opens)
        if char == "&":
            return "&amp;" if _ENTITY.match(text, i) else char
        if char == "_" and _inside_word(text, i):
            return char
        if char == "(" and not (i and text[i - 1] == "]"):
            return char
        if char == "\\" and not (i + 1 < len(text) and text[i + 1] in _PUNCTUATION):
            return char  # not an escape to Markdown: `\\x1b`, a path's `\\dir`
        return "\\" + char

    out = _MARKUP.sub(escape, text)
    opener = _OPENS_BLOCK.match(out) if line_start else None
    if opener is not None:  # a heading, a list item or an underline where a line begins
        at = opener.end() - 1
        out = out[:at] + "\\" + out[at:]
    return out


def md_cell(value: object) -> str:
    """A table cell (`md_text` escapes its `|` already). A cell's text never begins a
    line (a table's cells are inline), so no block opener is escaped: `-` and `-0.027`
    read as written, not `\\-`."""
    return md_text(value, line_start=False)


def plot_text(value: object, limit: int | None = None) -> str:
    """`value` as a plot's title, label or tick shows it: one line, at most `limit`
    characters of it, no `$` that matplotlib would read as math."""
    text = printable_line(str(value))[:limit]
    return text.replace("$", "\\$")
