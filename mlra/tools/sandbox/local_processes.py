"""A local sandbox's commands as processes: started, watched and killed whole.

Each command runs in a process group of its own; what it started is found through
/proc (its group, its descendants, and for unconfined commands the marker in their
environment, which survives `setsid`), so nothing it started outlives it: when it ends,
times out or is cancelled the whole group is killed with SIGKILL, again until none is
left. Apart from the sandbox (local.py), which decides how a command is confined, and
from the watcher that kills the marked processes if mlra dies (tether.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping

from mlra.tools.sandbox.base import ExecResult, OutputCallback, SandboxError
from mlra.tools.sandbox.output import OutputSink
from mlra.tools.sandbox.runner import RunningCommand, finish_despite_cancel, spawned
from mlra.tools.sandbox.time_out import TimeOut

GROUP_DEATH_WAIT_S = 5.0


class CommandProtocol(asyncio.SubprocessProtocol):
    """Passes each pipe's data on as it arrives and says when the process exited
    and when both pipes closed (a background process may hold them longer)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sink: OutputSink) -> None:
        self.sink = sink
        self.exited: asyncio.Future[None] = loop.create_future()
        self.pipes_closed: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd in self._open:
            self.sink.feed("stdout" if fd == 1 else "stderr", data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd in self._open:
            self._open.discard(fd)
            self.sink.feed("stdout" if fd == 1 else "stderr", b"", final=True)
            if not self._open and not self.pipes_closed.done():
                self.pipes_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


class RunningProcess(RunningCommand):
    """A command that has been started; its process group id is its pid (a new session)."""

    def __init__(
        self,
        transport: asyncio.SubprocessTransport,
        protocol: CommandProtocol,
        sink: OutputSink,
    ) -> None:
        super().__init__(sink, ended=protocol.exited, drained=protocol.pipes_closed)
        self.transport = transport
        self.protocol = protocol
        self.pgid = transport.get_pid()

    def _stop(self) -> None:
        # Under bubblewrap the command's processes are descendants, not members, of
        # the group (see kill); a second pass stops what forked during the first.
        self._signal_all(signal.SIGSTOP)
        self._signal_all(signal.SIGSTOP)

    def _continue(self) -> None:
        self._signal_all(signal.SIGCONT)

    def _signal_all(self, sig: signal.Signals) -> None:
        """Signal the process group and every descendant of its leader."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)
        for pid in _descendants(self.pgid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    async def kill(self) -> None:
        """SIGKILL the process group and every descendant, and wait until all are dead.

        Under bubblewrap the command runs in a new session inside its own pid
        namespace, so its processes are descendants of the group but not members:
        they are collected before the group dies (after, they would be orphans)
        and killed too. Grandchildren are not our children, so they cannot be
        reaped here; they are waited for until they are gone or zombies.
        """
        descendants: list[int] = []
        if not self.protocol.exited.done() or _group_alive(self.pgid):
            descendants = _descendants(self.pgid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)
            for pid in descendants:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        await asyncio.shield(self.protocol.exited)
        deadline = time.monotonic() + GROUP_DEATH_WAIT_S
        delay = 0.002
        while time.monotonic() < deadline and (
            _group_alive(self.pgid) or any(_running_pid(pid) for pid in descendants)
        ):
            # SIGKILL is delivered asynchronously and there is nothing to await for
            # processes that are not our children; poll briefly.
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)


async def _kill_made(
    made: tuple[asyncio.SubprocessTransport, CommandProtocol], sink: OutputSink
) -> None:
    """A command cancelled as it started (runner.spawned): its group killed, as a
    command cancelled later is."""
    transport, protocol = made
    try:
        await RunningProcess(transport, protocol, sink).kill()
    finally:
        transport.close()


def _proc_stats() -> Iterator[tuple[int, bytes, int, int]]:
    """(pid, state, parent pid, process group) of every process, from /proc/*/stat."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                yield int(entry), *fields


def _stat_fields(pid: int) -> tuple[bytes, int, int] | None:
    """(state, parent pid, process group) of one process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The fields after the command name (which may hold spaces and parentheses).
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 3:
        return None
    return fields[0], int(fields[1]), int(fields[2])


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False  # no process at all, not even a zombie: the usual case, and cheap
    except PermissionError:
        pass
    return any(group == pgid and state not in (b"Z", b"X") for _, state, _, group in _proc_stats())


def _descendants(root: int) -> list[int]:
    """Every process below `root` in the process tree, from one pass over /proc."""
    children: dict[int, list[int]] = {}
    for pid, _, parent, _ in _proc_stats():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _running_pid(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in (b"Z", b"X")


async def run_in_session(
    argv: list[str],
    running_set: set[RunningProcess],
    *,
    suspended: Callable[[], bool],
    timeout: float | TimeOut,
    cwd: str,
    env: Mapping[str, str],
    on_output: OutputCallback | None = None,
    stdin: bytes | None = None,
    preexec: Callable[[], None] | None = None,
) -> ExecResult:
    """Run `argv` in a new session (so in its own process group) and collect its output,
    held in `running_set` while it runs (`suspended`: whether the sandbox's commands are
    stopped now, read once the spawn returns, and this one then stopped too: its output
    may have come before that, and a pause it set off, made meanwhile, missed it).

    The protocol is asyncio's low-level one rather than `create_subprocess_exec`
    because `Process.wait()` only returns once the output pipes are closed, and
    a background process that inherited them would keep it waiting.
    """
    loop = asyncio.get_running_loop()
    sink = OutputSink(on_output)
    started = time.monotonic()
    spawning = loop.subprocess_exec(
        lambda: CommandProtocol(loop, sink),
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
        preexec_fn=preexec,
    )
    try:
        transport, protocol = await spawned(spawning, lambda made: _kill_made(made, sink))
    except FileNotFoundError:
        raise SandboxError(f"command not found: {argv[0]}") from None
    except (OSError, subprocess.SubprocessError) as exc:  # a failed preexec_fn
        raise SandboxError(f"cannot run {argv[0]}: {exc}") from None
    running = RunningProcess(transport, protocol, sink)
    running_set.add(running)
    if suspended():
        running.suspend()
    try:
        if stdin is not None:
            try:
                pipe = transport.get_pipe_transport(0)
                if isinstance(pipe, asyncio.WriteTransport):
                    pipe.write(stdin)
                    pipe.close()  # after the buffered data is written: the command sees EOF
            except BaseException:
                await finish_despite_cancel(running.kill())
                raise
        timed_out = await running.see_through(timeout, started)
    finally:
        transport.close()
        running_set.discard(running)
    return ExecResult(
        exit_code=transport.get_returncode(),
        output=sink.text(),
        duration_s=round(time.monotonic() - started, 3),
        timed_out=timed_out,
        killed=timed_out,
    )
