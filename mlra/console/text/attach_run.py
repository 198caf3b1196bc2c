"""A run in another process, as the console drives it: `mlra attach`'s stand-in for the
run controller (console/screens/live_run.py is what both offer the console).

The run stays where it is; this speaks to its control socket (mlra/control_socket.py,
served by agent/control/control_server.py) over two connections: one `watch`es the log (every
event from the first, then each as it is appended) and feeds the console's display as
the controller's subscribers are fed; the other asks for the controls (`hold`) and
carries the user's keys, which the run records as `control` events from "attach".
Everything shown is folded from those events, as a replay would fold them; nothing is
inferred from what was sent (a pause shows once the run's `control` event comes back).

One attached console at a time holds the controls: the others watch, and a key they
press is answered with who holds them; once the holder lets go, the next key (or the
next look at the run's status) takes them. What the run refuses is said in its own
words. Closing the console closes the connections and leaves the run going.

The parts of the controller the console reads besides (its controls, clock, jobs and
attempts, as the run's events say they are) are console/text/remote_parts.py; the run's
workspace read from the host for the Files pane is console/text/host_workspace.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mlra import events as ev
from mlra.agent.loop.controls import Breakpoint
from mlra.agent.loop.drive import Agent
from mlra.agent.record.log_refs import Resolver, Unresolved
from mlra.agent.record.run_result import RunResult, result_of
from mlra.agent.record.state import RunState
from mlra.console.text.host_workspace import HostWorkspace
from mlra.console.text.remote_parts import (
    NoOutputFeed,
    RemoteAttempts,
    RemoteClock,
    RemoteControls,
    RemoteJobs,
)
from mlra.control_socket import (
    CtlReply,
    CtlRequest,
    NotLive,
    RunStatus,
    encode,
    short_address,
    socket_path,
)
from mlra.events import parse_event

MAX_LINE = 1 << 28
"""The longest line read from the run: one event, whole (a long file written by a call)."""
STATUS_EVERY_S = 2.0
"""How often the run's status is asked for: its clock, who holds the controls."""
Refusal = Callable[[str], None]


class Gone(Exception):
    """The run's process no longer answers (it ended or was killed)."""


