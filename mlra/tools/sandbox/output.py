"""A command's output as every sandbox keeps and streams it.

Shared by the local and Docker sandboxes so that a command's output reads the
same whichever ran it: decoded as it arrives, cut to its head and tail, and
passed to the console's callback without a broken callback killing the command.
"""

from __future__ import annotations

import codecs
import logging
from collections import deque

from mlra.tools.sandbox.base import OutputCallback, Stream

logger = logging.getLogger(__name__)

OUTPUT_HEAD_CHARS = 256 * 1024
OUTPUT_TAIL_CHARS = 256 * 1024


class BoundedOutput:
    """Interleaved output kept to its head and tail, since a command may print gigabytes."""

    def __init__(self, head_chars: int, tail_chars: int) -> None:
        self.head_chars = head_chars
        self.tail_chars = tail_chars
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self.dropped_chars = 0
        self.dropped_lines = 0

    def add(self, text: str) -> None:
        if self._head_len < self.head_chars:
            take = text[: self.head_chars - self._head_len]
            self._head.append(take)
            self._head_len += len(take)
            text = text[len(take) :]
        if not text:
            return
        self._tail.append(text)
        self._tail_len += len(text)
        # Drop whole chunks only; the first kept one is trimmed when the text is built.
        while self._tail and self._tail_len - len(self._tail[0]) >= self.tail_chars:
            gone = self._tail.popleft()
            self._tail_len -= len(gone)
            self.dropped_chars += len(gone)
            self.dropped_lines += gone.count("\n")

    @property
    def cut(self) -> bool:
        return self.dropped_chars > 0 or self._tail_len > self.tail_chars

    def text(self) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        dropped_chars, dropped_lines = self.dropped_chars, self.dropped_lines
        excess = len(tail) - self.tail_chars
        if excess > 0:
            dropped_chars += excess
            dropped_lines += tail.count("\n", 0, excess)
            tail = tail[excess:]
        if dropped_chars == 0:
            return head + tail
        return (
            f"{head}\n[... {dropped_chars:,} characters ({dropped_lines:,} lines) of output "
            f"cut here; only the first and last {self.tail_chars // 1024} KB are kept ...]\n{tail}"
        )


class OutputSink:
    """Decodes each stream incrementally as data arrives, so a UTF-8 character split
    across two reads is never garbled, keeps the text and passes it on at once."""

    def __init__(self, on_output: OutputCallback | None) -> None:
        self.output = BoundedOutput(OUTPUT_HEAD_CHARS, OUTPUT_TAIL_CHARS)
        self.on_output = on_output
        self._decoders = {
            stream: codecs.getincrementaldecoder("utf-8")(errors="replace")
            for stream in ("stdout", "stderr")
        }

    def feed(self, stream: Stream, data: bytes, *, final: bool = False) -> None:
        text = self._decoders[stream].decode(data, final=final)
        if not text:
            return
        self.output.add(text)
        if self.on_output is not None:
            try:
                self.on_output(stream, text)
            except Exception:
                # A broken display must not kill the command; it just stops being fed.
                logger.exception("an output callback raised; its output is no longer streamed")
                self.on_output = None

    def note(self, text: str) -> None:
        """A line of mlra's own in the kept output (not streamed: it is about the stream)."""
        self.output.add(text)

    def close(self) -> None:
        """Flush what the decoders hold (a character cut off by the stream's end)."""
        for stream in ("stdout", "stderr"):
            self.feed(stream, b"", final=True)

    def text(self) -> str:
        return self.output.text()
