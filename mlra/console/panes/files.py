"""The Files pane: the sandbox's workspace as a tree with sizes and modified
times, kept up to date as it changes, and a syntax-highlighted preview of the
selected file. It reads through the sandbox interface, so it shows a Docker
container's workspace the same way as a local one.

In the tree Home and End go to its first and last file, as in any file list (a
plain Textual tree only scrolls, leaving the cursor where it was), and PageUp and
PageDown move the cursor a page; elsewhere in the replay those keys move the
replay. Space does what Enter does (opens or closes a folder, shows a file), and the
tree comes to the focus with its cursor on a line: a plain Textual tree has none then,
and Space acted on its last line instead (a file: nothing happened)."""

from __future__ import annotations

import time
from pathlib import PurePosixPath
from typing import Protocol, Unpack

from rich.syntax import Syntax
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from mlra.console.panes import WidgetOptions
from mlra.console.panes.host import PaneHost
from mlra.terminal_text import printable, printable_line
from mlra.tools.sandbox.base import FileInfo

MAX_ENTRIES = 3000
NO_PREVIEW = Text("select a file to preview it", style="dim")
SEARCH_TITLE = "Files: the search's own"
"""A search's own workspace, never worked in: each attempt's files open from its line."""
MAX_DEPTH = 6
PREVIEW_BYTES = 200_000
PREVIEW_LINES = 1500


class FileSource(Protocol):
    async def list_tree(self, path: str = ".", *, max_depth: int = 3) -> list[FileInfo]: ...

    async def read_file(self, path: str) -> bytes: ...


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def label_for(info: FileInfo) -> Text:
    """A file's line in the tree: its name, whatever bytes it holds, shown and not obeyed
    (a Text, never markup: a file named `[red]x` is that name)."""
    name = printable_line(PurePosixPath(info.path).name)
    if info.is_dir:
        return Text(f"{name}/", style="bold")
    label = Text(name)
    stamp = time.strftime("%H:%M:%S", time.localtime(info.mtime))
    label.append(f"  {human_size(info.size)}  {stamp}", style="dim")
    return label


def _sort_key(info: FileInfo) -> tuple[bool, str]:
    return (not info.is_dir, PurePosixPath(info.path).name.lower())


class FilesTree(Tree[FileInfo]):
    """The workspace's tree, whose cursor Home, End, PageUp and PageDown move."""

    BINDINGS = [
        Binding("space", "open_cursor", "Open", show=False),
        Binding("home", "cursor_first", "First file", show=False),
        Binding("end", "cursor_last", "Last file", show=False),
        Binding("pageup", "cursor_page(-1)", "Page up", show=False),
        Binding("pagedown", "cursor_page(1)", "Page down", show=False),
    ]

    def on_focus(self, event: events.Focus) -> None:
        """A tree the person comes to shows where its keys act: on its first line."""
        self.place_cursor()

    def action_open_cursor(self) -> None:
        """Space, as Enter: open or close the folder under the cursor, show a file."""
        self.place_cursor()
        self.action_select_cursor()

    def place_cursor(self) -> None:
        if self.cursor_line < 0 and self.last_line >= 0:
            self.move_cursor_to_line(0)

    def action_cursor_first(self) -> None:
        self._to_line(0)

    def action_cursor_last(self) -> None:
        self._to_line(self.last_line)

    def action_cursor_page(self, direction: int) -> None:
        page = max(1, self.scrollable_content_region.height - 1)
        self._to_line(max(0, self.cursor_line) + direction * page)

    def _to_line(self, line: int) -> None:
        if self.last_line >= 0:  # an empty tree has nowhere to go
            self.move_cursor_to_line(max(0, min(self.last_line, line)))


