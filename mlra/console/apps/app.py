"""The Textual console: the run's panes, its controls, and the run itself.

The agent runs as an asyncio worker of this app, on the app's own event loop.
The app never polls the run: it is a display like the headless ones, fed the
run's events as they are appended, in batches (so a command printing thousands
of lines a second costs one render per batch, not one per line). Every control
the user touches goes to the run controller, which records it as an event.

What the run says is text, never control: the panes show what an agent, a command
or a file name wrote with its control characters escaped (mlra/terminal_text.py)
and never as markup (they build `Text`, and a toast quoting the run is sent with
markup off); and whatever reaches the screen still holding one is cleaned of it
by a line filter on everything drawn, dialogs and toasts included.

This module holds the panes, their layout and what feeds them; the batching of events and
the last guard on each line drawn are in console/apps/console_display.py, the keys that steer
the run in console/screens/run_control_keys.py, those that keep notes in console/screens/note_keys.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.console import RenderableType
from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.css.query import NoMatches
from textual.filter import LineFilter
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer

from mlra import events as ev
from mlra.agent.record.annotations import StepIndex
from mlra.agent.record.run_result import RunResult
from mlra.agent.record.state import RunState
from mlra.agent.run.controller import Agent, RunController
from mlra.console.apps.console_display import ConsoleDisplay, EventsArrived, NoControls
from mlra.console.apps.layout import run_screen
from mlra.console.panes.attempts import AttemptAction, AttemptsPane
from mlra.console.panes.experiments import ExperimentsPane
from mlra.console.panes.files import FileSource, FilesPane
from mlra.console.panes.plan import PlanPane
from mlra.console.panes.resources import ResourcesPane
from mlra.console.panes.status import StatusBar
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.panes.transcript_entries import ToolEntry, newest_to_fold
from mlra.console.screens.attempt_actions import act_on_attempt
from mlra.console.screens.live_run import LiveRun
from mlra.console.screens.note_keys import NoteKeys
from mlra.console.screens.run_control_keys import RunControlKeys
from mlra.console.screens.screens import HelpScreen
from mlra.console.text.attempt_logs import AttemptLogs
from mlra.console.text.curves_data import CurveSet
from mlra.console.text.keymap import ATTEMPT_KEYS, ATTEMPTS_FOCUS_KEY, KEYS, bindings
from mlra.terminal_text import printable, printable_line

NARROW_BELOW = 130
"""Terminals narrower than this get the compact layout (Files on demand)."""
FILES_REFRESH_S = 3.0


class MlraApp(RunControlKeys, NoteKeys, App[int]):
    """The panes and their layout, fed the run's events; the keys that steer the run
    (console/screens/run_control_keys.py) and keep notes (console/screens/note_keys.py) are mixed in."""

    CSS_PATH = "../mlra.tcss"
    TITLE = "mlra"
    BINDINGS = bindings()
    KEY_TABLE = KEYS
    """The keys help and the command palette list (an attached console's q detaches)."""

    def __init__(
        self,
        *,
        controller: LiveRun | None = None,
        make_agent: Callable[[RunController], Agent] | None = None,
        events: Iterable[ev.Event] = (),
        files: FileSource | None = None,
        run_dir: Path | None = None,
    ) -> None:
        """A live run (`controller`), or a recorded one (`events` and `files`, and its
        folder `run_dir`, where the attempts of a search have their own)."""
        super().__init__()
        self.controller = controller
        self.run_dir = controller.run_dir if controller is not None else run_dir
        self.make_agent = make_agent
        self.recorded = list(events)
        self.files_source = files
        self.state = RunState()
        self.curves = CurveSet()
        """The run's `metrics` and validations as curves (the Curves view, `v`)."""
        self.display_ = ConsoleDisplay(self)
        self.attempt_logs = AttemptLogs(self.run_dir)
        """A search's attempts' own logs: their notices and calls shown in the transcript."""
        self.result: RunResult | None = None
        self.provider_error: str | None = None
        self._quit_when_done = False
        self._last_phase: object = None
        self._files_wanted = False
        self._tick_timer: Timer | None = None
        self._files_timer: Timer | None = None
        self._no_controls = NoControls()
        self._notes_size: int | None = None
        """The size of annotations.jsonl when last read: a change shows the new notes."""
        self._step_index: StepIndex | None = None
        """Where each worker step starts in the log, read as the log grows (note keys)."""
        if controller is not None:
            controller.subscribe(self.display_.on_event)
            controller.tool_step.watch_output(self.display_.on_event)  # agent/loop/unlogged.py

    # --- layout ---------------------------------------------------------------------

    def get_line_filters(self) -> list[LineFilter]:
        """Textual's own filters (colour, NO_COLOR), then the guard against control."""
        return [*super().get_line_filters(), self._no_controls]

    def compose(self) -> ComposeResult:
        center = [AttemptsPane(host=self, id="attempts"), TranscriptPane(id="transcript")]
        status, files = StatusBar(id="status"), self.files_source
        yield from run_screen(status=status, center=center, files_source=files, host=self)

    def on_mount(self) -> None:
        self._layout(self.size.width)
        self._load_annotations()
        self._tick_timer = self.set_interval(1.0, self._on_tick_timer)
        if self.files_source is not None:
            self._start_files_timer()
        if self.controller is not None:
            # The Jobs section's last lines: the job manager's memory, no file read.
            self.query_one(ResourcesPane).job_last_line = self.controller.jobs.last_line
            if self.recorded:  # a resumed run: what happened before, then live
                self._render_batch(self.recorded)
            self.drive()
        elif self.recorded:
            for event in self.recorded:
                self.display_.on_event(event)
            self._render_batch(self.display_.take())
            self.call_after_refresh(self._refresh_files)
        self.query_one(TranscriptPane).focus()

    def on_resize(self, event: Any) -> None:
        self._layout(event.size.width)

    def _layout(self, width: int) -> None:
        self.set_class(width < NARROW_BELOW, "-narrow")
        self.set_class(self._files_wanted, "-files")
        for footer in self.query(Footer):
            # Compact keys, and no palette hint (help names Ctrl+P), leave room for
            # q Quit at 80 columns.
            footer.compact = width < NARROW_BELOW
            footer.show_command_palette = width >= NARROW_BELOW

    # --- the run --------------------------------------------------------------------

    @work(exclusive=True, group="run", exit_on_error=False)
    async def drive(self) -> None:
        assert self.controller is not None and self.make_agent is not None
        try:
            self.result = await self.controller.run(self.make_agent)
        finally:
            self.display_.close()
            if self.controller.provider is not None:
                await self.controller.provider.aclose()
        self.refresh_bindings()
        if self._quit_when_done:
            self.exit(self.exit_code())

    def _attach_sandbox(self) -> None:
        """The Files pane reads the run's sandbox once the run has started it."""
        if self.controller is not None and self.controller.sandbox is not None:
            self.files_source = self.controller.sandbox
            self.query_one(FilesPane).source = self.controller.sandbox
            self._start_files_timer()
            files_changed_soon = self._refresh_files
            self.call_later(files_changed_soon)

    # --- timers ---------------------------------------------------------------------

    def _start_files_timer(self) -> None:
        if self._files_timer is None:
            self._files_timer = self.set_interval(FILES_REFRESH_S, self._on_files_timer)

    def _on_tick_timer(self) -> None:
        # Textual marks the app as not running before it removes the panes at
        # shutdown (a test's run_test() ends that way, without exit()).
        if self.is_running:
            self._poll_annotations()
            self._tick()

    async def _on_files_timer(self) -> None:
        if self.is_running:
            await self._refresh_files()

    def _stop_timers(self) -> None:
        for timer in (self._tick_timer, self._files_timer):
            if timer is not None:
                timer.stop()
        self._tick_timer = self._files_timer = None

    def exit(
        self,
        result: int | None = None,
        return_code: int = 0,
        message: RenderableType | None = None,
    ) -> None:
        """Stops the interval timers first: none may fire into a pane being removed."""
        self._stop_timers()
        super().exit(result, return_code, message)

    def on_events_arrived(self, _: EventsArrived) -> None:
        self._render_batch(self.display_.take())

    def _render_batch(self, batch: list[ev.Event]) -> None:
        if not batch:
            return
        try:
            plan = self.query_one(PlanPane)
            transcript = self.query_one(TranscriptPane)
            resources = self.query_one(ResourcesPane)
        except NoMatches:
            return  # the console is closing and its panes are gone; the log has it all
        files_changed = False
        for event in batch:
            if not event.seq:  # what the log no longer takes: the streams' panes only
                plan.feed(event)
                transcript.feed(event)
                continue
            self.state.apply(event)
            self.curves.feed(event)
            plan.feed(event)
            for attempt, said in self.attempt_logs.news(event):
                transcript.attempt_said(attempt, said, event.t, calls=self.attempt_logs.local)
            transcript.feed(event)
            resources.feed(event)
            if isinstance(event, ev.ToolResult):
                files_changed = True
            elif isinstance(event, ev.RunStarted):
                self._attach_sandbox()
            elif (
                isinstance(event, ev.ModelError)
                and not event.fatal
                and event.cut_off is None
                and self.controller
                and self.tells(event)
            ):
                self.provider_error = event.error
                self.notify(
                    f"The model provider keeps failing: {printable(event.error)}\nThe run is "
                    "paused: Space retries, s stops and evaluates.",
                    severity="error",
                    timeout=15,
                    markup=False,
                )
            elif isinstance(event, ev.Control) and event.action == "resume":
                self.provider_error = None
            elif isinstance(event, ev.ApprovalRequested) and self.controller and self.tells(event):
                held = self.controller.controls.hold_at_breaks
                meanwhile = (
                    "commands, jobs and the clock are held meanwhile"
                    if held
                    else "commands and jobs run on; the wait counts on the clock"
                )
                self.notify(
                    f"{printable_line(event.tool)} waits for your approval "
                    f"({printable_line(event.reason)}): a approve · e edit · r reject\n"
                    f"({meanwhile})",
                    timeout=6,
                    markup=False,
                )
        if self.files_source is None and self.controller and self.controller.sandbox:
            self._attach_sandbox()  # a resumed run: its run_started was in the past
        plan.show(self.state)
        self._show_experiments()
        if any(isinstance(e, ev.AttemptStarted | ev.AttemptFinished) for e in batch):
            self._show_attempts()
        transcript.flush()
        # The footer and status line change with the run's phase only; redrawing them
        # for every batch of streamed output would cost renders for nothing.
        phase = (
            self.state.phase,
            self.state.pending_approval,
            self.state.paused,  # a pause while a call waits keeps the phase
            self.provider_error,
            self.state.evaluation,
            self.state.evaluation_progress,  # a grading's count (paced: evaluators/progress.py)
            # what the status line says the run is doing: the model, a retry, a command
            self.state.generating_since,
            self.state.answering_since,
            self.state.retry,
            len(self.state.running),
        )
        if phase != self._last_phase:
            self._last_phase = phase
            self._tick()
            self.refresh_bindings()
        elif any(isinstance(e, ev.ResourceSample | ev.ModelCall) for e in batch):
            resources.show(self.state, self._elapsed())
        if files_changed:
            self.call_later(self._refresh_files)

    def tells(self, event: ev.Event) -> bool:
        """Whether an event of a live run is news to tell in a toast (an attached console
        first reads the run's past, which has no news: console/apps/attach_app.py)."""
        return True

    def _show_experiments(self) -> None:
        try:
            self.query_one(ExperimentsPane).show(self.state)
        except NoMatches:
            return  # the console is closing

    def _show_attempts(self) -> None:
        try:
            self.query_one(AttemptsPane).show(self.state, self._elapsed())
        except NoMatches:
            return  # the console is closing

    def _elapsed(self) -> float:
        if self.controller is None or self.state.finished is not None:
            return self.state.elapsed_s
        return self.controller.clock.elapsed()

    def _tick(self) -> None:
        try:
            resources, status = self.query_one(ResourcesPane), self.query_one(StatusBar)
            elapsed = self._elapsed()
            resources.show(self.state, elapsed)
            status.show(self.state, elapsed_s=elapsed, provider_error=self.provider_error)
            attempts = self.query_one(AttemptsPane)
        except NoMatches:
            return  # a timer that fired while the console closes
        if attempts.ticks(self.state):
            attempts.show(self.state, elapsed)

    async def _refresh_files(self) -> None:
        if not self._files_visible():
            return
        try:
            pane = self.query_one(FilesPane)
            await pane.refresh_tree()
        except NoMatches:
            return  # the console is closing (or closed while the listing was read)

    def _files_visible(self) -> bool:
        return not self.has_class("-narrow") or self._files_wanted

    def action_curves(self) -> None:
        from mlra.console.screens.curves_screen import curves_view  # plotext: only when opened

        self.push_screen(curves_view(self))

    def action_help(self) -> None:
        attempts = [k for k in [ATTEMPTS_FOCUS_KEY, *ATTEMPT_KEYS] if self.offers(k.action)]
        keys = [k for k in self.KEY_TABLE if self.offers(k.action)]  # what works here
        self.push_screen(HelpScreen([*keys, *attempts] if self.state.attempts else keys))

    def action_focus_attempts(self) -> None:
        pane = self.query_one(AttemptsPane)
        if not pane.display:
            self.notify("this run has no attempts: it does not search (--search)", timeout=4)
            return
        pane.focus()

    def on_attempt_action(self, message: AttemptAction) -> None:
        """A key of the Attempts pane on its selected attempt (console/screens/attempt_actions.py)."""
        act_on_attempt(self, self, message.action, message.attempt)

    def action_follow(self) -> None:
        self.query_one(TranscriptPane).follow()

    def action_expand(self) -> None:
        focused = self.focused
        if isinstance(focused, ToolEntry):
            focused.action_toggle_expanded()
            return
        entry = newest_to_fold(list(self.query(ToolEntry)))
        if entry is not None:
            entry.action_toggle_expanded()

    def action_toggle_files(self) -> None:
        """F: to the Files tree (a narrow terminal shows the files in place of the
        transcript) and, from the tree, back to the transcript: one key each way."""
        tree = self.query_one("#files-tree")
        going = self.focused is not tree
        self._files_wanted = going
        self._layout(self.size.width)
        if going:
            self.call_after_refresh(tree.focus)  # once the layout has shown it
        else:
            self.query_one(TranscriptPane).focus()
        self.call_later(self._refresh_files)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for key in self.KEY_TABLE:
            action = key.action
            if self.check_action(action.split("(")[0], ()) is not True or not self.offers(action):
                continue
            yield SystemCommand(
                key.label if key.footer else key.help.split(";")[0].rstrip("."),
                key.help,
                _runner(self, action),
            )


def _runner(app: App[Any], action: str) -> Callable[[], Any]:
    async def run() -> None:
        await app.run_action(action)

    return run


def run_console(config: Any, task: Any, provider: Any) -> int:
    """`mlra run` without --no-tui: the run, driven inside the console."""
    controller = RunController(config, task, provider)
    controller.prepare()
    return continue_in_console(controller, [])


def console_app(
    controller: RunController,
    make_agent: Callable[[RunController], Agent],
    recorded: list[ev.Event],
) -> MlraApp:
    """The console that drives `controller` in this process: it holds the run's controls
    from the start, so a console attached from elsewhere (`mlra attach`) only watches."""
    controller.console_holder = "the run's own console"
    return MlraApp(controller=controller, make_agent=make_agent, events=recorded)


def continue_in_console(controller: RunController, recorded: list[ev.Event]) -> int:
    """Drive a prepared run in the console; `recorded` is what a resumed or forked run
    did before (shown first), empty for a new run."""
    from mlra.agent.agents.run import agent_for, know_tools
    from mlra.console.apps.collector import steady_collector
    from mlra.console.apps.headless_run import final_line

    know_tools(controller)  # a breakpoint checked from the start, not once the agents are made
    app = console_app(controller, agent_for, recorded)
    steady_collector()
    code = app.run()
    if app.result is not None:
        print(final_line(controller.run_dir, app.result))
    else:
        print(f"run stopped · run dir {Path(controller.run_dir)}")
    return code if code is not None else app.exit_code()
