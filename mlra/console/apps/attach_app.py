"""The console attached to a run in another process (`mlra attach`): the same console,
its panes fed by the run's log over the control socket (console/text/attach_run.py) rather
than by a run it drives itself.

What differs is what leaving means: q (and Ctrl+C) detaches and the run goes on, where
the run's own console would stop it; s still stops and evaluates the run, after the same
question. Whether this console holds the controls or only watches is said in the status
line; a key pressed while another console holds them is answered with who does.
"""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.css.query import NoMatches

from mlra import events as ev
from mlra.agent.record.run_result import result_of
from mlra.console.apps.app import MlraApp
from mlra.console.panes.status import StatusBar
from mlra.console.text.attach_run import RemoteRun
from mlra.console.text.keymap import KEYS, Key, bindings
from mlra.control_socket import NotLive
from mlra.terminal_text import printable_line

DETACH_KEY = Key(
    "q",
    "quit",
    "Detach",
    "Detach: this console closes, the run goes on (mlra attach RUN comes back).",
)
ATTACH_KEYS: list[Key] = [DETACH_KEY if k.action == "quit" else k for k in KEYS]
STEERING = {
    "pause", "resume", "step", "approve", "edit", "reject", "breakpoints", "inject", "stop",
    "stop_job",
}  # fmt: skip
ATTEMPT_STEERING = {"promote", "message"}
"""The Attempts pane's keys that steer (its x is `stop`, in STEERING)."""


class AttachApp(MlraApp):
    BINDINGS = bindings(ATTACH_KEYS)
    KEY_TABLE = ATTACH_KEYS

    def __init__(self, remote: RemoteRun) -> None:
        super().__init__(controller=remote)
        self.remote = remote
        self.detached = False
        """Whether the user left the console while the run went on."""
        remote.on_refused = self._refused
        remote.on_holder = self._holder_changed
        remote.on_told = lambda said: self.notify(printable_line(said), timeout=4, markup=False)

    # --- following the run ------------------------------------------------------------

    @work(exclusive=True, group="run", exit_on_error=False)
    async def drive(self) -> None:
        try:
            self.result = await self.remote.follow()
        except NotLive as exc:
            self.remote.gone = str(exc)
        finally:
            self.display_.close()
        if self.result is None and self.remote.gone is not None:
            self.notify(
                f"The run no longer answers ({printable_line(self.remote.gone)}): its log ends "
                "here. mlra resume RUN goes on with it; q leaves.",
                severity="error",
                timeout=15,
                markup=False,
            )
        self._holder_changed()
        self.refresh_bindings()

    def tells(self, event: ev.Event) -> bool:
        """The run's past, read first, is no news: a call it approved long ago, a provider
        failure it got over, are not toasted as though they were happening now."""
        return event.seq > self.remote.backlog_upto

    def _refused(self, message: str) -> None:
        self.notify(printable_line(message), severity="warning", timeout=6, markup=False)

    def _holder_changed(self) -> None:
        self._show_note()
        self.refresh_bindings()

    def _note(self) -> list[Text]:
        remote = self.remote
        if remote.gone is not None and self.state.finished is None:
            return [
                Text(" GONE: the run's process no longer answers ", style="bold white on red3"),
                Text(" GONE ", style="bold white on red3"),
            ]
        if self.state.finished is not None or self.result is not None:
            return [Text(" ATTACHED ", style="bold black on magenta")]
        if remote.status is None:
            return [Text(" ATTACHING… ", style="black on grey70")]
        if remote.holding:
            return [
                Text(" ATTACHED: your keys steer the run · q detaches ", style="black on magenta"),
                Text(" ATTACHED ", style="black on magenta"),
            ]
        holder = printable_line(remote.holder) if remote.holder else "another console"
        return [
            Text(f" WATCH-ONLY: {holder} holds the controls ", style="black on grey70"),
            Text(" WATCH-ONLY ", style="black on grey70"),
        ]

    def _show_note(self) -> None:
        try:
            status = self.query_one(StatusBar)
        except NoMatches:
            return  # not mounted yet, or closing
        status.note = self._note()
        self._tick()

    def on_mount(self) -> None:
        super().on_mount()
        self._show_note()

    # --- keys -------------------------------------------------------------------------

    def offers(self, action: str) -> bool:
        """Watching while another console holds the controls, the steering keys are not
        offered (footer, help, palette): they would only be refused. Pressed anyway, one
        still asks for the controls, so it is refused naming the holder, or takes them
        once the holder has left (they show again then, or within a status poll)."""
        remote = self.remote
        watching = (
            not remote.holding
            and remote.holder is not None
            and remote.gone is None
            and self.state.finished is None
        )
        steering = action.split("(")[0] in STEERING | ATTEMPT_STEERING
        return super().offers(action) and not (watching and steering)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in STEERING and self.remote.gone is not None:
            return False  # nothing answers: no key offers to steer
        return super().check_action(action, parameters)

    async def action_quit(self) -> None:
        """Detach: the run goes on; once it has ended, leave as the console does."""
        if self._run_over() or self.remote.gone is not None:
            if self.result is None and self.state.finished is not None:
                # The end is shown; the run's last word (`ended`) may still be on its way.
                self.result = result_of(self.state)
            self.exit(self.exit_code())
            return
        self.detached = True
        self.remote.close()
        self.exit(0)
