"""File tools: read, write, edit and list files in the workspace.

They act through the sandbox's file methods, never on host paths directly, so
every path is confined to the workspace (`../x`, absolute paths elsewhere and
symlinks that lead out are refused) and a Docker sandbox can serve them too.
Messages are written for the model: when a call fails it says why and what to
do instead, because a vague error costs another step.
"""

from __future__ import annotations

import difflib
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import FileInfo, Sandbox, SandboxError

BINARY_SNIFF_BYTES = 8192
EDIT_CONTEXT_LINES = 3
MAX_LIST_ENTRIES = 200


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
    """The file's text and its workspace-relative path; binary files are refused."""
    data = await sandbox.read_file(path)
    rel = workspace_relative(sandbox, path)
    if is_binary(data):
        raise SandboxError(
            f"{rel} is a binary file ({len(data):,} bytes); read_file shows text only. "
            f"Inspect it with python or bash instead (e.g. `xxd {rel} | head`)."
        )
    return data.decode("utf-8", errors="replace"), rel


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
        text, rel = await read_text(ctx.sandbox, args.path)
        lines = split_lines(text)
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


# --- edit_file -----------------------------------------------------------------------------


class EditFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path, relative to the workspace or absolute inside it.")
    old_text: str = Field(
        description="The exact text to replace (without read_file's line numbers); it must "
        "occur exactly once in the file, so include enough surrounding lines."
    )
    new_text: str = Field(description="The text to put in its place.")


