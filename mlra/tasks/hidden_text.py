"""Keeping the task's hidden files out of what a validation tells the agent.

A validation grades the agent's artifact on hidden data, and what the evaluator says
when it fails (its exception, the last lines of its output, the violations it
reports) may quote that data or the grader's own hidden source: a traceback shows the
line it failed on, a crash in the middle of an evaluation the example it was on. The
agent is told the score and the split's name; of an evaluator's message it is told
only the lines that quote nothing of the hidden files, the others withheld with a
word saying so. The event log keeps the message whole, for the user.

A line quotes the hidden files when any run of WINDOW characters of it (taken every
STRIDE characters, so any verbatim quote of WINDOW + STRIDE characters or more is
found) occurs in them, as bytes or, for JSON lines, in the strings they hold. A quote
shorter than that (a label, a number) cannot be told from chance and is let through.
Hidden files beyond a byte budget are not read whole: then no evaluator message is
shown at all, since it could not be checked.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path

WINDOW = 12
STRIDE = 6
BUDGET_BYTES = 32 * 1024 * 1024
"""Hidden bytes read to check against: the built-in tasks hold about 1 MB."""
MESSAGE_CHARS = 2_000
"""What of an evaluator's message the agent may be shown at most."""
WITHHELD = "[a line that quotes the task's hidden files is withheld]"
UNCHECKED = (
    "[the evaluator's message is withheld: the task's hidden files are too large to check "
    "it against them]"
)


class HiddenText:
    """The contents of a task's hidden files, read once, to check messages against."""

    def __init__(self, paths: Iterable[Path], *, budget: int = BUDGET_BYTES) -> None:
        self.paths = list(paths)
        self.budget = budget
        self._blobs: list[bytes] | None = None
        self.complete = True

    def _load(self) -> list[bytes]:
        if self._blobs is not None:
            return self._blobs
        blobs: list[bytes] = []
        used = 0
        for path in _files(self.paths):
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if used + size > self.budget:
                self.complete = False
                break
            try:
                data = path.read_bytes()
            except OSError:
                continue
            used += len(data)
            blobs.append(data)
            strings = _json_strings(data) if path.suffix in (".json", ".jsonl") else b""
            if strings:
                blobs.append(strings)
        self._blobs = blobs
        return blobs

    def quotes(self, line: str) -> bool:
        """Whether the line holds a verbatim run of the hidden files' text."""
        blobs = self._load()
        if not self.complete:
            return True
        data = " ".join(line.split()).encode("utf-8", "surrogateescape")
        if len(data) < WINDOW:
            return False
        starts = range(0, len(data) - WINDOW + 1, STRIDE)
        windows = {data[i : i + WINDOW] for i in starts} | {data[-WINDOW:]}
        return any(window in blob for window in windows for blob in blobs)

    def shown(self, message: str | None) -> str | None:
        """The message as the agent may read it: cut to MESSAGE_CHARS, each line that
        quotes the hidden files replaced by a word that it was withheld."""
        if not message:
            return message
        self._load()
        if not self.complete:
            return UNCHECKED
        text = message if len(message) <= MESSAGE_CHARS else message[:MESSAGE_CHARS] + " […]"
        out: list[str] = []
        for line in text.split("\n"):
            # An evaluator's last lines come joined by " | " (tasks/evaluators/base.py).
            parts = [self._part(part) for part in line.split(" | ")]
            out.append(" | ".join(_merged(parts)))
        return "\n".join(out)

    def _part(self, part: str) -> str:
        """The part, or what of it comes before a quote ("evaluation failed: …")."""
        if not self.quotes(part):
            return part
        head, sep, _rest = part.partition(": ")
        if sep and len(head) <= 80 and not self.quotes(head):
            return f"{head}: {WITHHELD}"
        return WITHHELD


def _merged(parts: list[str]) -> list[str]:
    """Runs of withheld parts said once."""
    out: list[str] = []
    for part in parts:
        if part == WITHHELD and out and out[-1] == WITHHELD:
            continue
        out.append(part)
    return out


def _files(paths: Iterable[Path]) -> list[Path]:
    """The regular files under the hidden paths (task files, trusted), in a fixed order."""
    found: list[Path] = []
    stack = [Path(p) for p in paths]
    while stack:
        path = stack.pop()
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                stack.extend(sorted((path / name for name in os.listdir(path)), reverse=True))
            except OSError:
                continue
        elif stat.S_ISREG(st.st_mode) and "__pycache__" not in path.parts:
            found.append(path)
    return found


def _json_strings(data: bytes) -> bytes:
    """The strings JSON lines hold, decoded (a quote of them has no escapes)."""
    strings: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for raw in data.splitlines():
        try:
            walk(json.loads(raw))
        except ValueError:
            continue
    if not strings:
        try:
            walk(json.loads(data))
        except ValueError:
            pass
    return "\n".join(strings).encode("utf-8", "surrogateescape")
