"""The Attempts pane's dialogs: one attempt opened (what it was asked, how it ended, its
own transcript and files), picking the attempt to diff with, and the two attempts'
scores side by side above their diff.

Everything here is read from the attempt's own run folder (console/text/attempt_files.py)
and the run's tree; what an attempt's agent wrote is shown as `Text`, escaped, never as
markup.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

from rich.console import RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from mlra import events as ev
from mlra.agent.record.attempt_tree import AttemptNode, AttemptTree
from mlra.console.panes.files import human_size
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.text.attempt_files import (
    WorkspaceFile,
    attempt_events,
    attempt_folder,
    list_files,
    read_head,
)
from mlra.durations import format_duration
from mlra.scores import format_normalized
from mlra.terminal_text import printable, printable_line

REFRESH_S = 2.0
"""A running attempt's dialog reads its log and files again this often."""
NO_FILE = Text("select a file to preview it", style="dim")


def _numbers(node: AttemptNode, now: float) -> str:
    parts = [format_duration(node.elapsed_s(now))]
    finished = node.finished
    if finished is not None:
        parts += [f"{finished.steps} steps", f"{finished.tokens:,} tokens"]
        if finished.cost_usd:
            parts.append(f"${finished.cost_usd:.2f}")
    return " · ".join(parts)


def attempt_title(tree: AttemptTree, node: AttemptNode) -> str:
    origin = f"from {node.parent}" if node.parent else "from the starter"
    best = " (best)" if node is tree.best else ""
    return f"attempt {node.id}{best} · {node.started.operator} {origin} · {tree.score_text(node)}"


def attempt_details(tree: AttemptTree, node: AttemptNode, now: float) -> Text:
    """What it was asked, what it did and how it ended, a line each."""
    out = Text()

    def line(label: str, text: str, style: str = "") -> None:
        if text.strip():
            out.append(f"{label}: ", style="bold")
            out.append(printable(" ".join(text.split())) + "\n", style=style)

    line("lineage", tree.lineage(node.id))
    line("status", f"{node.status} · {_numbers(node, now)}")
    if node.started.variant:
        line("variant", " ".join(f"{k}={v}" for k, v in node.started.variant.items()))
    line("asked", node.started.instructions)
    if node.finished is not None:
        line("did", node.finished.summary)
        why_style = {"buggy": "red", "out of time": "yellow"}.get(node.status, "")
        line("why", node.finished.why, why_style)
    out.rstrip()
    return out


