"""The Attempts pane: a search's attempts as a tree, each on a line with its id,
operator, score (or status), time and what it tried; the best in bold, buggy ones
red, running ones marked, their time ticking.

The tree is the run's state fold (agent/record/attempt_tree.py), so the pane shows what the
log says and a replay shows the tree as it was at the cursor. It stays hidden while
the run has no attempt: a run without a search keeps the layout it always had.

Its keys act on the selected attempt; the pane only says which (an `AttemptAction`
message) and the app does it: opening, diffing, and, live, stopping, promoting and
messaging, each recorded by the run controller as a `control` event.
"""

from __future__ import annotations

from typing import ClassVar, Unpack

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from mlra.agent.record.attempt_tree import AttemptNode, AttemptTree
from mlra.agent.record.eventlog import EVENTS_FILE
from mlra.agent.record.state import RunState
from mlra.console.panes import WidgetOptions
from mlra.console.panes.host import PaneHost
from mlra.console.text.heartbeat import AttemptProgress
from mlra.console.text.keymap import ATTEMPT_KEYS, ATTEMPT_VIEW_KEYS, Key
from mlra.durations import format_duration
from mlra.terminal_text import printable_line

BEST = "bold"
BUGGY = "red"
RUNNING = "bold cyan"
OUT_OF_TIME = "yellow"
MARKS = {"running": "●", "buggy": "✗", "out of time": "◷", "lost": "?", "stopped": "■"}
BEST_MARK = "★"
OPERATOR_WIDTH = 7
"""`improve` and `variant`, the longest operators."""
WHAT_ROOM = 16
"""Below this room for what an attempt tried, the operator column is left out."""


def _bindings(keys: list[Key]) -> list[BindingType]:
    return [Binding(k.key, k.action, k.label, show=k.footer) for k in keys]


def _cut(text: str, room: int) -> str:
    text = " ".join(text.split())
    room = max(1, room)
    return printable_line(text if len(text) <= room else text[: room - 1] + "…")


def tree_guides(tree: AttemptTree, nodes: list[AttemptNode]) -> dict[str, str]:
    """Each attempt's tree guides (`│ ├ └`), from its place among its siblings."""
    parent_of = {n.id: (n.parent if n.parent in tree.nodes else None) for n in nodes}
    last_child: dict[str, bool] = {}
    seen: set[str | None] = set()
    for node in reversed(nodes):
        parent = parent_of[node.id]
        last_child[node.id] = parent not in seen
        seen.add(parent)
    guides: dict[str, str] = {}
    for node in nodes:
        chain: list[str] = []
        at = parent_of[node.id]
        while at is not None and len(chain) < len(nodes):
            chain.append(at)
            at = parent_of[at]
        # the ancestors below the root, nearest last; the root itself draws no guide
        above = "".join("  " if last_child[a] else "│ " for a in reversed(chain[:-1]))
        here = ("└ " if last_child[node.id] else "├ ") if chain else ""
        guides[node.id] = above + here
    return guides


