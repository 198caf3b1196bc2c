"""File tools: read and write files in the workspace, and what every file tool shares
(`edit_file` is in tools/edit_file.py, `list_files` in tools/list_files.py).

They act through the sandbox's file methods, never on host paths directly, so
every path is confined to the workspace (`../x`, absolute paths elsewhere and
symlinks that lead out are refused) and a Docker sandbox can serve them too.
Messages are written for the model: when a call fails it says why and what to
do instead, because a vague error costs another step.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox import trees
from mlra.tools.sandbox.base import (
    MAX_READ_BYTES,
    Sandbox,
    SandboxError,
    human_bytes,
)

BINARY_SNIFF_BYTES = 8192

# A file over MAX_READ_BYTES is never read whole: a line range is streamed from it.
RANGE_SCAN_BYTES = 256 * 1024 * 1024
"""How far into a large file read_file looks for a line range (a few tenths of a second)."""
RANGE_MAX_BYTES = 1024 * 1024
"""The most of a large file's lines one read_file gathers (the observation is cut shorter)."""
RANGE_MAX_LINES = 2000
"""Lines shown from a large file when end_line is not given."""


# --- helpers -------------------------------------------------------------------------------


def format_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def is_binary(data: bytes) -> bool:
    """A NUL byte near the start marks a binary file, as git and grep decide it."""
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def split_lines(text: str) -> list[str]:
    """Lines split on '\\n' only, so numbers agree with `sed -n`, `grep -n` and editors."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def count_lines(text: str) -> int:
    return len(split_lines(text))


def numbered(lines: list[str], first: int) -> str:
    """Lines prefixed with their number and a tab, as `cat -n` shows them."""
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, start=first))


def workspace_relative(sandbox: Sandbox, path: str) -> str:
    return sandbox.resolve(path)


def exists(sandbox: Sandbox, path: str) -> bool:
    return sandbox.exists(path)


async def read_text(sandbox: Sandbox, path: str) -> tuple[str, str]:
    """The file's text and its workspace-relative path; binary files are refused, and
    files over MAX_READ_BYTES (see `ReadFile` for reading part of one)."""
    data = await sandbox.read_file(path)
    rel = workspace_relative(sandbox, path)
    if is_binary(data):
        raise SandboxError(_binary(rel, len(data)))
    return data.decode("utf-8", errors="replace"), rel


def _binary(rel: str, size: int) -> str:
    return (
        f"{rel} is a binary file ({size:,} bytes); read_file shows text only. "
        f"Inspect it with python or bash instead (e.g. `xxd {rel} | head`)."
    )


def too_large(rel: str, size: int, what: str) -> str:
    return (
        f"{rel} is {human_bytes(size)}, too large for {what} (it takes files up to "
        f"{human_bytes(MAX_READ_BYTES)} whole)."
    )


@dataclass
class _Range:
    lines: list[bytes]
    first: int
    cut: bool
    """The lines gathered reached RANGE_MAX_BYTES: the last one shown may be partial."""
    scanned: int
    """Bytes looked through."""
    lines_seen: int
    """Lines that began within the bytes looked through."""
    end_of_file: bool


def _stream_range(fd: int, start: int, end: int | None) -> _Range:
    """Lines `start`..`end` (1-based, inclusive) of an open file, looking through at most
    RANGE_SCAN_BYTES of it and gathering at most RANGE_MAX_BYTES: never more than a
    chunk and the lines asked for in memory, whatever the file's size."""
    last = end if end is not None else start + RANGE_MAX_LINES - 1
    line = 1  # the number of the line the next byte belongs to
    taken: list[bytes] = []
    current = bytearray()
    started = False  # `current` holds the start of a line in the range, not yet taken
    gathered = scanned = 0
    cut = eof = mid_line = False
    while scanned < RANGE_SCAN_BYTES and line <= last and not cut:
        chunk = os.read(fd, min(trees.CHUNK, RANGE_SCAN_BYTES - scanned))
        if not chunk:
            eof = True
            break
        scanned += len(chunk)
        mid_line = not chunk.endswith(b"\n")
        newlines = chunk.count(b"\n")
        if line + newlines < start:  # nothing of the range in this chunk
            line += newlines
            continue
        pos = 0
        while line <= last:
            nl = chunk.find(b"\n", pos)
            piece = chunk[pos:] if nl < 0 else chunk[pos:nl]
            if line >= start and piece:
                room = RANGE_MAX_BYTES - gathered
                current += piece[:room]
                gathered += min(len(piece), room)
                started = True
                cut = len(piece) > room
            if nl < 0:
                break
            if line >= start:
                taken.append(bytes(current))
            current.clear()
            started = False
            line += 1
            pos = nl + 1
            if cut:
                break
    if started:
        taken.append(bytes(current))  # a last line without its newline, or one cut short
    seen = line - 1 + (1 if mid_line else 0)
    return _Range(taken, start, cut, scanned, seen, eof)


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {words or word + 's'}"


def entries(n: int) -> str:
    return plural(n, "entry", "entries")


# --- read_file -----------------------------------------------------------------------------


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path, relative to the workspace or absolute inside it.")
    start_line: int | None = Field(default=None, ge=1, description="First line to show (1-based).")
    end_line: int | None = Field(
        default=None, ge=1, description="Last line to show (inclusive); default: the end."
    )


