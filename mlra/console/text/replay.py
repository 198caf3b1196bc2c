"""Replay of a recorded run: where the cursor is and what every pane shows there.

A controller, not a widget: the replay console (console/apps/replay_app.py) and the
tests drive it. Everything it answers comes from the run's events (and the
workspace snapshots they name), so a replay shows what the run's own displays
showed at that moment, however long after the run.

Going to any event must stay fast on a run of 100,000 events, so the state
fold is checkpointed every `CHECKPOINT_EVERY` events (going to index i folds at
most that many events from the nearest checkpoint), the points one jumps
between (agent steps, tool calls, errors, plan changes) are indexed once on
opening, and the transcript is rebuilt from a bounded window of events before
the cursor, never from the whole log. The log itself, read lazily line by line and
sorted cheaply into what each mark and search looks at, is console/text/recorded_log.py.
"""

from __future__ import annotations

import bisect
import copy
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mlra import events as ev
from mlra.agent.record.annotations import Annotation, read_annotations
from mlra.agent.record.eventlog import EVENTS_FILE
from mlra.agent.record.snapshots import SnapshotStore
from mlra.agent.record.state import RunState
from mlra.agent.record.workspace_history import WorkspaceHistory
from mlra.console.text.recorded_log import (
    MAYBE_ERROR,
    MAYBE_PLAN,
    SEARCHED,
    RecordedLog,
    is_error,
    is_plan_message,
    searchable_text,
)
from mlra.tools.sandbox.base import FileInfo

CHECKPOINT_EVERY = 1000
TRIVIAL = frozenset({"text_delta", "tool_output", "worker_thought"})
"""Event types the state fold only counts and clocks (RunState.apply has no case for
them): the checkpoints skip them, and state_at puts the count right. A test folds a
recorded run both ways and compares, should RunState start to use them."""
WINDOW_STEPS = 4
"""Agent steps before the cursor's step that the rebuilt transcript shows; earlier
ones are a step back away (the transcript pane keeps a bounded number of entries anyway)."""
MAX_WINDOW_EVENTS = 4000
"""Past this many events in the window, older command output is left out of it."""
PLAN_MESSAGES = 30
RESOURCE_HISTORY = 60

Mark = Literal["tool", "error", "plan", "annotation"]
PlayUnit = Literal["events", "steps"]


@dataclass
class Position:
    step: int
    steps: int
    event: int
    """1-based index of the event at the cursor."""
    events: int


