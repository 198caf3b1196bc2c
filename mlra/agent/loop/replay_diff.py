"""What a replay counts as a difference between a tool's output now and as recorded
(agent/loop/replay_provider.py), and how it says where two texts differ in a line.

Output that changes from one run to the next with no change in behaviour (timings,
`it/s` rates, dates, the times `ls -la` shows, progress bars redrawn a different
number of times) is masked before two outputs are compared.
"""

from __future__ import annotations

import difflib
import re

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_VOLATILE: list[tuple[re.Pattern[str], str]] = [
    # tqdm's elapsed<remaining: [00:12<00:34, ...] or [01:02:03<?, ...]
    (re.compile(r"\[(?:\d+:)?\d{2}:\d{2}<(?:\?|(?:\d+:)?\d{2}:\d{2})"), "[<elapsed>"),
    # ISO dates, with a time and a zone or not: 2024-01-02, 2024-01-02T12:34:56.789Z
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"
            r"(?:Z|[+-]\d{2}:?\d{2}|\b))?"
        ),
        "<date>",
    ),
    # `ls -l` times (Jan  2 12:34, Jan  2  2024) and `date` (Mon Jan  2 12:34:56 UTC 2024)
    (
        re.compile(
            rf"\b{_MONTH}\s+\d{{1,2}}\s+(?:\d{{1,2}}:\d{{2}}(?::\d{{2}})?(?:\s+[A-Z]{{2,5}}\s+\d{{4}})?|\d{{4}})\b"
        ),
        "<date>",
    ),
    # clock times with seconds (12:34:56, 12:34:56.789); not file:line:column
    (re.compile(r"(?<![\d:])\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?![\d:])"), "<time>"),
    # rates: 3.61it/s, 1.2s/it, 12.5 MB/s, 850 tokens/s, tqdm's ?it/s
    (
        re.compile(
            r"(?:\?|(?<![\w.])\d+(?:\.\d+)?)\s?(?:[kKMGT]?i?B|it|ex|examples|samples|tok|tokens"
            r"|steps|batches)/s\b|(?<![\w.])\d+(?:\.\d+)?\s?s/(?:it|step|batch)\b"
        ),
        "<rate>",
    ),
    # durations: 0m1.234s (`time`), 1.2s, 35 ms, 2 seconds, 3 min
    (
        re.compile(
            r"(?<![\w.])(?:\d+m)?\d+(?:\.\d+)?\s?(?:ms|us|µs|ns|s|sec|secs|seconds?|min|mins"
            r"|minutes?)\b"
        ),
        "<duration>",
    ),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0x<address>"),  # Python's <object at 0x7f...>
    (re.compile(r"/tmp/tmp[\w-]{6,}"), "/tmp/<tempname>"),  # tempfile's random names
]
"""What differs between two runs that behave the same. Numbers that a result is made
of (a loss, an accuracy, a file's size) are left alone: those are the run's behaviour."""


def steady_line(line: str) -> str:
    """A line of output with what varies from run to run masked.

    A line redrawn with carriage returns (a progress bar) is read as a terminal
    shows it, its last drawing: how often it was redrawn depends on speed alone.
    """
    line = line.rstrip("\r").rsplit("\r", 1)[-1]
    for pattern, mask in _VOLATILE:
        line = pattern.sub(mask, line)
    return line


def steady(text: str) -> str:
    """`steady_line` on every line: two outputs that differ only in volatile parts match."""
    return "\n".join(steady_line(line) for line in text.split("\n"))


def _clip(line: str, start: int, end: int, width: int = 100) -> str:
    """The part of a line around [start, end), the span that differs."""
    start, end = max(0, start - 24), min(len(line), max(end, start) + 24)
    if end - start > width:
        end = start + width
    text = line[start:end]
    return ("…" if start > 0 else "") + text + ("…" if end < len(line) else "")


def _common(a: str, b: str) -> int:
    """How many leading characters two strings share."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _line_change(old: str, new: str) -> str:
    """`recorded '…41…', now '…42…'`: a changed line, cut to where it changed."""
    prefix = _common(old, new)
    suffix = _common(old[prefix:][::-1], new[prefix:][::-1])
    return (
        f"recorded {_clip(old, prefix, len(old) - suffix)!r}, "
        f"now {_clip(new, prefix, len(new) - suffix)!r}"
    )


def short_diff(old: str, new: str, *, lines: int = 3) -> str:
    """Where two outputs differ, beyond what is volatile, in one line: at most `lines`
    changed lines, each with its line number and the text around the change."""
    old_lines, new_lines = old.split("\n"), new.split("\n")
    matcher = difflib.SequenceMatcher(
        None,
        [steady_line(x) for x in old_lines],
        [steady_line(x) for x in new_lines],
        autojunk=False,
    )
    parts: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        pairs = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        for k in range(pairs):
            old_line, new_line = old_lines[i1 + k], new_lines[j1 + k]
            parts.append(f"line {j1 + k + 1}: {_line_change(old_line, new_line)}")
        for i in range(i1 + pairs, i2):
            parts.append(f"recorded line {i + 1} {_clip(old_lines[i], 0, 0)!r} is gone")
        for j in range(j1 + pairs, j2):
            parts.append(f"line {j + 1} {_clip(new_lines[j], 0, 0)!r} is new")
    shown = parts[:lines]
    if len(parts) > lines:
        shown.append(f"{len(parts) - lines} more changed lines")
    return "; ".join(shown)


def first_changed_line(old: str, new: str) -> str:
    """The first line that differs, volatile parts and all (a prompt's clock note differs
    only in what `short_diff` counts as volatile)."""
    old_lines, new_lines = old.split("\n"), new.split("\n")
    for n, (a, b) in enumerate(zip(old_lines, new_lines, strict=False), 1):
        if a != b:
            return f"line {n}: {_line_change(a, b)}"
    n = min(len(old_lines), len(new_lines)) + 1
    return f"line {n}: " + ("is new" if len(new_lines) > len(old_lines) else "is gone")
