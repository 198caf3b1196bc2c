"""The `list_files` tool: a workspace folder as a tree with sizes, to a chosen depth.

A deep folder is shown collapsed with how many entries it holds, and the listing stops at
a bound (in entries gathered and shown), so a folder of a million files costs the model a
few lines, not its context. Listed through the sandbox like the other file tools
(tools/files.py).
"""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.files import entries, format_size, workspace_relative
from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import FileInfo

MAX_LIST_ENTRIES = 200
"""Entries a listing shows at most."""
LIST_SCAN_ENTRIES = 20_000
"""Entries list_files gathers (to count what collapsed folders hold) before it stops."""


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
        infos = await ctx.sandbox.list_tree(
            args.path, max_depth=args.depth + 1, max_entries=LIST_SCAN_ENTRIES
        )
        more = len(infos) > LIST_SCAN_ENTRIES
        infos = infos[:LIST_SCAN_ENTRIES]
        if len(infos) == 1 and not infos[0].is_dir and infos[0].path == root:
            return ToolOutcome(
                output=f"{root}  {format_size(infos[0].size)} (a file)",
                data={"path": root, "entries": 1},
            )
        text, shown, total = render_tree(root, infos, args.depth)
        if more:
            text += (
                f"\n[the folder holds more than {LIST_SCAN_ENTRIES:,} entries within "
                f"{args.depth + 1} levels; counts above are of the first {LIST_SCAN_ENTRIES:,}. "
                "List a subfolder, or count with bash (`find DIR | wc -l`)]"
            )
        return ToolOutcome(
            output=text, data={"path": root, "entries": total, "shown": shown, "more": more}
        )


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