def attempt_lines(
    tree: AttemptTree, now: float, width: int, progress: dict[str, str] | None = None
) -> list[tuple[str, Text]]:
    """(attempt id, its line) in tree order, fitted to `width` cells; `progress`: the
    running attempts' newest progress read from their logs (`step 200/600 loss 4.6`)."""
    nodes = tree.in_tree_order()
    if not nodes:
        return []
    guides = tree_guides(tree, nodes)
    best = tree.best
    heads = {n.id: guides[n.id] + printable_line(n.id) for n in nodes}
    scores = {n.id: tree.score_text(n) for n in nodes}
    times = {n.id: format_duration(n.elapsed_s(now)) for n in nodes}
    head_w = max(len(h) for h in heads.values())
    score_w = max(len(s) for s in scores.values())
    time_w = max(len(t) for t in times.values())
    fixed = 2 + head_w + 1 + score_w + 1 + time_w + 1
    show_operator = width - fixed - (OPERATOR_WIDTH + 1) >= WHAT_ROOM
    room = width - fixed - ((OPERATOR_WIDTH + 1) if show_operator else 0)
    out: list[tuple[str, Text]] = []
    for node in nodes:
        is_best = node is best
        status = node.status
        mark = BEST_MARK if is_best else MARKS.get(status, " ")
        style = BEST if is_best else BUGGY if status == "buggy" else ""
        line = Text(style=style)
        line.append(mark, style=RUNNING if status == "running" else "")
        line.append(" ")
        line.append(f"{heads[node.id]:<{head_w}} ")
        if show_operator:
            line.append(f"{node.started.operator:<{OPERATOR_WIDTH}} ", style="dim")
        score_style = (
            RUNNING if status == "running" else "dim" if status in ("lost", "stopped") else ""
        )
        line.append(f"{scores[node.id]:<{score_w}} ", style=score_style)
        line.append(f"{times[node.id]:>{time_w}} ", style="dim")
        what = node.what
        why = node.finished.why if node.finished is not None and node.score is None else ""
        if why and room > 0:
            # Why it failed matters most; what it tried too, where there is room.
            shown = _cut(what, max(8, room // 2)) if what and room >= 40 else ""
            line.append(shown)
            left = room - len(shown) - (3 if shown else 0)
            if left > 4:
                why_style = OUT_OF_TIME if status == "out of time" else BUGGY
                line.append((" · " if shown else "") + _cut(why, left), style=why_style)
        elif (said := (progress or {}).get(node.id, "")) and room > 0:
            # Whether it is working matters most; what it tried too, where there is room.
            said = _cut(said, room)
            left = room - len(said) - 3
            if what and (left >= 12 or len(" ".join(what.split())) <= left):
                line.append(_cut(what, left) + " · ")
            line.append(said, style="cyan")
        elif room > 0:
            line.append(_cut(what, room))
        out.append((node.id, line))
    return out


def summary_line(tree: AttemptTree) -> str:
    """The pane's subtitle: how many, how many running, the best."""
    parts = [f"{len(tree)} tried"]
    if tree.running:
        parts.append(f"{len(tree.running)} running")
    best = tree.best
    if best is not None:
        arrow = "↑" if tree.higher_is_better else "↓"
        parts.append(f"best {printable_line(best.id)} {tree.score_text(best)} {arrow}")
    return " · ".join(parts)


class AttemptAction(Message):
    """The user asked for `action` (open, diff, stop, promote, message) on an attempt."""

    def __init__(self, action: str, attempt: str) -> None:
        super().__init__()
        self.action = action
        self.attempt = attempt


class AttemptsPane(OptionList):
    """The live console's pane: its keys read and steer. A running attempt's line says
    how it does, read from its own log as it grows (in the host's `run_dir`)."""

    BINDINGS: ClassVar[list[BindingType]] = _bindings(ATTEMPT_KEYS)
    follows_progress: ClassVar[bool] = True

    def __init__(self, *, host: PaneHost | None = None, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self.host = host
        """The console showing the run: its folder, its state, whether it steers it."""
        self._attempt_ids: list[str] = []
        self._attempt_lines: list[Text] = []
        self._attempt_view: tuple[RunState, float] | None = None
        self._progress: dict[str, AttemptProgress] = {}

    def _running_progress(self, tree: AttemptTree) -> dict[str, str]:
        run_dir = self.host.run_dir if self.host is not None else None
        if not self.follows_progress or run_dir is None:
            return {}
        said: dict[str, str] = {}
        for node in tree.running:
            log = self._progress.get(node.id)
            if log is None:
                folder = node.folder_in(run_dir)
                if folder is None:
                    continue  # as the run's log names it, never a folder out of the run's
                log = self._progress[node.id] = AttemptProgress(folder / EVENTS_FILE)
            said[node.id] = log.progress(0)
        return said

    def on_mount(self) -> None:
        self.border_title = "Attempts"
        self.display = False

    def on_resize(self) -> None:
        if self._attempt_view is not None:
            self.call_after_refresh(self._reshow)
        self.call_after_refresh(self._say_hidden)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._say_hidden()

    def _say_hidden(self) -> None:
        """The title says how many attempts the pane has no room for, above and below:
        a pane squeezed by the replay's verdict or by a search of many attempts showed
        some of them with nothing but a one-cell scrollbar to say others were there."""
        if not self.is_attached:
            return
        rows = self.scrollable_content_region.height
        top = round(self.scroll_y)
        above, below = top, max(0, self.option_count - top - rows) if rows else 0
        hidden = [f"{above} more ↑"] if above else []
        hidden += [f"{below} more ↓"] if below else []
        title = "Attempts" + (f" · {' · '.join(hidden)} (A, then ↑↓)" if hidden else "")
        if title != self.border_title:
            self.border_title = title

    def _reshow(self) -> None:
        if self._attempt_view is not None and self.is_attached:
            self.show(*self._attempt_view, force=True)

    @property
    def selected(self) -> str | None:
        index = self.highlighted
        return (
            self._attempt_ids[index]
            if index is not None and 0 <= index < len(self._attempt_ids)
            else None
        )

    def show(self, state: RunState, now: float, *, force: bool = False) -> None:
        """Bring the tree up to `state`; `now` is the run clock that running attempts'
        time ticks on."""
        self._attempt_view = (state, now)
        tree = state.attempts
        wanted = bool(tree)
        if self.display != wanted:
            self.display = wanted
        if not wanted:
            if self._attempt_ids:
                self.clear_options()
                self._attempt_ids, self._attempt_lines = [], []
            return
        width = self.scrollable_content_region.width or max(20, self.app.size.width // 2)
        rows = attempt_lines(tree, now, width, self._running_progress(tree))
        ids = [attempt for attempt, _ in rows]
        lines = [line for _, line in rows]
        if ids == self._attempt_ids and not force:
            for index, (line, old) in enumerate(zip(lines, self._attempt_lines, strict=True)):
                if line != old:
                    self.replace_option_prompt_at_index(index, line)
        else:
            selected = self.selected
            self.clear_options()
            self.add_options([Option(line, id=attempt) for attempt, line in rows])
            if selected in ids:
                self.highlighted = ids.index(selected)
            elif ids:
                self.highlighted = 0
        self._attempt_ids, self._attempt_lines = ids, lines
        subtitle = summary_line(tree)
        if subtitle != self.border_subtitle:
            self.border_subtitle = subtitle
        self.call_after_refresh(self._say_hidden)  # once the rows are laid out

    def ticks(self, state: RunState) -> bool:
        """Whether a second's tick changes what the pane shows (a running attempt's time)."""
        return bool(self.display and state.attempts.running)

    # --- keys -----------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Stop, promote and message are offered while the run is live; on a recorded or
        ended run, or while it is graded, their keys are not the pane's (x still expands
        a call)."""
        if action in ("stop", "promote", "message"):
            host = self.host
            if host is None or host.controller is None:
                return False
            state = host.state
            return state.finished is None and state.phase != "evaluating"
        return True

    def _ask(self, action: str) -> None:
        attempt = self.selected
        if attempt is None:
            self.notify("no attempt selected", severity="warning")
            return
        self.post_message(AttemptAction(action, attempt))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self._ask("open")

    def action_diff(self) -> None:
        self._ask("diff")

    def action_stop(self) -> None:
        self._ask("stop")

    def action_promote(self) -> None:
        self._ask("promote")

    def action_message(self) -> None:
        self._ask("message")


class ReplayAttemptsPane(AttemptsPane, inherit_bindings=False):
    """The replay's pane: open and diff only (nothing in a replay steers the run); its
    other keys (x, p, m) keep their replay meanings."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *OptionList.BINDINGS,
        *_bindings(ATTEMPT_VIEW_KEYS),
    ]
    follows_progress: ClassVar[bool] = False
    """A replay shows the tree as it was at the cursor; the logs' ends are not that."""
