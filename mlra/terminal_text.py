"""Text from a run, made fit for a terminal: every control character shown, none obeyed.

What an agent, a model, a command, a file name, a note, a job name, a task file or an
evaluator says reaches the user's terminal in the transcript, the replay, the console,
`mlra runs` and the reports. A terminal obeys what it is sent: ESC opens sequences
that move the cursor, recolour, retitle the window, write the clipboard (OSC 52), hang
a false target under a link's text (OSC 8) or make some terminals type an answer back
into the shell; the C1 range U+0080–U+009F holds the 8-bit forms of the same openers
(U+009B is CSI, U+009D OSC, U+0090 DCS); a carriage return or backspace writes over
what is already shown; and the Unicode bidirectional overrides and isolates reorder
the characters on screen so that a line reads other than it is (Trojan Source,
CVE-2021-42574). So every such character is replaced where text is shown, never where
it is recorded: the event log keeps the exact bytes, and a display derives from it.

Escaped, not stripped: each becomes its Python escape (`\\x1b`, `\\x9b`, `\\r`,
`\\u202e`), so `printf '\\e]52;c;...\\a'` shows as `\\x1b]52;c;...\\x07`. A person
debugging a run sees that the agent tried it and what exactly; stripping would hide
the attempt and leave the rest of the sequence as garbage that looks like output.
Escaping every opener and terminator disarms every sequence (CSI, OSC, DCS, APC, PM,
SOS) without parsing them: what follows an escaped ESC is plain text. The one
ambiguity, a literal backslash followed by `x1b` in the text, is accepted: doubling
every backslash would garble every path and regex shown for a case a person can tell
from the log.

Lone surrogates (a file name that was not UTF-8, decoded with `surrogateescape`) are
escaped too (`\\udcff`): written out they would raise UnicodeEncodeError, or, through a
`surrogateescape` stream, become the raw byte again, which may itself be a C1 control.

This runs on every chunk of a command's streamed output, so the common case (nothing
to escape) is one regular-expression scan in C, and only what matches calls back into
Python: measured on this project's 2-core test machine, 10 MB of plain training-log
output takes 26 ms (in 4 KB chunks 27 ms), 10 MB of tqdm lines redrawn with carriage
returns 93 ms, and 10 MB of ANSI-coloured log lines 153 ms.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_C0_KEPT = "\t\n"
"""What a multi-line display keeps: a tab and a line break only move to a fresh place."""

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""The marks, embeddings, overrides and isolates that reorder what is shown."""

_OTHER = "\x7f-\x9f\u2028\u2029\ud800-\udfff"
"""DEL, the C1 controls, the line and paragraph separators (a line break to some
readers, nothing to others) and lone surrogates."""

_MULTILINE = re.compile(f"[\x00-\x08\x0b-\x1f{_OTHER}{_BIDI}]")
_ONE_LINE = re.compile(f"[\x00-\x1f{_OTHER}{_BIDI}]")
_IN_JSON = re.compile(f"[{_OTHER}{_BIDI}]")
"""What a JSON text written with `ensure_ascii=False` leaves raw (it escapes C0 itself)."""
_INVISIBLE = re.compile(f"[\x00-\x1f{_OTHER}{_BIDI}]")

_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape_of(char: str) -> str:
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


_ESCAPES: dict[str, str] = {}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    escaped = _ESCAPES.get(char)
    if escaped is None:
        escaped = _ESCAPES[char] = _escape_of(char)
    return escaped


def printable(text: str) -> str:
    """`text` with every character a terminal would obey escaped; line breaks and tabs
    kept (a transcript, a command's output, a file's preview, a report)."""
    if _MULTILINE.search(text) is None:
        return text
    return _MULTILINE.sub(_escape, text)


def printable_line(text: str) -> str:
    """`text` as one line: line breaks and tabs escaped too (a name, a path, a table
    cell, a status line), so that no name can begin a line of its own that looks like
    one mlra printed."""
    if _ONE_LINE.search(text) is None:
        return text
    return _ONE_LINE.sub(_escape, text)


def printable_json(text: str) -> str:
    """A JSON text with what `json.dumps(..., ensure_ascii=False)` and pydantic leave
    raw (DEL, C1, bidirectional controls, U+2028/U+2029, lone surrogates) written as
    `\\uXXXX` escapes: the very same JSON value to any reader, nothing for a terminal
    to obey. C0 controls cannot be raw in a JSON string: the encoder escapes them."""
    if _IN_JSON.search(text) is None:
        return text
    return _IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def replace_controls(text: str, mark: Callable[[str], str]) -> str:
    """`text` with each character `printable` escapes (line breaks and tabs kept) replaced
    by `mark(char)`: for a display that shows them its own way (`mlra share`'s page marks
    each as ⟨U+202E⟩), from the same classification as the terminal's."""
    if _MULTILINE.search(text) is None:
        return text
    return _MULTILINE.sub(lambda m: mark(m.group()), text)


def as_drawn_line(line: str) -> str:
    """A line as a terminal leaves it drawn: what was written after its last carriage
    return (a progress bar redrawn with `\r` shows its last state); a `\r` ending it
    (a `\r\n` line end, a bar's trailing redraw) draws nothing."""
    return line.rstrip("\r").rsplit("\r", 1)[-1]


def as_drawn(text: str) -> str:
    """A command's output as a terminal leaves it drawn, each line by `as_drawn_line`:
    what the console's transcript, the headless lines and the shared page show of it.
    Only for output: in a command or a message a `\r` could hide what precedes it, and
    there `printable` shows it."""
    if "\r" not in text:
        return text
    return "\n".join(as_drawn_line(line) for line in text.split("\n"))


def has_controls(text: str) -> bool:
    """Whether `text` holds anything `printable_line` would escape."""
    return _INVISIBLE.search(text) is not None


def without_controls(text: str) -> str:
    """`text` with the characters `printable` escapes removed, and each lone surrogate
    replaced by U+FFFD: for a last pass over text already laid out on a screen, where
    an escape's extra width would break the layout (these take no cells, and a
    surrogate and U+FFFD one each)."""
    if _INVISIBLE.search(text) is None:
        return text
    return _INVISIBLE.sub(lambda m: "\ufffd" if "\ud800" <= m.group() <= "\udfff" else "", text)
