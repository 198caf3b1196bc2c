"""The `edit_file` tool: one exact occurrence of a text replaced in a workspace file.

An edit that does not match exactly once is refused with where the text occurs, or the
closest line the file does hold, so the model's next try is informed; a successful edit
shows the changed lines with a few around them. It reads and writes through the sandbox
like the other file tools (tools/files.py).
"""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.files import is_binary, numbered, plural, split_lines, too_large, workspace_relative
from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import FileTooLarge, SandboxError

EDIT_CONTEXT_LINES = 3
"""Lines shown around an edit, before and after."""


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
        try:
            data = await ctx.sandbox.read_file(args.path)
        except FileTooLarge as exc:
            raise SandboxError(
                too_large(workspace_relative(ctx.sandbox, args.path), exc.size, "edit_file")
                + " Change it with a command instead (a python script, or `sed -i`)."
            ) from None
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
