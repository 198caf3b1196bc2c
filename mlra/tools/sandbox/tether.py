"""An unconfined sandbox's processes die with the mlra process that owns them.

Under bubblewrap the kernel ends a command when mlra dies (`--die-with-parent`). An
unconfined command (isolation "none") has nothing like it: its processes are found by
the marker in their environment (which survives `setsid`) and killed when the sandbox
closes, but a mlra killed outright (SIGKILL, the OOM killer, a crashed terminal) never
closes it, and they would run on for ever, holding the GPU. So the sandbox's start
spawns a watcher, this file run as a script, which holds the read end of a pipe whose
write end only mlra holds (close-on-exec, so no command inherits it). When mlra dies,
however, the kernel closes the write end; the watcher reads EOF (or sees mlra's pidfd
turn readable, for a fork of mlra that kept the pipe open), kills every process that
carries the marker, and those left in the sandbox's cgroups, then exits. A normal close
writes a random token first (sent down the pipe at the spawn, before any command ran;
other bytes do nothing): the watcher exits without killing anything. Once armed it
writes one byte on its stdout, which the start waits for: a watcher that cannot run
makes the start say the sandbox is untethered, and the run goes on. Its environment
is PATH alone (none of mlra's keys).

The watcher is in a session of its own (a Ctrl-C's SIGINT to the terminal's group never
reaches it), does not carry the marker itself (nor an outer sandbox's, where mlra runs
inside one: the outer's cleanup kills this mlra, and the watcher must live on to kill
what this mlra started), and imports only the standard library, so it starts fast.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

MARKER_VAR = "MLRA_SANDBOX"
"""Set in every unconfined command's environment, so the processes a run left
behind can be found (and killed) even after they left its process group."""
KILL_WAIT_S = 5.0
RELEASE_WAIT_S = 5.0
READY_WAIT_S = 10.0
READY = b"k"
"""What the watcher writes once armed (on its stdout, a pipe mlra reads at the start)."""
TOKEN_BYTES = 32
"""A normal close writes the token (random, first sent down the pipe): the sandbox
cleaned up after itself."""
WATCHER_SCRIPT = __file__
KILLED = 3
"""The watcher's exit status where mlra died and it killed what the sandbox left."""


def marker_chain(marker: str) -> str:
    """The marker's value in a command's environment: after those of the sandboxes this
    mlra runs in, so an outer sandbox's cleanup (or watcher) finds a nested mlra's
    commands too, and no nested one's cleanup finds the outer's."""
    outer = os.environ.get(MARKER_VAR)
    return f"{outer}:{marker}" if outer else marker


def kill_marked(marker: str) -> None:
    """SIGKILL every process whose environment carries this sandbox's marker (itself or
    in a nested sandbox's chain), again until none is left (one may fork between the
    scan and the kill)."""
    if not marker:  # would match an empty marker, or any chain with "::"
        return
    prefix = f"{MARKER_VAR}=".encode()
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline:
        found = False
        for pid in _live_pids():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                continue
            if any(
                marker.encode() in entry[len(prefix) :].split(b":")
                for entry in environ.split(b"\0")
                if entry.startswith(prefix)
            ):
                found = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if not found:
            return
        time.sleep(0.005)