class ReplayModel:
    """A cursor over a recorded run's events, and what the run looked like there."""

    def __init__(
        self,
        events: RecordedLog | list[ev.Event],
        store: SnapshotStore | None = None,
        *,
        run_dir: Path | None = None,
    ) -> None:
        log = events if isinstance(events, RecordedLog) else RecordedLog.of(events)
        if not len(log):
            raise ValueError("the run has no events")
        self.events = log
        self.run_dir = run_dir
        self.steps: list[int] = []
        """Indices of every agent action (StepStarted, any agent)."""
        self.worker_steps: dict[int, int] = {}
        """Worker step number -> index of its first StepStarted."""
        self.marks: dict[Mark, list[int]] = {"tool": [], "error": [], "plan": [], "annotation": []}
        self.plan_messages: list[int] = []
        self.resources: list[int] = []
        self.snapshots: list[int] = []
        for i, kind in enumerate(log.types):
            if kind == "step_started":
                self.steps.append(i)
                step = log.worker_step(i)
                if step is not None:
                    self.worker_steps.setdefault(step, i)
            elif kind == "tool_call":
                self.marks["tool"].append(i)
            elif kind == "resource_sample":
                self.resources.append(i)
            elif kind == "workspace_snapshot":
                self.snapshots.append(i)
            if kind == "plan_updated":
                self.marks["plan"].append(i)
            if kind in MAYBE_ERROR and log.maybe(i, *MAYBE_ERROR[kind]) and is_error(log[i]):
                self.marks["error"].append(i)
            if kind in MAYBE_PLAN and log.maybe(i, *MAYBE_PLAN[kind]) and is_plan_message(log[i]):
                self.plan_messages.append(i)
        self.max_step = max(self.worker_steps, default=0)
        self.history = WorkspaceHistory(
            [log[i] for i in self.snapshots],
            store or SnapshotStore(run_dir or Path("/nonexistent")),
        )
        self._checkpoints: list[RunState] = [RunState()]
        self._lock = threading.Lock()
        self._final: RunState | None = None
        self.cursor = 0
        self._state = self.state_at(0)
        self._state_index = 0
        self.query = ""
        self.matches: list[int] = []
        self.annotations: list[Annotation] = []
        """People's notes on the run's steps (beside its log, never in it)."""
        if run_dir is not None:
            self.set_annotations(read_annotations(run_dir))

    @classmethod
    def open(
        cls, run_dir: Path, *, on_torn_tail: Callable[[str], None] | None = None
    ) -> ReplayModel:
        """A run folder's replay (OSError reaches the caller)."""
        log = RecordedLog.read(run_dir / EVENTS_FILE, on_torn_tail=on_torn_tail)
        return cls(log, SnapshotStore(run_dir), run_dir=run_dir)

    # --- annotations ----------------------------------------------------------------

    def set_annotations(self, notes: list[Annotation]) -> None:
        self.annotations = list(notes)
        self.marks["annotation"] = sorted(
            {i for i in (self.annotation_index(n) for n in notes) if i is not None}
        )

    def annotation_index(self, note: Annotation) -> int | None:
        """The event a note was made on (its `seq`), else its step's start."""
        i = note.seq - 1  # the log numbers its events from 1, one a line (check_lines)
        if 0 <= i < len(self.events) and self.events[i].seq == note.seq:
            return i
        return self.worker_steps.get(note.step)

    # --- the state at a point -------------------------------------------------------

    def build_checkpoints(self, upto: int | None = None) -> None:
        """Fold the log into checkpoints up to the one for index `upto` (all by default).

        Safe to run in a thread beside the console: a replay opens before this is
        done, and a move that needs a checkpoint not built yet builds it itself.
        Event types the fold only counts are not parsed here (see TRIVIAL).
        """
        n = len(self.events)
        last = (n - 1 if upto is None else min(upto, n - 1)) // CHECKPOINT_EVERY
        while len(self._checkpoints) <= last:
            with self._lock:
                k = len(self._checkpoints) - 1
                if k >= last:
                    break
                state = copy.deepcopy(self._checkpoints[k])
                types = self.events.types
                for i in range(k * CHECKPOINT_EVERY, (k + 1) * CHECKPOINT_EVERY):
                    if types[i] not in TRIVIAL:
                        state.apply(self.events.peek(i))
                self._checkpoints.append(state)

    def state_at(self, index: int) -> RunState:
        """The fold of events[0..index] (a fresh object the caller may keep)."""
        index = self._clamp(index)
        base = index // CHECKPOINT_EVERY
        if base >= len(self._checkpoints):
            self.build_checkpoints(index)
        state = copy.deepcopy(self._checkpoints[base])
        for i in range(base * CHECKPOINT_EVERY, index + 1):
            state.apply(self.events[i])
        state.events = index + 1  # the checkpoints skipped counting TRIVIAL events
        return state

    @property
    def final(self) -> RunState:
        if self._final is None:
            self._final = self.state_at(len(self.events) - 1)
        return self._final

    @property
    def state(self) -> RunState:
        """The state at the cursor; moving forward a little folds only the new events."""
        if self._state_index != self.cursor:
            if 0 < self.cursor - self._state_index <= CHECKPOINT_EVERY:
                for i in range(self._state_index + 1, self.cursor + 1):
                    self._state.apply(self.events[i])
            else:
                self._state = self.state_at(self.cursor)
            self._state_index = self.cursor
        return self._state

    @property
    def event(self) -> ev.Event:
        return self.events[self.cursor]

    def position(self) -> Position:
        return Position(
            step=self.state.steps,
            steps=self.max_step,
            event=self.cursor + 1,
            events=len(self.events),
        )

    def fork_step(self) -> int:
        """The worker step `mlra fork --at` takes to start from what the cursor shows.

        A fork starts from the state before its step, so at a step's start that is
        the step itself; after a step's action, the next one (the last step when the
        run has none after the cursor).
        """
        for step, index in sorted(self.worker_steps.items(), key=lambda kv: kv[1]):
            if index >= self.cursor:
                return step
        return max(1, self.max_step)

    # --- moving ---------------------------------------------------------------------

    def _clamp(self, index: int) -> int:
        return max(0, min(len(self.events) - 1, index))

    def go(self, index: int) -> int:
        self.cursor = self._clamp(index)
        return self.cursor

    def forward(self, n: int = 1) -> int:
        return self.go(self.cursor + n)

    def back(self, n: int = 1) -> int:
        return self.go(self.cursor - n)

    def first(self) -> int:
        return self.go(0)

    def last(self) -> int:
        return self.go(len(self.events) - 1)

    def _next_in(self, indices: list[int]) -> int | None:
        k = bisect.bisect_right(indices, self.cursor)
        return indices[k] if k < len(indices) else None

    def _prev_in(self, indices: list[int]) -> int | None:
        k = bisect.bisect_left(indices, self.cursor)
        return indices[k - 1] if k > 0 else None

    def next_step(self) -> int | None:
        """To the next agent action's start (or the end of the run after the last)."""
        target = self._next_in(self.steps)
        if target is None and self.cursor < len(self.events) - 1:
            target = len(self.events) - 1
        return None if target is None else self.go(target)

    def prev_step(self) -> int | None:
        target = self._prev_in(self.steps)
        if target is None and self.cursor > 0:
            target = 0
        return None if target is None else self.go(target)

    def goto_step(self, step: int) -> int | None:
        """To the start of worker step `step` (None when the run has no such step)."""
        index = self.worker_steps.get(step)
        if index is None and step == 0:
            index = 0
        return None if index is None else self.go(index)

    def next_mark(self, mark: Mark) -> int | None:
        target = self._next_in(self.marks[mark])
        return None if target is None else self.go(target)

    def prev_mark(self, mark: Mark) -> int | None:
        target = self._prev_in(self.marks[mark])
        return None if target is None else self.go(target)

    # --- search ---------------------------------------------------------------------

    def search(self, query: str) -> list[int]:
        """Events whose transcript text holds `query` (case-insensitive), in order.

        Lines are first checked as bytes for the query as JSON writes it, and
        only those that may match are parsed.
        """
        self.query = query
        needle = query.lower()
        self.matches = []
        if not needle:
            return self.matches
        escaped = json.dumps(needle, ensure_ascii=False)[1:-1].encode()
        ascii_only = escaped.isascii()
        log = self.events
        for i, kind in enumerate(log.types):
            if kind not in SEARCHED:
                continue
            line = log.raw_with_refs(i)
            if line is not None:
                haystack = (
                    line.lower() if ascii_only else line.decode("utf-8", "replace").lower().encode()
                )
                if escaped not in haystack:
                    continue
            text = searchable_text(log.peek(i))
            if text and needle in text.lower():
                self.matches.append(i)
        noted = {self.annotation_index(n) for n in self.annotations if needle in n.text().lower()}
        if noted - {None}:
            self.matches = sorted(set(self.matches) | {i for i in noted if i is not None})
        return self.matches

    def next_match(self) -> int | None:
        """The first match after the cursor, wrapping round to the first."""
        if not self.matches:
            return None
        target = self._next_in(self.matches)
        return self.go(self.matches[0] if target is None else target)

    def prev_match(self) -> int | None:
        if not self.matches:
            return None
        target = self._prev_in(self.matches)
        return self.go(self.matches[-1] if target is None else target)

    # --- what the panes are fed ---------------------------------------------------

    def window_events(self, index: int | None = None) -> list[ev.Event]:
        """The events a rebuilt transcript is fed to show the run at `index`: from a
        few agent steps back, with older streamed output left out of very long windows;
        after the run's start, which names its agents' tools (console/text/written_calls.py)."""
        return self._after_start(self._window(index))

    def _after_start(self, window: list[ev.Event]) -> list[ev.Event]:
        first = self.events[0] if len(self.events) else None
        if isinstance(first, ev.RunStarted) and (not window or window[0].seq != first.seq):
            return [first, *window]
        return window

    def _window(self, index: int | None) -> list[ev.Event]:
        index = self.cursor if index is None else self._clamp(index)
        k = bisect.bisect_right(self.steps, index) - 1
        start = self.steps[max(0, k - WINDOW_STEPS)] if k >= 0 else 0
        if index - start > MAX_WINDOW_EVENTS and k >= 0:
            start = max(start, self.steps[k])  # the cursor's own step at least
        if k < 0:
            start = max(0, index - MAX_WINDOW_EVENTS)
        cut = index - MAX_WINDOW_EVENTS
        if cut <= start:
            return self.events[start : index + 1]
        types = self.events.types
        out = [
            self.events[i]
            for i in range(start, cut + 1)
            if types[i] not in ("tool_output", "text_delta", "resource_sample")
        ]
        out.extend(self.events[cut + 1 : index + 1])
        return out

    def plan_window(self, index: int | None = None) -> list[ev.Event]:
        """The last events the Plan pane has lines for, up to `index`, after the run's
        start (its agents' tools)."""
        index = self.cursor if index is None else self._clamp(index)
        k = bisect.bisect_right(self.plan_messages, index)
        window = [self.events[i] for i in self.plan_messages[max(0, k - PLAN_MESSAGES) : k]]
        return self._after_start(window)

    def resource_window(self, index: int | None = None) -> list[ev.Event]:
        """The last resource samples up to `index` (the Resources pane's sparklines)."""
        index = self.cursor if index is None else self._clamp(index)
        k = bisect.bisect_right(self.resources, index)
        return [self.events[i] for i in self.resources[max(0, k - RESOURCE_HISTORY) : k]]

    def snapshot_seq(self, index: int | None = None) -> int | None:
        """The seq of the last workspace snapshot at or before `index` (None: none yet)."""
        index = self.cursor if index is None else self._clamp(index)
        k = bisect.bisect_right(self.snapshots, index)
        return self.events[self.snapshots[k - 1]].seq if k else None

    def snapshot_index(self, seq: int) -> int | None:
        """The event index of the snapshot with this seq."""
        for i in self.snapshots:
            if self.events[i].seq == seq:
                return i
        return None


