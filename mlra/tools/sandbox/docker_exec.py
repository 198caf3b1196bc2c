"""One command in a Docker container, and the signals sent to commands' sessions.

Each command runs in its own session inside the container, under a small shell
wrapper that records the session's id in a file named by a token; a time-out, a
cancellation, a pause or the command's own end signals that whole process
group, as the local sandbox does with its process groups. A time-out or a
cancellation also kills every process that carries the command's marker in its
environment (`MLRA_COMMAND`, inherited by all it starts), as the local sandbox kills
a command's descendants: a daemon that left the session with `setsid` ran on past
the command's time-out. (One a command left when it ended by itself stays, as in the
local sandbox, till the run's end.) The engine's exec
stream is read in a thread (the docker client blocks) and handed to the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from mlra.tools.sandbox.base import SandboxError
from mlra.tools.sandbox.docker_preflight import short_error
from mlra.tools.sandbox.docker_stdin import StdinFolder
from mlra.tools.sandbox.docker_tie import ended_words, killed_note
from mlra.tools.sandbox.output import OutputSink
from mlra.tools.sandbox.runner import RunningCommand

CONTROL_DIR = "/tmp/.mlra"
"""Where the wrapper keeps each command's session id, inside the container."""
STDIN_DIR = "/run/mlra-stdin"
"""Where each command's stdin is, inside the container: a host folder mlra writes and
the container sees read-only (`docker cp` cannot write into /tmp, a tmpfs, nor into a
read-only root; tools/sandbox/docker_stdin.py keeps it from the host's other users)."""
KILL_WAIT_S = 5.0

_MARKED = r"""
marked() {
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = "$$" ] && continue
    tr '\0' '\n' < "$e" 2>/dev/null | grep -qxF "MLRA_COMMAND=$1" && echo "$p"
  done
}
signal_marked() {
  [ "$2" = KILL ] || return 0
  for _ in 1 2 3; do
    ps=$(marked "$1"); [ -n "$ps" ] || return 0
    kill -KILL $ps 2>/dev/null
  done
}
"""
"""The processes a command started, found by its marker (their environment survives
`setsid` and a new parent); killed again while any is left, as a fork may race a pass.
Kills only: a pause stops every process of the container already (docker_sandbox.py's
`_signal_all`), and the scan costs two processes for each of the container's."""

WRAPPER = r"""
d=/tmp/.mlra; t=$1; mb=$2; run=$3; shift 3
oom() {
  for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
    [ -r "$f" ] && while read -r k v; do [ "$k" = oom_kill ] && { echo "$v"; return; }; done < "$f"
  done
  echo 0
}
o=$(oom)
if [ -f "/run/mlra-stdin/$t.in" ]; then exec 3<"/run/mlra-stdin/$t.in"; else exec 3</dev/null; fi
MLRA_COMMAND="$t" setsid "$@" <&3 3<&- &
pid=$!
echo "$pid" > "$d/$t.pid"
exec 3<&-
wait "$pid"; rc=$?
kill -KILL -"$pid" 2>/dev/null
rm -f "$d/$t.pid"
if [ -n "$mb" ] && [ "$(oom)" -gt "$o" ]; then
  echo "[the sandbox's memory limit of $mb MB$run was exceeded: the kernel killed a process of this command]" >&2
fi
exit "$rc"
"""
"""Runs the command in a new session (an asynchronous list of a non-interactive
shell is not a group leader, so `setsid` needs no fork and `$!` is the session's
id), kills what it left behind once it ends, and says so when the container's
memory limit (`$2` MB, empty for none; `$3`: RUN_SHARED where the run's group holds it
too) killed a process meanwhile (the container's oom_kill count went up, also where the
run's limit was the one passed: the same words as the local sandbox's note)."""

MEMORY_NOTE = "was exceeded: the kernel killed a process of this command]"
"""The end of the wrapper's memory note (the one a command killed for memory gets)."""

RUN_SHARED = " (or the run's, shared by all its sandboxes)"
"""What the note adds under a run's group (tools/sandbox/docker_run_group.py), as the
local sandbox's does (tools/sandbox/limits.py)."""

_KILL = (
    _MARKED
    + r"""
f=/tmp/.mlra/$1.pid; i=0
while [ ! -s "$f" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
[ -s "$f" ] && kill -"$2" -"$(cat "$f")" 2>/dev/null
signal_marked "$1" "$2"
exit 0
"""
)


class SessionSignals:
    """Signals to commands' sessions, sent by a `docker exec` of a kill in the container.

    Sent in order in the background: a resume must not overtake its pause, and the
    caller (a pause key in the console) must not wait on the engine.
    """

    def __init__(self, container: Callable[[], Any], user: str) -> None:
        self._container = container
        self._user = user
        self._last: asyncio.Task[None] | None = None

    def send(self, token: str, sig: str) -> None:
        self.send_script(_KILL, token, sig)

    def send_script(self, script: str, *args: str) -> None:
        """Run a signalling shell script in the container, after those sent before."""
        previous = self._last

        async def send() -> None:
            if previous is not None:
                with contextlib.suppress(BaseException):
                    await previous
            await asyncio.to_thread(self._run, script, *args)

        self._last = asyncio.get_running_loop().create_task(send())

    def send_blocking(self, token: str, sig: str) -> None:
        self._run(_KILL, token, sig)

    def _run(self, script: str, *args: str) -> None:
        container = self._container()
        if container is None:
            return
        with contextlib.suppress(Exception):
            container.exec_run(["sh", "-c", script, "sh", *args], user=self._user)

    async def settle(self) -> None:
        """Wait until every signal sent so far has been delivered (or failed)."""
        if self._last is not None:
            with contextlib.suppress(BaseException):
                await self._last