def _live_pids() -> list[int]:
    """Every process but this one and zombies, from /proc."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X"):
                found.append(int(entry))
    return found


def kill_groups(groups: list[str]) -> None:
    """SIGKILL what is left in the sandbox's cgroups (a process that cleared its
    environment escapes the marker, not the group)."""
    deadline = time.monotonic() + KILL_WAIT_S
    for group in map(Path, groups):
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                (group / "cgroup.kill").write_text("1")
            try:
                pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                break
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)


class Tether:
    """The owning side: the pipe's write end, the token and the watcher process."""

    def __init__(self, process: subprocess.Popen[bytes], write_end: int, token: bytes) -> None:
        self.process = process
        self._write_end: int | None = write_end
        self._token = token

    @classmethod
    async def start(cls, marker: str, groups: list[Path]) -> tuple[Tether | None, list[str]]:
        """The watcher, armed; or none and the notice why: a watcher that cannot start
        (no process left to fork, an install whose script cannot run) does not fail the
        run, which must know it is untethered, though."""
        import asyncio  # here: the watcher, this file as a script, starts without it

        return await asyncio.to_thread(cls._spawn, marker, groups)

    @classmethod
    def _spawn(cls, marker: str, groups: list[Path]) -> tuple[Tether | None, list[str]]:
        token = secrets.token_hex(16).encode()
        read_end, write_end = os.pipe()  # both close-on-exec: no command inherits them
        ready_read, ready_write = os.pipe()
        argv = [sys.executable, "-I", "-S", WATCHER_SCRIPT, marker, str(os.getpid())]
        try:
            os.write(write_end, token)  # first, before any agent exists: its argv is public
            process = subprocess.Popen(
                [*argv, *map(str, groups)],
                stdin=read_end,
                stdout=ready_write,
                stderr=subprocess.PIPE,
                env={"PATH": os.environ.get("PATH", os.defpath)},  # no key of mlra's
                cwd="/",
                start_new_session=True,
            )
        except BaseException as exc:  # EAGAIN, EMFILE: as good as a watcher that died
            for fd in (write_end, ready_read):
                os.close(fd)
            if not isinstance(exc, OSError):
                raise
            return None, [_untethered(f"it could not be spawned: {exc}")]
        finally:
            os.close(read_end)
            os.close(ready_write)
        problem = _armed(process, ready_read)
        if problem is None:
            return cls(process, write_end, token), []
        os.close(write_end)
        return None, [_untethered(problem)]

    def release(self, *, clean: bool = True) -> None:
        """The sandbox closed: the watcher exits without killing anything, or, where
        the close failed (`clean` false), kills what the sandbox left, as if mlra died."""
        if self._write_end is not None:
            with contextlib.suppress(OSError):
                if clean:
                    os.write(self._write_end, self._token)
            os.close(self._write_end)
            self._write_end = None
        try:
            self.process.wait(RELEASE_WAIT_S if clean else 2 * KILL_WAIT_S + RELEASE_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _untethered(why: str) -> str:
    return (
        "processes of this unconfined sandbox may outlive mlra if it is killed: "
        f"the tether did not start ({why})"
    )


def _armed(process: subprocess.Popen[bytes], ready_read: int) -> str | None:
    """None once the watcher says it is armed; else why it is not (it is ended)."""
    assert process.stderr is not None
    with process.stderr, os.fdopen(ready_read, "rb", buffering=0) as ready:
        answered, _, _ = select.select([ready], [], [], READY_WAIT_S)
        if answered and ready.read(1) == READY:
            return None
        try:
            status = process.wait(READY_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return f"the watcher did not answer within {READY_WAIT_S:g} s"
        said = process.stderr.read().decode(errors="replace").strip().splitlines()
    return f"the watcher exited with status {status}" + (f": {said[-1]}" if said else "")


def watch(marker: str, owner: int, groups: list[str]) -> int:
    """Wait until the owner releases the sandbox (0) or dies; where it died, kill what
    the sandbox started (KILLED). Bytes other than the token (the pipe reopened through
    /proc by a process of the same user) release nothing, nor kill while mlra lives."""
    token = b""
    while len(token) < TOKEN_BYTES:
        chunk = os.read(0, TOKEN_BYTES - len(token))
        if not chunk:  # mlra died before it was armed
            return _kill(marker, groups)
        token += chunk
    waits = [0]  # the pipe, as stdin
    with contextlib.suppress(OSError, AttributeError):  # Linux 5.3 and later; gone: EOF
        waits.append(os.pidfd_open(owner))
    os.write(1, READY)
    os.close(1)
    seen = b""
    while True:
        ready, _, _ = select.select(waits, [], [])
        if 0 not in ready:  # mlra is gone
            break
        chunk = os.read(0, 4096)
        if not chunk:  # EOF: mlra is gone, or a failed close let the watcher loose
            break
        if token in seen + chunk:
            return 0
        seen = (seen + chunk)[-TOKEN_BYTES:]
    return _kill(marker, groups)


def _kill(marker: str, groups: list[str]) -> int:
    kill_marked(marker)
    kill_groups(groups)
    return KILLED


if __name__ == "__main__":
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(watch(sys.argv[1], int(sys.argv[2]), sys.argv[3:]))
