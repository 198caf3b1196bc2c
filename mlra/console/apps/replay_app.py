"""The replay console: the live console's panes over a recorded run, read-only.

The cursor lives in a ReplayModel (console/text/replay.py); this app only moves it
and shows the run as it was there. Moving forward a little feeds the panes the
new events, as a live run would; any other move rebuilds them from a bounded
window of events, so stepping stays fast on runs of any length. Nothing here
can steer or change the run: the steering keys are not bound at all; `f` asks
before it leaves the replay to fork a new run. A note on a step (`#`, `c`, `r`) goes
beside the run's log, in annotations.jsonl; the log itself is only read.

A search marks its text in the transcript and opens the entry that holds the
match, so the match is seen, not only the cursor moved to it.

As in the live console, the run's text is shown and never obeyed: escaped where it
is shown (a file's name and diff, the task's name), never read as markup (a toast
quoting a path or a search goes with markup off), and filtered as it is drawn.

Its status line and transcript are in console/screens/replay_panes.py, its playing (a clock
over the cursor) in console/apps/replay_playback.py.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Static, Tree

from mlra.agent.record.annotations import Annotation
from mlra.console.apps.app import MlraApp, _runner
from mlra.console.apps.layout import run_screen
from mlra.console.apps.replay_playback import DEFAULT_RATE, ReplayPlayback
from mlra.console.panes import redraw
from mlra.console.panes.attempts import ReplayAttemptsPane
from mlra.console.panes.files import NO_PREVIEW, FilesPane
from mlra.console.panes.plan import PlanPane
from mlra.console.panes.resources import ResourcesPane
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.panes.transcript_entries import ThoughtEntry
from mlra.console.screens.replay_panes import (
    ReplayStatusBar,
    ReplayTranscript,
    VerdictPanel,
    step_words,
)
from mlra.console.screens.screens import ConfirmScreen, DiffScreen, HelpScreen, PromptScreen
from mlra.console.text.keymap import ATTEMPT_VIEW_KEYS, ATTEMPTS_FOCUS_KEY, REPLAY_KEYS, bindings
from mlra.console.text.replay import HistoryFiles, Mark, PlayUnit, ReplayModel
from mlra.terminal_text import printable_line

INCREMENTAL_MAX = 400
"""Moving forward by at most this many events feeds them to the panes; further, they are rebuilt."""
MAX_ENTRIES = 40
"""Transcript entries the replay lets pile up before it rebuilds the transcript: every
entry costs layout time on each move, and earlier ones are a step back away."""
MARK_WORDS = {
    "tool": "tool call",
    "error": "error",
    "plan": "plan change",
    "annotation": "annotation",
}


class ReplayApp(ReplayPlayback, MlraApp, inherit_bindings=False):
    """`mlra replay RUN_DIR`: step through a recorded run."""

    CSS_PATH = str(Path(__file__).parent.parent / "mlra.tcss")
    """Absolute, so that subclasses elsewhere (a bench, a test) find it too."""
    BINDINGS = [
        *bindings(REPLAY_KEYS),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(
        self, model: ReplayModel, *, at_step: int | None = None, freeze_gc: bool = False
    ) -> None:
        """`freeze_gc`: this process is the replay's alone (`mlra replay`), so what it
        has loaded may be frozen out of the garbage collector's passes."""
        self.model = model
        self.files_history = HistoryFiles(model.history)
        super().__init__(events=(), files=self.files_history, run_dir=model.run_dir)
        self.at_step = at_step
        self.freeze_gc = freeze_gc
        self.fork_at: int | None = None
        """Set when the user asked to fork: the CLI forks after the app has closed."""
        self.playing = False
        self.unit: PlayUnit = "events"
        self.rate_index = DEFAULT_RATE["events"]
        self._play_timer: Timer | None = None
        self._play_credit = 0.0
        self._shown: int | None = None

    def compose(self) -> ComposeResult:
        center = [
            VerdictPanel(id="verdict"),
            ReplayAttemptsPane(host=self, id="attempts"),
            ReplayTranscript(id="transcript"),
        ]
        yield from run_screen(
            status=ReplayStatusBar(id="status"),
            center=center,
            files_source=self.files_source,
            host=self,
        )

    def on_mount(self) -> None:
        self._layout(self.size.width)
        self.query_one(TranscriptPane).set_annotations(self.model.annotations)
        # The checkpoints of the state fold are built beside the console, so it opens
        # at once; a jump that needs one not built yet builds it itself.
        self.run_worker(self._build_checkpoints, thread=True, exit_on_error=False)
        if self.at_step is not None:
            if self.model.goto_step(self.at_step) is None:
                self.notify(
                    f"the run has no worker step {self.at_step}", severity="warning", markup=False
                )
        elif self.model.final.finished is not None:
            # A finished run opens on its ending, as one asks of a run first (how did it
            # end, how well); Home goes to its start. One still being written opens at
            # its first event, as before.
            self.model.last()
        self.show_cursor()
        self.query_one(TranscriptPane).focus()

    def _build_checkpoints(self) -> None:
        self.model.build_checkpoints()
        if self.freeze_gc:
            # What the replay has built so far lives as long as the app: frozen, the
            # collector's full passes stop scanning it, which otherwise show as
            # stalls of a tenth of a second between key presses on long runs.
            gc.freeze()

    # --- showing the cursor ---------------------------------------------------------

    def show_cursor(self) -> None:
        """Bring every pane to the run as it was at the model's cursor."""
        model = self.model
        new, old = model.cursor, self._shown
        state = model.state
        self.state = state
        plan = self.query_one(PlanPane)
        transcript = self.query_one(TranscriptPane)
        resources = self.query_one(ResourcesPane)
        rebuilt = False
        if (
            old is not None
            and 0 < new - old <= INCREMENTAL_MAX
            and transcript.entry_count() < MAX_ENTRIES
        ):
            for event in model.events[old + 1 : new + 1]:
                plan.feed(event)
                transcript.feed(event)
                resources.feed(event)
        elif old != new:
            rebuilt = True
            plan.clear()
            resources.clear()
            for event in model.plan_window():
                plan.feed(event)
            for event in model.resource_window():
                resources.feed(event)
            transcript.rebuild(model.window_events())
        self._shown = new
        plan.show(state)
        self.query_one(VerdictPanel).show(state, model)
        self._show_experiments()
        self._show_attempts()
        transcript.flush()
        if rebuilt:
            transcript.follow()
        self._tick()
        # The first showing lists the files even where none were recorded yet (an
        # empty tree, "0 entries"), rather than leaving the pane to its timer.
        if self.files_history.at(model.snapshot_seq()) or old is None:
            self.call_later(self._refresh_files)

    def _tick(self) -> None:
        try:
            resources, status = self.query_one(ResourcesPane), self.query_one(ReplayStatusBar)
        except NoMatches:
            return  # the app is closing
        resources.show(self.state, self.state.elapsed_s)
        status.show_replay(self.state, self.model, self._playing_text())

    async def _refresh_files(self) -> None:
        try:
            await super()._refresh_files()
            pane = self.query_one(FilesPane)
            tree = self.query_one("#files-tree", Tree)
        except NoMatches:
            return  # the app is closing

        node = tree.cursor_node
        if (
            node is None
            or node.data is None
            or node.data.path not in {i.path for i in await self.files_history.list_tree()}
        ) and pane.is_attached:  # not removed while the listing was read
            redraw(pane.query_one("#preview", Static), NO_PREVIEW.copy())

    def _moved(self, target: int | None, what: str = "") -> None:
        if target is None:
            if what:
                self.notify(
                    f"no {what} after this point" if "previous" not in what else f"no {what}"
                )
            return
        self.show_cursor()

    # --- moving ---------------------------------------------------------------------

    def action_forward(self) -> None:
        self._moved(self.model.forward())

    def action_step_back(self) -> None:
        self._moved(self.model.back())

    def action_first(self) -> None:
        self._moved(self.model.first())

    def action_last(self) -> None:
        self._moved(self.model.last())

    def action_next_step(self) -> None:
        self._moved(self.model.next_step(), "agent step")

    def action_prev_step(self) -> None:
        self._moved(self.model.prev_step(), "previous agent step")

    def action_next_mark(self, mark: Mark) -> None:
        self._moved(self.model.next_mark(mark), MARK_WORDS[mark])

    def action_prev_mark(self, mark: Mark) -> None:
        self._moved(self.model.prev_mark(mark), f"previous {MARK_WORDS[mark]}")

    def action_goto_step(self) -> None:
        last = self.model.final.steps
        step_of = step_words(self.model.final)

        def done(text: str | None) -> None:
            if not text:
                return
            try:
                step = int(text)
            except ValueError:
                self.notify(f"{text!r} is not a step number", severity="error", markup=False)
                return
            if self.model.goto_step(step) is None:
                self.notify(f"the run has no {step_of} {step} (1–{last})", severity="error")
                return
            self.show_cursor()

        if step_of == "search step" and not last:
            # An LLM search's own turns are its supervisor's, numbered as no one's step.
            self.notify(
                "this search numbers no steps of its own: its attempts' workers take the "
                "steps, in their own transcripts (Enter on one in Attempts)",
                severity="warning",
            )
            return
        title, hint = f"Go to {step_of} (1–{last})", "a step number"
        if step_of == "search step":
            # Its steps are its own actions; its attempts' workers number theirs apart.
            title += ", the search's own actions"
            hint = "a number (an attempt's steps: Enter in Attempts)"
        self.push_screen(PromptScreen(title, hint), done)

    def action_search(self) -> None:
        def done(query: str | None) -> None:
            if not query:
                return
            matches = self.model.search(query)
            if not matches:
                self.notify(f"no match for {query!r}", severity="warning", markup=False)
                return
            self.model.next_match()
            self.show_cursor()
            self._match_note()

        self.push_screen(
            PromptScreen("Search the transcript", "text in thoughts, calls or output"), done
        )

    def _match_note(self) -> None:
        """Say which match this is, mark the query in the transcript and bring the
        entry holding the match into view, opened so the match shows."""
        self._show_match()
        matches = self.model.matches
        k = matches.index(self.model.cursor) + 1 if self.model.cursor in matches else 0
        # repr() escapes what a terminal would obey; markup off keeps `[` as it is.
        query = self.model.query
        self.notify(f"{query!r}: match {k} of {len(matches)}", timeout=3, markup=False)

    def _show_match(self) -> None:
        transcript = self.query_one(TranscriptPane)
        transcript.set_highlight(self.model.query)
        event = self.model.event
        entry: Any = None
        call_id = getattr(event, "call_id", None)
        if isinstance(call_id, str):
            entry = transcript.tool_entry(call_id)
            if entry is not None and not entry.expanded:
                entry.expanded = True
        else:
            turn = getattr(event, "turn", None)
            entry = next(
                (
                    e
                    for e in transcript.children
                    if isinstance(e, ThoughtEntry) and e.key == ("thought", turn)
                ),
                None,
            )
        transcript.flush()
        if entry is not None and entry.parent is transcript:
            transcript.call_after_refresh(
                transcript.scroll_to_widget, entry, animate=False, top=True
            )

    def action_next_match(self) -> None:
        if self.model.next_match() is None:
            self.notify("no search yet: / searches", severity="warning")
            return
        self.show_cursor()
        self._match_note()

    def action_prev_match(self) -> None:
        if self.model.prev_match() is None:
            self.notify("no search yet: / searches", severity="warning")
            return
        self.show_cursor()
        self._match_note()

    # --- annotations ----------------------------------------------------------------

    def annotation_target(self) -> tuple[int, int] | None:
        """The worker step the cursor is in, and the event under it."""
        step = self.model.position().step
        if self.run_dir is None or step not in self.model.worker_steps:
            self.notify("no worker step here to annotate: → or ] moves on", severity="warning")
            return None
        return step, self.model.event.seq

    def show_annotation(self, note: Annotation) -> None:
        """The note joins the replay's marks and search, and the transcript is rebuilt
        so it shows under its step's line (console/panes/transcript_notes.py)."""
        self.model.set_annotations([*self.model.annotations, note])
        self.query_one(TranscriptPane).set_annotations(self.model.annotations)
        self._shown = None
        self.show_cursor()

    def action_rate_step(self) -> None:
        self._ask_note("rating")

    def _stop_timers(self) -> None:
        super()._stop_timers()
        self._stop_playing()

    # --- files, fork, help ----------------------------------------------------------

    def selected_file(self) -> str | None:
        node = self.query_one("#files-tree", Tree).cursor_node
        if node is None or node.data is None or node.data.is_dir:
            return None
        return str(node.data.path)

    def action_diff(self) -> None:
        path = self.selected_file()
        if path is None:
            self.notify(
                "select a file in the Files pane first (Tab moves there)", severity="warning"
            )
            return
        snap, diff = self.files_history.diff(path)
        if snap is None:
            self.notify(
                f"{printable_line(path)}: no recorded change up to here",
                severity="warning",
                markup=False,
            )
            return
        index = self.model.snapshot_index(snap.seq) or 0
        what = "removed" if path in snap.removed else "changed"
        title = f"{path}: {what} at step {snap.step} (event {index + 1:,})"
        self.push_screen(DiffScreen(title, diff))

    def action_fork(self) -> None:
        """Ask first: a fork leaves the replay and starts a new run, with a model."""
        step = self.model.fork_step()
        self._stop_playing()

        def done(yes: bool | None) -> None:
            if yes:
                self.fork_at = step
                self.exit(0)

        # In the status line's numbering ("step 3 of 4": the cursor is in step 3): a fork
        # `--at N` starts from the state before step N, that is after step N - 1.
        shown = self.model.position().step
        command = f"`mlra fork {self.model.run_dir or 'RUN'} --at {step}`"
        if shown >= step:
            question = f"Fork a new run at {step_words(self.state)} {step}, before its action?"
            detail = f"{command} starts a new run from the state before step {step}"
        else:
            question = f"Fork a new run after {step_words(self.state)} {shown}?"
            detail = f"{command} starts a new run from the state after step {shown}"
        again = (
            "the baseline agent runs its recipe on from that step"
            if self.state.model == "baseline"
            else "the model is asked again from there"
        )
        self.push_screen(
            ConfirmScreen(
                question,
                f"The replay closes and {detail} ({again}). This run is not changed.",
            ),
            done,
        )

    def action_help(self) -> None:
        attempts = [ATTEMPTS_FOCUS_KEY, *ATTEMPT_VIEW_KEYS]
        keys = [*REPLAY_KEYS, *attempts] if self.state.attempts else REPLAY_KEYS
        self.push_screen(HelpScreen(keys, replay=True))

    async def action_quit(self) -> None:
        self.exit(0)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return True

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super(MlraApp, self).get_system_commands(screen)
        for key in REPLAY_KEYS:
            yield SystemCommand(
                key.label if key.footer else key.help.split(";")[0].rstrip("."),
                key.help,
                _runner(self, key.action),
            )