class DockerExec(RunningCommand):
    """One command in the container: the exec, its output reader thread and its session."""

    def __init__(
        self,
        *,
        client: Any,
        container: Any,
        uid: int,
        gid: int,
        token: str,
        sink: OutputSink,
        signals: SessionSignals,
        stdin_folder: StdinFolder | None = None,
        tied: bool = False,
    ) -> None:
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        super().__init__(sink, ended=finished, drained=finished)
        self.client = client
        self.container = container
        self.uid, self.gid = uid, gid
        self.token = token
        self.stdin_folder = stdin_folder
        self.tied = tied
        """Whether mlra held the container's tie (docker_tie.py): its close ends it."""
        self.loop = loop
        self.signals = signals
        self.exec_id: str | None = None
        self.stream: Any = None
        self._killed = False
        self.failed = False

    def begin(self, argv: list[str], cwd: str, env: dict[str, str], stdin: bytes | None) -> None:
        """Create and start the exec (blocking; run in a thread) and start its reader."""
        try:
            if stdin is not None:
                self._write_stdin(stdin)
            self.exec_id = self.client.api.exec_create(
                self.container.id, argv, stdout=True, stderr=True, stdin=False, tty=False,
                environment=env, workdir=cwd, user=f"{self.uid}:{self.gid}",
            )["Id"]  # fmt: skip
            self.stream = self.client.api.exec_start(self.exec_id, stream=True, demux=True)
        except Exception as exc:
            self.failed = True
            ended = ended_words(self.container, self.tied) if "not running" in str(exc) else None
            raise SandboxError(
                f"cannot run the command in the container: {ended or short_error(exc)}"
            ) from None
        threading.Thread(target=self._read, name=f"docker-exec-{self.token}", daemon=True).start()

    def _write_stdin(self, stdin: bytes) -> None:
        """The command's stdin as a file the wrapper opens: an exec's own stdin would
        need a hijacked socket the reader thread cannot share."""
        if self.stdin_folder is None:
            raise SandboxError("this container takes no stdin")
        self.stdin_folder.write(f"{self.token}.in", stdin)

    def forget_stdin(self) -> None:
        if self.stdin_folder is not None:
            self.stdin_folder.forget(f"{self.token}.in")

    def _read(self) -> None:
        try:
            for out, err in self.stream:
                if out:
                    self.loop.call_soon_threadsafe(self.sink.feed, "stdout", out)
                if err:
                    self.loop.call_soon_threadsafe(self.sink.feed, "stderr", err)
        except Exception:
            pass  # the stream was closed under us (abandon) or the engine went away
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self.loop.call_soon_threadsafe(self._done)

    def _done(self) -> None:
        self.sink.close()
        if not self.ended.done():
            self.ended.set_result(None)

    def exit_code(self) -> int | None:
        """The exec's exit status (blocking), None if it is unknown or still running."""
        if self.exec_id is None:
            return None
        try:
            info = self.client.api.exec_inspect(self.exec_id)
        except Exception:
            return None
        return None if info.get("Running") else info.get("ExitCode")

    def tie_note(self, exit_code: int | None, output: str) -> str | None:
        """Where the command was SIGKILLed (or its status is unknown), neither by mlra
        nor for memory, and its tied container has ended, its tie closed: the note
        saying so (blocking)."""
        if not self.tied or self._killed or exit_code not in (None, 137):
            return None
        if MEMORY_NOTE in output:  # the container runs on: no wait for its end
            return None
        return killed_note(self.container)

    def _stop(self) -> None:
        # Not `docker pause`: an exec that starts while the container is frozen hangs
        # the engine (runc waits on the frozen cgroup), and one may be starting now.
        self.signals.send(self.token, "STOP")

    def _continue(self) -> None:
        self.signals.send(self.token, "CONT")

    async def kill_once_begun(self, begun: asyncio.Future[None]) -> None:
        """Kill the command once its `begin` (in a thread, bounded by the client's
        request time-out) has ended. Killed while the thread still created or started the
        exec, on an engine slower than the kill script's wait for the session's id, the
        kill found no session, and the exec, started after it, ran to its end."""
        with contextlib.suppress(Exception):  # it failed: the caller says why
            await asyncio.shield(begun)
        await self.kill()

    async def kill(self) -> None:
        """SIGKILL the command's session inside the container and wait for the exec's end."""
        # Also before the exec is known (a close's kill of every running command): it
        # may be starting in a thread right now, and the kill script waits a moment for
        # its session id.
        if self._killed or self.failed or self.ended.done():
            return
        self._killed = True
        await asyncio.to_thread(self.signals.send_blocking, self.token, "KILL")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.ended), KILL_WAIT_S)

    def abandon(self) -> None:
        """Stop reading (the reader thread ends when its socket is shut)."""
        if self.stream is not None:
            with contextlib.suppress(Exception):
                self.stream.close()