class _Line:
    """One connection to the run's socket: a JSON line each way."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, run_dir: Path) -> _Line:
        if not socket_path(run_dir).exists():
            raise NotLive(f"{run_dir} is not running (no control socket)")
        try:
            with short_address(run_dir) as address:
                reader, writer = await asyncio.open_unix_connection(address, limit=MAX_LINE)
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            raise NotLive(f"{run_dir} is not running (its control socket is stale)") from exc
        return cls(reader, writer)

    async def send(self, req: CtlRequest) -> None:
        try:
            self.writer.write(encode(req))
            await self.writer.drain()
        except (ConnectionError, OSError) as exc:
            raise Gone(str(exc)) from None

    async def read(self) -> dict[str, Any]:
        """The next reply, as JSON (an event in it is parsed by the caller)."""
        try:
            line = await self.reader.readline()
        except (ConnectionError, OSError, ValueError, asyncio.LimitOverrunError) as exc:
            raise Gone(str(exc)) from None
        if not line:
            raise Gone("the run closed the connection")
        data = json.loads(line)
        if not isinstance(data, dict):
            raise Gone("the run sent something that is not a reply")
        return data

    async def ask(self, req: CtlRequest) -> CtlReply:
        await self.send(req)
        return CtlReply.model_validate(await self.read())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


def _console_name() -> str:
    """This console as other consoles are told of it: its terminal, where it has one."""
    try:
        where = f" on {os.ttyname(0)}"
    except OSError:
        where = ""
    return f"mlra attach{where} (pid {os.getpid()})"


class RemoteRun:
    """A live run in another process, attached to through its control socket."""

    def __init__(self, run_dir: Path, *, name: str | None = None) -> None:
        self.run_dir = run_dir
        self.name = name or _console_name()
        """How the run names this console to other consoles when it holds the controls."""
        self.state = RunState()
        self.controls = RemoteControls(self)
        self.clock = RemoteClock(self)
        self.jobs = RemoteJobs(self)
        self.tool_step = NoOutputFeed()
        self.attempts = RemoteAttempts(self)
        self.provider = None
        self.sandbox = HostWorkspace(run_dir / "workspace")
        self.status: RunStatus | None = None
        self.holding = False
        """Whether this console holds the run's controls."""
        self.holder: str | None = None
        """Who holds them when this console does not (None: nobody, or not known yet)."""
        self.gone: str | None = None
        """Why the run no longer answers, once it does not (killed, say), without an end."""
        self.on_refused: Refusal = lambda _message: None
        self.on_holder: Callable[[], None] = lambda: None
        self.on_told: Callable[[str], None] = lambda _message: None
        """Told the run's answer to a step: what it did (the console's toast)."""
        self._subscribers: list[Callable[[ev.Event], None]] = []
        self._resolve = Resolver()
        self._control: _Line | None = None
        self._watch: _Line | None = None
        self._lock = asyncio.Lock()
        self._sending: set[asyncio.Task[Any]] = set()
        self.backlog_upto = 0
        """The last event of the run's past when this console reached it (the rest is news)."""
        self.last_seq = 0

    @property
    def holds_at_breaks(self) -> bool:
        return self.controls.hold_at_breaks

    # --- connecting ---------------------------------------------------------------------

    async def connect(self) -> RunStatus:
        """Reach the run, learn where it stands, and ask for its controls (another console
        may hold them: then this one watches). NotLive where no run serves the folder."""
        self._control = await _Line.open(self.run_dir)
        try:
            reply = await self._control.ask(CtlRequest(op="status", client="attach"))
        except Gone as exc:
            raise NotLive(f"{self.run_dir}: the run ended before it answered ({exc})") from None
        if not reply.ok or reply.status is None:
            self._control.close()
            raise NotLive(f"{self.run_dir}: {reply.message or 'no status'}")
        self._take_status(reply.status)
        self.backlog_upto = reply.status.events
        if reply.status.state != "ended":
            with contextlib.suppress(Gone):
                await self._hold(quiet=True)
        return reply.status

    def _take_status(self, status: RunStatus) -> None:
        self.status = status
        self.clock.set(status.elapsed_s)
        self.controls.hold_at_breaks = status.hold_at_breaks
        self.controls.breakpoints = [Breakpoint.parse(r) for r in status.breakpoints]
        self.controls.tools = {agent: tuple(names) for agent, names in status.tools.items()}
        holder = None if self.holding else status.holder
        if holder != self.holder:
            self.holder = holder
            self.on_holder()

    async def _hold(self, *, quiet: bool) -> bool:
        assert self._control is not None
        reply = await self._control.ask(CtlRequest(op="hold", client="attach", text=self.name))
        was = self.holding
        self.holding = reply.ok
        if reply.ok:
            self.holder = None
        elif not quiet:
            self.on_refused(reply.message)
        if was != self.holding or not reply.ok:
            self.on_holder()
        return reply.ok

    def subscribe(self, callback: Callable[[ev.Event], None]) -> None:
        self._subscribers.append(callback)

    # --- following the run --------------------------------------------------------------

    async def run(self, make_agent: Callable[[Any], Agent] | None = None) -> RunResult:
        """Follow the run to its end (the agent is the run's own, in its process)."""
        await self.follow()
        return result_of(self.state)

    async def follow(self) -> RunResult | None:
        """Every event of the run, then each as it comes, to the subscribers, until the
        run ends (its result) or its process goes without an end (None, `gone` says)."""
        if self._control is None:
            await self.connect()
        poll = asyncio.get_running_loop().create_task(self._poll())
        try:
            while not await self._watch_once():
                pass
        except (Gone, NotLive, OSError) as exc:
            if self.state.finished is None:
                self.gone = str(exc)
        finally:
            poll.cancel()
            self.close()
        return result_of(self.state) if self.state.finished is not None else None

    async def _watch_once(self) -> bool:
        """Watch from the last event seen: True once the run has ended; False where the
        run dropped this watcher for falling behind (it is watched again from there)."""
        if self._watch is not None:
            self._watch.close()
        self._watch = await _Line.open(self.run_dir)
        await self._watch.send(CtlRequest(op="watch", from_seq=self.last_seq, client="attach"))
        while True:
            data = await self._watch.read()
            if isinstance(data.get("event"), dict):
                self._deliver(self._parse(data["event"]))
                continue
            reply = CtlReply.model_validate(data)
            if reply.ended:
                return True
            if reply.message.startswith("dropped:"):
                return False
            if not reply.ok:
                raise Gone(reply.message)

    def _parse(self, data: dict[str, Any]) -> ev.Event:
        try:
            event = ev.EVENT_ADAPTER.validate_python(data)
        except ValidationError:  # a type this mlra does not know: the log's own reader says
            event = parse_event(json.dumps(data))
        try:
            return self._resolve(event)
        except Unresolved:
            return event  # sent whole by the run: nothing to fill in

    def _deliver(self, event: ev.Event) -> None:
        if event.seq <= self.last_seq:
            return  # sent again after a watch was taken up again
        self.last_seq = event.seq
        self.state.apply(event)
        self.controls.learn(event)
        if isinstance(event, ev.Control) and event.action == "breakpoints" and event.arguments:
            rules = event.arguments.get("rules")
            if isinstance(rules, list):  # the rules as the run now holds them
                self.controls.breakpoints = [Breakpoint.parse(str(r)) for r in rules]
        if event.seq > self.backlog_upto:
            self.clock.set(event.t)  # live: the run's clock as of now
        for callback in self._subscribers:
            callback(event)

    async def _poll(self) -> None:
        """The run's status now and then: its clock, and who holds the controls (taken
        when nobody does)."""
        while True:
            await asyncio.sleep(STATUS_EVERY_S)
            try:
                async with self._lock:
                    if self._control is None:
                        return
                    reply = await self._control.ask(CtlRequest(op="status", client="attach"))
                    if reply.status is not None:
                        self._take_status(reply.status)
                    if (
                        not self.holding
                        and reply.status is not None
                        and reply.status.holder is None
                        and reply.status.state != "ended"
                    ):
                        await self._hold(quiet=True)
            except Gone:
                return

    def close(self) -> None:
        """Leave the run: its connections closed (the controls go back), the run goes on."""
        for line in (self._watch, self._control):
            if line is not None:
                line.close()
        self._watch = self._control = None
        if self.holding:
            self.holding = False

    # --- the user's controls ------------------------------------------------------------

    def send(self, req: CtlRequest) -> None:
        """Send a control; returns at once. The run records what it does (the console shows
        it from the event); a refusal is told in the run's words."""
        req = req.model_copy(update={"client": "attach"})
        task = asyncio.get_running_loop().create_task(self._send(req))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, req: CtlRequest) -> None:
        async with self._lock:
            if self._control is None:
                self.on_refused(self.gone or "the run is not attached any more")
                return
            try:
                if not self.holding and not await self._hold(quiet=False):
                    return
                reply = await self._control.ask(req)
            except Gone as exc:
                self.on_refused(f"the run did not answer: {exc}")
                return
            if reply.ok and req.op == "step":  # what the run's step did, as ctl says it
                self.on_told(reply.message)
            if not reply.ok:
                self.on_refused(reply.message)
                if reply.message.startswith("watching:"):
                    self.holding = False
                    self.on_holder()

    def pause(self) -> None:
        self.send(CtlRequest(op="pause"))

    def resume(self) -> None:
        self.send(CtlRequest(op="resume"))

    def step(self) -> str:
        """Sent: what the run's step did comes back in its answer (`on_told`)."""
        self.send(CtlRequest(op="step"))
        return "sent"

    def approve(self, call_id: str) -> bool:
        self.send(CtlRequest(op="approve", call_id=call_id))
        return True

    def edit(self, call_id: str, arguments: dict[str, Any]) -> bool:
        self.send(CtlRequest(op="edit", call_id=call_id, arguments=arguments))
        return True

    def reject(self, call_id: str, message: str = "") -> bool:
        self.send(CtlRequest(op="reject", call_id=call_id, text=message))
        return True

    def inject(self, target: str, text: str) -> None:
        self.send(CtlRequest(op="inject", target=target, text=text))

    def set_breakpoints(self, breakpoints: list[Breakpoint]) -> None:
        self.send(CtlRequest(op="breakpoints", rules=[b.rule for b in breakpoints]))

    def request_stop(self, *, evaluate: bool = True) -> None:
        self.send(CtlRequest(op="stop" if evaluate else "quit"))

    def stop_job(self, job: str) -> bool:
        self.send(CtlRequest(op="stop_job", target=job))
        return True

    def stop_attempt(self, attempt: str) -> bool:
        self.send(CtlRequest(op="attempt_stop", target=attempt))
        return True

    def promote_attempt(self, attempt: str) -> bool:
        self.send(CtlRequest(op="promote", target=attempt))
        return True