class ReadFile(Tool[ReadFileArgs]):
    name = "read_file"
    description = (
        "Read a text file in the workspace. Lines are shown numbered (number, tab, line), "
        "after a header with the path and which lines of how many are shown; pass "
        "start_line/end_line (1-based, inclusive) to read part of a long file. The numbers "
        "are not part of the file. Binary files are refused."
    )
    Args = ReadFileArgs

    async def run(self, args: ReadFileArgs, ctx: ToolContext) -> ToolOutcome:
        fd, rel, st = ctx.sandbox.open_regular(args.path)
        try:
            if is_binary(trees.read_head(fd, BINARY_SNIFF_BYTES)):
                raise SandboxError(_binary(rel, st.st_size))
            if st.st_size > MAX_READ_BYTES:
                return await asyncio.to_thread(_read_range, fd, rel, st.st_size, args)
            try:
                data = trees.read_bounded(fd, MAX_READ_BYTES)
            except trees.TooLarge as exc:  # it grew since it was looked at
                raise SandboxError(too_large(rel, exc.size, "read_file to read whole")) from None
        finally:
            os.close(fd)
        lines = split_lines(data.decode("utf-8", errors="replace"))
        total = len(lines)
        if total == 0:
            return ToolOutcome(output=f"[{rel}: empty file]", data={"path": rel, "total_lines": 0})
        start = args.start_line or 1
        end = min(args.end_line or total, total)
        if start > total:
            raise SandboxError(
                f"start_line {start} is past the end of {rel} ({plural(total, 'line')})"
            )
        if end < start:
            raise SandboxError(f"end_line {args.end_line} is before start_line {start}")
        header = f"[{rel}: lines {start}-{end} of {total:,}]"
        return ToolOutcome(
            output=header + "\n" + numbered(lines[start - 1 : end], start),
            data={"path": rel, "start_line": start, "end_line": end, "total_lines": total},
        )


def _read_range(fd: int, rel: str, size: int, args: ReadFileArgs) -> ToolOutcome:
    """A line range of a file too large to read whole, streamed from it."""
    sed = f"`sed -n 'FIRST,LASTp' {rel}`, `head -n 100 {rel}`, `tail -n 100 {rel}` or `grep -n PATTERN {rel} | head`"
    if args.start_line is None and args.end_line is None:
        raise SandboxError(
            too_large(rel, size, "read_file to read whole")
            + f" Pass start_line and end_line to read some of its lines (read_file looks "
            f"through its first {human_bytes(RANGE_SCAN_BYTES)} for them), or use bash: {sed}."
        )
    start = args.start_line or 1
    if args.end_line is not None and args.end_line < start:
        raise SandboxError(f"end_line {args.end_line} is before start_line {start}")
    got = _stream_range(fd, start, args.end_line)
    if not got.lines:
        if got.end_of_file:
            raise SandboxError(
                f"start_line {start} is past the end of {rel} ({plural(got.lines_seen, 'line')})"
            )
        raise SandboxError(
            f"line {start:,} of {rel} is not within its first {human_bytes(got.scanned)} "
            f"({plural(got.lines_seen, 'line')}), which is as far as read_file looks in a "
            f"file of {human_bytes(size)}; use bash instead: {sed}"
        )
    end = start + len(got.lines) - 1
    header = f"[{rel}: lines {start:,}-{end:,}; the file is {human_bytes(size)}, too large to count its lines]"
    text = numbered([b.decode("utf-8", errors="replace") for b in got.lines], start)
    if got.cut:
        text += (
            f"\n[cut after {human_bytes(RANGE_MAX_BYTES)} of lines: read a shorter range, or "
            f"use bash: {sed}]"
        )
    elif args.end_line is None and not got.end_of_file:
        text += f"\n[{plural(len(got.lines), 'line')} shown; pass end_line to read further]"
    return ToolOutcome(
        output=header + "\n" + text,
        data={"path": rel, "start_line": start, "end_line": end, "total_lines": None, "size": size},
    )


# --- write_file ----------------------------------------------------------------------------


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path, relative to the workspace or absolute inside it.")
    content: str = Field(description="The whole new content of the file.")


class WriteFile(Tool[WriteFileArgs]):
    name = "write_file"
    description = (
        "Create a file, or replace the whole content of an existing one, in the workspace. "
        "Parent folders are created. To change part of a file, use edit_file."
    )
    Args = WriteFileArgs

    async def run(self, args: WriteFileArgs, ctx: ToolContext) -> ToolOutcome:
        existed = exists(ctx.sandbox, args.path)
        data = args.content.encode("utf-8")
        try:
            rel = await ctx.sandbox.write_file(args.path, data)
        except OSError as exc:
            raise SandboxError(f"cannot write {args.path}: {exc.strerror or exc}") from None
        verb = "Overwrote" if existed else "Created"
        lines = count_lines(args.content)
        return ToolOutcome(
            output=f"{verb} {rel} ({plural(len(data), 'byte')}, {plural(lines, 'line')}).",
            data={"path": rel, "bytes": len(data), "lines": lines, "created": not existed},
        )
