"""The control endpoint of a live run: `control.sock` in its run folder, where `mlra ctl`
and `mlra attach` (console/) steer a run they did not start in their own terminal.

The wire is mlra/control_socket.py: one JSON request a line, one reply a line. Every
control goes through the controller's own `Steering` methods, so it is recorded as the
same `control` event a console key makes, with the request's `client` as its `source`.

Who may connect is who owns the run folder: the socket is 0600 from the moment it
has a name in the folder (it is bound inside a private 0700 folder and renamed into
place), and each connection's peer user id (SO_PEERCRED) must be the server's own.
The sandbox never sees the run folder, so the agent cannot reach it either.

Nothing a client does may hold the run up: a request is handled between the run's own
steps on its event loop, and a watcher's events wait in a bounded queue of its own; a
watcher that falls that far behind is dropped with a message rather than let the run's
memory grow.

This module is the endpoint: the socket, its connections, who holds the controls, and
watching; what each request does to the run, and the status it answers, is
agent/control/control_ops.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mlra import events as ev
from mlra.agent.control.control_ops import Refused, act, ending_words, run_status
from mlra.agent.control.steering import Steering
from mlra.agent.record.eventlog import LogDamage, encode_event, iter_events
from mlra.control_socket import (
    SOCKET_NAME,
    CtlReply,
    CtlRequest,
    RunStatus,
    encode,
    peer_uid,
    short_address,
    socket_path,
)

MAX_LINE = 1 << 20
"""The longest request line read (an edit's arguments included)."""

WATCH_QUEUE = 10_000
"""Events one watcher may have waiting to be sent before it is dropped."""

PRIVATE_PREFIX = ".control-"
"""The private folder the socket is bound in before it is renamed into place."""

CLOSE_GRACE_S = 2.0
"""How long the ending run waits for its watchers to take their last lines."""

CONTROL_OPS = {
    "pause", "resume", "step", "approve", "reject", "edit", "inject", "breakpoints",
    "stop", "quit", "stop_job", "attempt_stop", "promote",
}  # fmt: skip
"""The ops that act on the run (an attached console that does not hold the controls
may not send them)."""


class _Connection:
    """One client: its replies and (when it watches) events go out through one queue, so
    the run only ever puts and never waits on a slow reader."""

    def __init__(self, number: int, writer: asyncio.StreamWriter) -> None:
        self.number = number
        self.writer = writer
        self.name = f"connection {number}"
        self.out: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.room = asyncio.Event()
        self.room.set()
        self.watching = False
        self.streaming = False
        """Its backlog is sent: new events go straight to its queue."""
        self.early: list[ev.Event] = []
        """Events appended while its backlog was being read (sent after it)."""
        self.sent_seq = 0
        self.subscriber: Callable[[ev.Event], None] | None = None
        self.closed = False
        self.sender = asyncio.get_running_loop().create_task(self._send())

    def send(self, message: CtlReply | bytes) -> None:
        if self.closed:
            return
        self.out.put_nowait(encode(message) if isinstance(message, CtlReply) else message)
        if self.out.qsize() >= WATCH_QUEUE // 2:
            self.room.clear()

    def send_event(self, event: ev.Event) -> None:
        """Send one event of the log, once (a `seq` already sent is skipped)."""
        if self.closed or event.seq <= self.sent_seq:
            return
        self.sent_seq = event.seq
        data = json.loads(encode_event(event))
        self.send(CtlReply(ok=True, event=data))

    def drop(self, message: str) -> None:
        """Stop sending: what is queued is dropped, `message` is the last line."""
        if self.closed:
            return
        while not self.out.empty():
            self.out.get_nowait()
        self.send(CtlReply(ok=False, message=message))
        self.finish()

    def finish(self) -> None:
        """Send what is queued, then close."""
        if not self.closed:
            self.out.put_nowait(None)
            self.closed = True

    async def _send(self) -> None:
        try:
            while True:
                data = await self.out.get()
                if self.out.qsize() < WATCH_QUEUE // 4:
                    self.room.set()
                if data is None:
                    break
                self.writer.write(data)
                await self.writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed = True
            self.room.set()
            self.writer.close()


class ControlServer:
    """Serves one live run's controls until the run ends."""

    def __init__(self, run: Steering) -> None:
        self.run = run
        self.run_dir = run.run_dir
        self.holder: str | None = None
        """Who holds the controls among attached consoles: a connection's name, or a
        console running this run in-process (it sets this itself, e.g. "console")."""
        self._holding: _Connection | None = None
        self._server: asyncio.AbstractServer | None = None
        self._inode: tuple[int, int] | None = None
        self._connections: dict[int, _Connection] = {}
        self._handlers: set[asyncio.Task[Any]] = set()
        self._numbers = 0

    @property
    def watchers(self) -> int:
        return sum(1 for c in self._connections.values() if c.watching and not c.closed)

    @property
    def path(self) -> Path:
        return socket_path(self.run_dir)

    # --- life ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the socket where no one else can reach it yet, then put it in place (a
        stale socket left by a killed run is replaced in the same step)."""
        for left in self.run_dir.glob(f"{PRIVATE_PREFIX}*"):  # a killed run's, mid-bind
            shutil.rmtree(left, ignore_errors=True)
        private = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX, dir=self.run_dir))  # 0700
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with short_address(private) as address:
                sock.bind(address)
            bound = private / SOCKET_NAME
            os.chmod(bound, 0o600)
            # Listening before it is in place: a client that finds the socket (`mlra
            # attach`, `ctl`) as the run starts is never refused as if it were stale.
            sock.listen(16)
            os.rename(bound, self.path)
            info = os.stat(self.path)
            self._inode = (info.st_dev, info.st_ino)
            sock.setblocking(False)
            self._server = await asyncio.start_unix_server(self._serve, sock=sock, limit=MAX_LINE)
        except BaseException:
            sock.close()
            self._remove_socket()
            raise
        finally:
            with contextlib.suppress(OSError):
                (private / SOCKET_NAME).unlink()
            with contextlib.suppress(OSError):
                private.rmdir()

    async def close(self) -> None:
        """The run has ended: watchers get `ended`, the socket file goes."""
        self._remove_socket()
        if self._server is not None:
            self._server.close()
        how = ending_words(self.run)
        for conn in list(self._connections.values()):
            if conn.watching:
                conn.send(CtlReply(ok=True, ended=True, message=how))
            conn.finish()
        senders = [c.sender for c in self._connections.values()]
        if senders:
            await asyncio.wait(senders, timeout=CLOSE_GRACE_S)
        for conn in list(self._connections.values()):
            conn.sender.cancel()
            conn.writer.close()
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=CLOSE_GRACE_S)
        self._server = None

    def _remove_socket(self) -> None:
        """Remove the socket file if it is still this server's (never another's)."""
        if self._inode is None:
            return
        with contextlib.suppress(OSError):
            info = os.stat(self.path)
            if (info.st_dev, info.st_ino) == self._inode:
                self.path.unlink()
        self._inode = None

    # --- connections --------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            if _peer_uid(writer) != os.geteuid():
                writer.write(
                    encode(CtlReply(ok=False, message="refused: this run is not yours to steer"))
                )
                with contextlib.suppress(ConnectionError, OSError):
                    await writer.drain()
                writer.close()
                return
            self._numbers += 1
            conn = _Connection(self._numbers, writer)
            self._connections[conn.number] = conn
            try:
                await self._converse(conn, reader)
            finally:
                self._forget(conn)
        finally:
            if task is not None:
                self._handlers.discard(task)

    async def _converse(self, conn: _Connection, reader: asyncio.StreamReader) -> None:
        while not conn.closed:
            try:
                line = await reader.readline()
            except (ValueError, asyncio.LimitOverrunError):
                conn.drop(f"refused: a request longer than {MAX_LINE} bytes")
                return
            except (ConnectionError, OSError):
                return
            if not line:
                return
            if not line.strip():
                continue
            try:
                reply = await self._answer(conn, line)
            except Refused as exc:
                reply = CtlReply(ok=False, message=str(exc))
            except Exception as exc:  # a bug here must never end the run
                reply = CtlReply(ok=False, message=f"refused: internal error: {exc!r}")
            if reply is not None:
                conn.send(reply)

    def _forget(self, conn: _Connection) -> None:
        self._stop_watching(conn)
        if self._holding is conn:
            self._holding = None
            self.holder = None
        conn.finish()
        self._connections.pop(conn.number, None)

    # --- requests -----------------------------------------------------------------------

    async def _answer(self, conn: _Connection, line: bytes) -> CtlReply | None:
        try:
            req = CtlRequest.model_validate_json(line)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"])
            raise Refused(
                f"refused: not a request: {error['msg']}" + (f" ({where})" if where else "")
            ) from None
        if req.op == "status":
            status = self.status()
            return CtlReply(ok=True, status=status, message=status.state)
        if req.op == "watch":
            await self._watch(conn, req.from_seq)
            return None
        if req.op == "hold":
            return self._hold(conn, req)
        if req.op == "release":
            return self._release(conn)
        self._check_may_act(conn, req)
        with self.run.acting_as(req.client):
            message = act(self.run, req)
        return CtlReply(ok=True, message=message)

    def _check_may_act(self, conn: _Connection, req: CtlRequest) -> None:
        finished = self.run.state.finished
        if finished is not None:
            raise Refused(f"refused: {ending_words(self.run)}")
        if self.run.log is None or self.run.log.last_seq == 0:
            # A control is an event, and no event may come before the run's `run_started`
            # (its sandbox and task environment are still being made).
            raise Refused("refused: the run is still starting; try again once it runs")
        if self.run.stop_requested:
            raise Refused("refused: the run is ending (a stop was asked for)")
        if req.client == "attach" and self._holding is not conn:
            if self.holder is None:
                raise Refused("watching: nobody holds the controls (hold them first)")
            raise Refused(f"watching: {self.holder} holds the controls")

    def _hold(self, conn: _Connection, req: CtlRequest) -> CtlReply:
        if self._holding is conn:
            return CtlReply(ok=True, message=f"{conn.name} holds the controls")
        if self.holder is not None:
            return CtlReply(ok=False, message=f"watching: {self.holder} holds the controls")
        conn.name = (req.text or "").strip()[:80] or f"{req.client} {conn.number}"
        self._holding, self.holder = conn, conn.name
        return CtlReply(ok=True, message=f"{conn.name} holds the controls")

    def _release(self, conn: _Connection) -> CtlReply:
        if self._holding is not conn:
            return CtlReply(ok=False, message="refused: this connection does not hold the controls")
        self._holding, self.holder = None, None
        return CtlReply(ok=True, message="controls released")

    # --- watching -----------------------------------------------------------------------

    async def _watch(self, conn: _Connection, from_seq: int) -> None:
        """Every event past `from_seq`: those on disk from the file, then each as it is
        appended; no gap between the two and no event twice (by `seq`)."""
        log = self.run.log
        if conn.watching:
            raise Refused("refused: this connection watches already")
        if log is None:
            raise Refused("refused: the run has no log yet")
        conn.watching, conn.sent_seq = True, max(0, from_seq)
        conn.subscriber = self._subscriber(conn)
        log.subscribe(conn.subscriber)
        upto = log.last_seq  # everything up to here is whole on disk; later ones come live
        if conn.sent_seq < upto:
            try:
                backlog = await asyncio.to_thread(_read_backlog, log.path, conn.sent_seq, upto)
            except (OSError, LogDamage) as exc:
                self._stop_watching(conn)
                raise Refused(f"refused: cannot read the run's log: {exc}") from None
            for event in backlog:
                conn.send_event(event)
                if not conn.room.is_set():
                    await conn.room.wait()
                if conn.closed:
                    return
        early, conn.early = conn.early, []
        for event in early:
            conn.send_event(event)
        conn.streaming = True

    def _subscriber(self, conn: _Connection) -> Callable[[ev.Event], None]:
        def on_event(event: ev.Event) -> None:
            """Called inside the run's `append`: it must never raise, nor wait."""
            if conn.closed:
                return
            try:
                if not conn.streaming:
                    conn.early.append(event)
                    if len(conn.early) <= WATCH_QUEUE:
                        return
                elif conn.out.qsize() < WATCH_QUEUE:
                    conn.send_event(event)
                    return
                why = f"this watcher fell {WATCH_QUEUE} events behind the run"
            except Exception as exc:  # a watcher's trouble is never the run's
                why = f"event {event.seq} could not be sent: {exc!r}"
            self._stop_watching(conn)
            conn.drop(f"dropped: {why}; watch again from seq {conn.sent_seq}")

        return on_event

    def _stop_watching(self, conn: _Connection) -> None:
        if conn.subscriber is not None and self.run.log is not None:
            self.run.log.unsubscribe(conn.subscriber)
        conn.subscriber = None
        conn.early = []

    # --- status -------------------------------------------------------------------------

    def status(self) -> RunStatus:
        return run_status(self.run, self.holder, self.watchers)


def _read_backlog(path: Path, after: int, upto: int) -> list[ev.Event]:
    return [e for e in iter_events(path) if after < e.seq <= upto]


def _peer_uid(writer: asyncio.StreamWriter) -> int | None:
    """The connection's peer's user id, or None where the transport cannot say."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    try:
        return peer_uid(sock)
    except OSError:
        return None