class HistoryFiles:
    """The Files pane's source over the workspace history, at one point of the run."""

    def __init__(self, history: WorkspaceHistory) -> None:
        self.history = history
        self.seq: int | None = None
        self._trees: dict[int | None, list[FileInfo]] = {}

    def at(self, seq: int | None) -> bool:
        """Move to the workspace as of `seq`; True when that is another version."""
        changed = seq != self.seq
        self.seq = seq
        return changed

    async def list_tree(self, path: str = ".", *, max_depth: int = 3) -> list[FileInfo]:
        if self.seq is None:
            return []
        tree = self._trees.get(self.seq)
        if tree is None:
            if len(self._trees) > 64:
                self._trees.clear()
            tree = self._trees[self.seq] = self.history.tree_at(self.seq)
        return tree

    async def read_file(self, path: str) -> bytes:
        entry = self.history.files_at(self.seq).get(path) if self.seq is not None else None
        if entry is None:
            raise FileNotFoundError(f"{path} did not exist at this step")
        data = self.history.read_at(path, self.seq)
        if data is None:
            size = entry[0].size
            how = "size and hash" if entry[0].sha256 else "size and time (never read)"
            raise FileNotFoundError(
                f"{path} ({size:,} bytes) was recorded by {how} only, not its contents"
            )
        return data

    def last_change(self, path: str) -> ev.WorkspaceSnapshot | None:
        """The latest snapshot at or before the current point that changed or removed `path`."""
        found = None
        for snap in self.history.snapshots:
            if self.seq is None or snap.seq > self.seq:
                break
            if path in snap.removed or any(c.path == path for c in snap.changed):
                found = snap
        return found

    def diff(self, path: str) -> tuple[ev.WorkspaceSnapshot | None, str]:
        """The last change to `path` up to here: the snapshot that made it, and its diff."""
        snap = self.last_change(path)
        if snap is None:
            return None, ""
        return snap, self.history.diff(path, snap.seq)