class FilesPane(Vertical):
    def __init__(
        self,
        source: FileSource | None = None,
        *,
        host: PaneHost | None = None,
        **kwargs: Unpack[WidgetOptions],
    ) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.host = host
        """The console showing the run: whether it is a search names the pane."""
        self._tree_nodes: dict[str, TreeNode[FileInfo]] = {}
        self._infos: dict[str, FileInfo] = {}
        self._selected: str | None = None
        self._shown_mtime: float | None = None
        self.truncated = False

    def compose(self) -> ComposeResult:
        tree = FilesTree("workspace", id="files-tree")
        tree.root.expand()
        tree.show_root = False
        yield tree
        with VerticalScroll(id="files-preview"):
            yield Static(NO_PREVIEW.copy(), id="preview")

    def on_mount(self) -> None:
        self.border_title = "Files"

    async def refresh_tree(self) -> None:
        """Bring the tree up to date with the workspace, keeping what is expanded."""
        if self.source is None:
            return
        try:
            infos = await self.source.list_tree(".", max_depth=MAX_DEPTH)
        except Exception:
            return  # the workspace may be mid-change; the next refresh catches up
        if not self.is_attached:
            return  # removed while the listing was read: the console is closing
        self.truncated = len(infos) > MAX_ENTRIES
        infos = infos[:MAX_ENTRIES]
        tree = self.query_one("#files-tree", Tree)
        current = {i.path: i for i in infos}
        gone = sorted(
            (p for p in self._tree_nodes if p not in current), key=lambda p: -p.count("/")
        )
        for path in gone:  # deepest first, so a folder's children go before it
            self._tree_nodes.pop(path).remove()
            self._infos.pop(path, None)
        for info in sorted(infos, key=lambda i: i.path.count("/")):
            old = self._infos.get(info.path)
            if info.path in self._tree_nodes:
                if old is None or (old.size, old.mtime) != (info.size, info.mtime):
                    self._tree_nodes[info.path].set_label(label_for(info))
                    self._tree_nodes[info.path].data = info
            else:
                parent_path = str(PurePosixPath(info.path).parent)
                parent = tree.root if parent_path == "." else self._tree_nodes.get(parent_path)
                if parent is None:
                    continue
                before = next(
                    (
                        c
                        for c in parent.children
                        if c.data is not None and _sort_key(c.data) > _sort_key(info)
                    ),
                    None,
                )
                if info.is_dir:
                    node = parent.add(label_for(info), data=info, before=before)
                else:
                    node = parent.add_leaf(label_for(info), data=info, before=before)
                self._tree_nodes[info.path] = node
            self._infos[info.path] = info
        if isinstance(tree, FilesTree) and tree.has_focus:
            tree.place_cursor()  # focused while still empty: its first line, now there
        entries = f"{len(infos):,} entr{'y' if len(infos) == 1 else 'ies'}"
        subtitle = entries + (" (more not shown)" if self.truncated else "")
        if subtitle != self.border_subtitle:  # setting it repaints the pane, same or not
            self.border_subtitle = subtitle
        # A search's own workspace stays as the task gave it: its attempts work in theirs.
        searching = self.host is not None and bool(self.host.state.attempts)
        title = SEARCH_TITLE if searching else "Files"
        if title != self.border_title:
            self.border_title = title
        if self._selected and self._selected in self._infos:
            info = self._infos[self._selected]
            if info.mtime != self._shown_mtime:
                await self.show_preview(info)

    async def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[FileInfo]) -> None:
        info = event.node.data
        if info is not None and not info.is_dir:
            await self.show_preview(info)

    async def on_tree_node_selected(self, event: Tree.NodeSelected[FileInfo]) -> None:
        """Enter or Space on a file shows it (read again: it may have changed since)."""
        info = event.node.data
        if info is not None and not info.is_dir:
            await self.show_preview(info)

    async def show_preview(self, info: FileInfo) -> None:
        self._selected = info.path
        self._shown_mtime = info.mtime
        preview = self.query_one("#preview", Static)
        if self.source is None:
            return
        try:
            data = await self.source.read_file(info.path)
        except Exception as exc:
            preview.update(Text(printable_line(f"cannot read {info.path}: {exc}"), style="red"))
            return
        head = data[:PREVIEW_BYTES]
        if b"\0" in head[:8192]:
            shown = printable_line(info.path)
            preview.update(Text(f"{shown}: binary file, {human_size(len(data))}", style="dim"))
            return
        text = head.decode("utf-8", errors="replace")
        lines = text.splitlines()
        note = ""
        if len(lines) > PREVIEW_LINES or len(data) > PREVIEW_BYTES:
            lines = lines[:PREVIEW_LINES]
            note = f"\n… preview cut; the file has {human_size(len(data))}"
        body = printable("\n".join(lines)) + note  # the file's text, shown and not obeyed
        lexer = Syntax.guess_lexer(info.path, code=body)
        preview.update(Syntax(body, lexer, line_numbers=True, word_wrap=False, theme="ansi_dark"))