class AttemptScreen(ModalScreen[None]):
    """An attempt opened: its story, its own transcript (read from its log) and its
    workspace's files with a preview. A running attempt's are read again as it goes."""

    BINDINGS = [
        Binding("escape,q", "close", "Close"),
        # Tab goes from area to area: the transcript's calls each take the focus (x opens
        # one), so the screen's own Tab walked through every call before the files.
        Binding("tab", "next_area(1)", "Next area", show=False),
        Binding("shift+tab", "next_area(-1)", "Previous area", show=False),
    ]
    AREAS = ("#attempt-transcript", "#attempt-file-list", "#attempt-preview-scroll")
    DEFAULT_CSS = """
    #attempt-dialog {
        width: 96%;
        height: 92%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    #attempt-details {
        height: auto;
        max-height: 8;
    }
    #attempt-body {
        height: 1fr;
    }
    #attempt-transcript {
        width: 1fr;
        border: round $accent;
        padding: 0 1;
        scrollbar-size-vertical: 1;
    }
    #attempt-transcript > * {
        margin-bottom: 1;
    }
    #attempt-files {
        width: 40%;
    }
    #attempt-file-list {
        height: 1fr;
        border: round $primary;
    }
    #attempt-preview-scroll {
        height: 2fr;
        border: round $primary;
    }
    """

    def __init__(
        self,
        tree: AttemptTree,
        node: AttemptNode,
        run_dir: Path | None,
        clock: Callable[[], float],
    ) -> None:
        """`tree` is the run's own, folded as events come: a running attempt's node
        ends under the dialog, which then says so; `clock` reads the run's clock."""
        super().__init__()
        self.attempts_tree = tree
        self.node = node
        self.clock = clock
        self.folder = attempt_folder(run_dir, node)
        self.workspace = self.folder / "workspace" if self.folder is not None else None
        self._events_seen = -1
        self._files: list[WorkspaceFile] = []
        self._timer: Timer | None = None

    def compose(self) -> ComposeResult:
        # Not the `dialog` class: its fixed width (mlra.tcss) would outweigh this one's.
        with Vertical(id="attempt-dialog"):
            yield Label(
                Text(printable_line(attempt_title(self.attempts_tree, self.node))),
                classes="dialog-title",
                id="attempt-title",
            )
            yield Static(
                attempt_details(self.attempts_tree, self.node, self.clock()),
                id="attempt-details",
            )
            with Horizontal(id="attempt-body"):
                yield TranscriptPane(id="attempt-transcript")
                with Vertical(id="attempt-files"):
                    yield OptionList(id="attempt-file-list")
                    with VerticalScroll(id="attempt-preview-scroll"):
                        yield Static(NO_FILE.copy(), id="attempt-preview")
            yield Static("Escape closes · Tab moves to the files", classes="dialog-detail")

    async def on_mount(self) -> None:
        self.query_one("#attempt-file-list", OptionList).border_title = "Files"
        await self.reload()
        if self.node.finished is None:
            self._timer = self.set_interval(REFRESH_S, self.reload)

    async def reload(self) -> None:
        """Read the attempt's log and list its files again (in a thread: a long log or a
        large workspace does not stall the console)."""
        events, why = await asyncio.to_thread(attempt_events, self.folder)
        files, more = (
            await asyncio.to_thread(list_files, self.workspace)
            if self.workspace is not None
            else ([], False)
        )
        if not self.is_attached:
            return
        tree, node = self.attempts_tree, self.node
        self.query_one("#attempt-title", Label).update(
            Text(printable_line(attempt_title(tree, node)))
        )
        self.query_one("#attempt-details", Static).update(attempt_details(tree, node, self.clock()))
        if node.finished is not None and self._timer is not None:
            self._timer.stop()  # it has ended: this was the last look
            self._timer = None
        transcript = self.query_one(TranscriptPane)
        if len(events) != self._events_seen:
            self._events_seen = len(events)
            if events:
                transcript.rebuild(events)
            else:
                transcript.rebuild([])
                transcript.border_subtitle = why
            transcript.flush()
            transcript.follow()
        if files != self._files:
            self._files = files
            listing = self.query_one("#attempt-file-list", OptionList)
            highlighted = listing.highlighted
            listing.clear_options()
            listing.add_options(
                [Option(self._file_label(f), id=str(i)) for i, f in enumerate(files)]
            )
            if highlighted is not None and files:
                listing.highlighted = min(highlighted, len(files) - 1)
            listing.border_subtitle = f"{len(files)} files" + (" (more not shown)" if more else "")

    @staticmethod
    def _file_label(file: WorkspaceFile) -> Text:
        label = Text(printable_line(file.path))
        label.append(f"  {human_size(file.size)}", style="dim")
        return label

    async def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_list.id != "attempt-file-list" or event.option.id is None:
            return
        file = self._files[int(event.option.id)]
        preview = self.query_one("#attempt-preview", Static)
        if self.workspace is None:
            return
        data = await asyncio.to_thread(read_head, self.workspace, file.path)
        if data is None:
            preview.update(Text(f"{printable_line(file.path)}: cannot be read", style="red"))
        elif b"\0" in data[:8192]:
            preview.update(
                Text(f"{printable_line(file.path)}: binary, {human_size(file.size)}", style="dim")
            )
        else:
            body = printable(data.decode("utf-8", errors="replace"))
            if file.size > len(data):
                body += f"\n… preview cut; the file has {human_size(file.size)}"
            lexer = Syntax.guess_lexer(file.path, code=body)
            preview.update(
                Syntax(body, lexer, line_numbers=True, word_wrap=False, theme="ansi_dark")
            )

    def action_next_area(self, step: int) -> None:
        areas = [self.query_one(selector) for selector in self.AREAS]
        at = -1
        for index, area in enumerate(areas):
            if self.focused is not None and (
                self.focused is area or area in self.focused.ancestors
            ):
                at = index
        areas[(at + step) % len(areas)].focus()

    def action_close(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self.dismiss(None)


class PickAttemptScreen(ModalScreen[str | None]):
    """Pick the second attempt of a diff: its id, or None on Escape."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, choices: list[tuple[str, Text]]) -> None:
        super().__init__()
        self.title_text = title
        self.choices = choices

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog-wide"):
            yield Label(Text(printable_line(self.title_text)), classes="dialog-title")
            yield OptionList(
                *(Option(line, id=attempt) for attempt, line in self.choices), id="pick-attempt"
            )
            yield Static(
                "Enter diffs with the chosen attempt · Escape to cancel", classes="dialog-detail"
            )

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


NAME_WIDTH = 36
"""The side-by-side's name column; a longer metric name breaks where a word of it ends."""


def broken_at_words(name: str, width: int) -> str:
    """`name` in lines of at most `width`, broken after a `/`, `_`, `.` or `-` (a metric
    name has no spaces: Rich would fold `tiny_lm_val_heldout/bits_per_byte` mid-word);
    a part longer than `width` is left for the column to fold."""
    parts = re.findall(r"[^/_.\-]*[/_.\-]?", name)
    lines = [""]
    for part in filter(None, parts):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def scores_side_by_side(
    tree: AttemptTree,
    a: AttemptNode,
    b: AttemptNode,
    now: float,
    metrics: tuple[dict[str, float], dict[str, float]],
) -> RenderableType:
    """The two attempts' scores, metrics and numbers, a column each."""
    table = Table(box=None, padding=(0, 2), show_edge=False)
    ma, mb = metrics
    # Never narrower than the longest name's longest part: Rich shrinks a column to fit
    # the screen by folding it, mid-word.
    longest = max(
        (len(line) for k in {*ma, *mb} for line in broken_at_words(k, NAME_WIDTH).split("\n")),
        default=0,
    )
    table.add_column(
        "", style="bold", min_width=min(longest, NAME_WIDTH), max_width=NAME_WIDTH, overflow="fold"
    )
    table.add_column(Text(printable_line(a.id)), ratio=1)
    table.add_column(Text(printable_line(b.id)), ratio=1)
    best = tree.best

    def cells(node: AttemptNode) -> dict[str, str]:
        f: ev.AttemptFinished | None = node.finished
        return {
            "from": f"{node.started.operator} from {node.parent or 'the starter'}",
            "score": tree.score_text(node) + (" (best)" if node is best else ""),
            "metric": (f.metric if f is not None else "") or "",
            "normalized": format_normalized(f.normalized)
            if f is not None and f.normalized is not None
            else "",
            "time": format_duration(node.elapsed_s(now)),
            "steps": str(f.steps) if f is not None else "",
            "tokens": f"{f.tokens:,}" if f is not None else "",
            "cost": f"${f.cost_usd:.2f}" if f is not None and f.cost_usd else "",
            "what": node.what,
            "why": (f.why if f is not None else "") or "",
        }

    left, right = cells(a), cells(b)
    for key in left:
        if left[key] or right[key]:
            table.add_row(key, Text(printable(left[key])), Text(printable(right[key])))
    for key in sorted(set(ma) | set(mb)):
        table.add_row(
            Text(broken_at_words(printable_line(key), NAME_WIDTH)),
            f"{ma[key]:.6g}" if key in ma else "—",
            f"{mb[key]:.6g}" if key in mb else "—",
        )
    return table