class EditFile(Tool[EditFileArgs]):
    name = "edit_file"
    description = (
        "Replace one exact occurrence of old_text with new_text in a workspace file. "
        "old_text must match the file exactly (whitespace included) and occur exactly once; "
        "copy it from read_file without the line numbers. Shows the changed lines after."
    )
    Args = EditFileArgs

    async def run(self, args: EditFileArgs, ctx: ToolContext) -> ToolOutcome:
        if args.old_text == "":
            raise SandboxError(
                "old_text is empty; to create or replace a whole file use write_file"
            )
        data = await ctx.sandbox.read_file(args.path)
        rel = workspace_relative(ctx.sandbox, args.path)
        if is_binary(data):
            raise SandboxError(
                f"{rel} is a binary file ({len(data):,} bytes); edit_file edits text only"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SandboxError(
                f"{rel} is not UTF-8 text; edit it with python or bash instead"
            ) from None
        old, new = args.old_text, args.new_text
        count = text.count(old)
        if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
            # The model writes '\n'; a file with Windows line ends would never match.
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
            count = text.count(old)
        if count == 0:
            raise SandboxError(f"old_text was not found in {rel}. " + _miss_hint(text, old))
        if count > 1:
            at = _occurrence_lines(text, old)
            where = ", ".join(str(n) for n in at[:10]) + (", ..." if count > 10 else "")
            raise SandboxError(
                f"old_text appears {count} times in {rel} (starting at lines {where}); "
                "include more of the surrounding lines so it matches exactly once"
            )
        if old == new:
            raise SandboxError("old_text and new_text are the same; nothing to change")
        index = text.index(old)
        updated = text[:index] + new + text[index + len(old) :]
        await ctx.sandbox.write_file(args.path, updated.encode("utf-8"))

        first = text.count("\n", 0, index) + 1
        old_lines = old.count("\n") + 1
        new_lines = new.count("\n") + 1 if new else 0
        lines = split_lines(updated)
        lo = max(1, first - EDIT_CONTEXT_LINES)
        hi = min(len(lines), first + max(new_lines, 1) - 1 + EDIT_CONTEXT_LINES)
        snippet = numbered(lines[lo - 1 : hi], lo) if lines else "(the file is now empty)"
        return ToolOutcome(
            output=(
                f"Edited {rel}: replaced {plural(old_lines, 'line')} at line {first} with "
                f"{plural(new_lines, 'line')}. Lines {lo}-{hi} now read:\n{snippet}"
            ),
            data={"path": rel, "line": first, "old_lines": old_lines, "new_lines": new_lines},
        )


def _occurrence_lines(text: str, needle: str) -> list[int]:
    found: list[int] = []
    start = 0
    while (index := text.find(needle, start)) != -1:
        found.append(text.count("\n", 0, index) + 1)
        start = index + 1
    return found


def _miss_hint(text: str, old: str) -> str:
    """Where the model probably meant: the same lines with other whitespace, or the closest line."""
    lines = split_lines(text)
    stripped = [line.strip() for line in lines]
    wanted = [line.strip() for line in split_lines(old)]
    while wanted and not wanted[0]:
        wanted.pop(0)
    while wanted and not wanted[-1]:
        wanted.pop()
    if not wanted:
        return "old_text holds only whitespace."
    for i in range(len(stripped) - len(wanted) + 1):
        if stripped[i : i + len(wanted)] == wanted:
            return (
                f"Lines {i + 1}-{i + len(wanted)} match it except for indentation or "
                "whitespace; copy them exactly (read_file shows a tab after each line number, "
                "which is not part of the line)."
            )
    probe = max(wanted, key=len)
    close = difflib.get_close_matches(probe, stripped, n=1, cutoff=0.6)
    if close:
        n = stripped.index(close[0]) + 1
        return f"The closest line is {n}: {lines[n - 1].strip()!r}. Read the file and copy the text exactly."
    return "Read the file (read_file) and copy the text exactly."


# --- list_files ----------------------------------------------------------------------------


class ListFilesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(default=".", description="Folder to list, relative to the workspace.")
    depth: int = Field(default=2, ge=1, le=10, description="How many levels of folders to show.")


class ListFiles(Tool[ListFilesArgs]):
    name = "list_files"
    description = (
        "List a workspace folder as a tree with file sizes, folders first, down to `depth` "
        "levels (default 2); deeper folders show how many entries they hold."
    )
    Args = ListFilesArgs

    async def run(self, args: ListFilesArgs, ctx: ToolContext) -> ToolOutcome:
        root = workspace_relative(ctx.sandbox, args.path)
        infos = await ctx.sandbox.list_tree(args.path, max_depth=args.depth + 1)
        if len(infos) == 1 and not infos[0].is_dir and infos[0].path == root:
            return ToolOutcome(
                output=f"{root}  {format_size(infos[0].size)} (a file)",
                data={"path": root, "entries": 1},
            )
        text, shown, total = render_tree(root, infos, args.depth)
        return ToolOutcome(output=text, data={"path": root, "entries": total, "shown": shown})


def render_tree(root: str, infos: list[FileInfo], depth: int) -> tuple[str, int, int]:
    """The listing as text, with the number of entries shown and within `depth`.

    `infos` reaches one level deeper than shown, only to count what collapsed
    folders hold.
    """
    root_path = PurePosixPath(root)
    placed: list[tuple[PurePosixPath, FileInfo]] = []
    children: dict[PurePosixPath, int] = {}
    for info in infos:
        rel = PurePosixPath(info.path)
        if root != ".":
            rel = rel.relative_to(root_path)
        children[rel.parent] = children.get(rel.parent, 0) + 1
        if len(rel.parts) <= depth:
            placed.append((rel, info))
    lines: list[str] = []
    for rel, info in placed[:MAX_LIST_ENTRIES]:
        indent = "  " * (len(rel.parts) - 1)
        if info.is_dir:
            held = children.get(rel, 0)
            note = "  (empty)" if held == 0 else ""
            if held and len(rel.parts) == depth:
                note = f"  ({entries(held)})"
            lines.append(f"{indent}{rel.name}/{note}")
        else:
            lines.append(f"{indent}{rel.name}  {format_size(info.size)}")
    total = len(placed)
    shown = min(total, MAX_LIST_ENTRIES)
    header = f"[{root}: {entries(total)}, depth {depth}]"
    if total == 0:
        return f"{header}\n(empty folder)", 0, 0
    text = header + "\n" + "\n".join(lines)
    if total > shown:
        text += (
            f"\n[... {total - shown:,} more entries not shown; list a subfolder or use a "
            "smaller depth]"
        )
    return text, shown, total
