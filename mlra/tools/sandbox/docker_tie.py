"""A Docker sandbox's container ends when the mlra process that owns it dies.

Under bubblewrap the kernel ends a command when mlra dies (`--die-with-parent`), and an
unconfined sandbox has its watcher (tether.py); a container had neither: a mlra killed
outright (SIGKILL, the OOM killer, a closed terminal) left it running, holding its GPUs,
CPUs and memory, until the next mlra's start removed it (docker_preflight.py), which in
an unattended batch may be hours later.

So the container's main process (under its init, PID 1) reads its stdin until EOF and
exits, which ends the container (the kernel kills every process of its pid namespace).
The container is made with its stdin open and StdinOnce ("close stdin after the attached
client disconnects"), and mlra holds an attach to that stdin, a socket no child inherits
(close-on-exec), for the container's life; it writes nothing to it. When mlra dies the
kernel closes the socket, the engine closes the container's stdin, the main process
reads EOF. Nothing polls: the kernel and the engine do it. Checked against the engine
(20.10); the watcher was the fallback, had the engine kept stdin open.

The container's init and main process (the keeper) run as a uid of their own, not the
commands': a command of the same uid could open the main process's stdin through
/proc/PID/fd/0 for writing and so hold the pipe open past mlra's death; a process of
another uid (with no capabilities, as every command has none) cannot, nor signal it.
As root, mlra claims the keeper a second uid no account has (run_uid.py), given back
with the commands' once the container is removed: KEEPER_UID, the host's `nobody`,
would let any host process running as nobody hold every mlra container up. Only where
no uid can be claimed (mlra is not root) is it KEEPER_UID. Commands run as the
sandbox's user as before: each exec names it.

The container stops, and is not removed: the next start removes it, with its stdin
folder and its workspace's volume (docker_preflight.py), as before. Where the attach
cannot be made the run goes on, untied, and says so once; an attach that is made but is
no plain socket of this process (an ssh:// engine's channel) is held all the same, as
the container ends once it is closed, and the run is told its container may outlive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import ssl
from typing import Any

from mlra.tools.sandbox import run_uid

KEEPER_UID = 65534
"""The keeper's uid where none can be claimed (mlra is not root), `nobody` on most
systems: no command's, unless the commands run as it too (a workspace owned by 65534),
when the run is told a command could hold the tie (`held_words`)."""
KEEPER = ["sh", "-c", "while read -r _; do :; done; exit 0"]
"""The container's main process: reads its stdin, which only mlra's attach holds, until
EOF (one shell, its `read` built in: the process a quota stop spares)."""
KEEPALIVE_S = 50.0
"""How often mlra writes a newline on the tie (which the keeper reads and ignores): a
proxy or tunnel on the way to a tcp:// engine that closes idle connections, often after
60 seconds, would otherwise close the tie, and so end the container under the run."""
KEEPALIVE_PROBES = {"TCP_KEEPIDLE": 30, "TCP_KEEPINTVL": 10, "TCP_KEEPCNT": 3}
"""The kernel's probes of a tcp:// tie: the first after 30 idle seconds, then every 10,
the peer taken for gone after 3 unanswered."""
ENDING_WAIT_S = 3.0
"""How long a command killed with no word why waits for its container's end to be seen
(`killed_note`)."""
TIED_ARGS: dict[str, Any] = {"stdin_open": True, "detach": False}
"""The container's settings for the tie: the docker client sets StdinOnce (with
OpenStdin) only for a container made with `detach` false; it is made, not attached."""


def untied_words(why: str) -> str:
    return (
        "this Docker sandbox's container may outlive mlra if it is killed (until the next "
        f"mlra start removes it): it could not be tied to mlra ({why})"
    )


def held_words(uid: int) -> str:
    return (
        "this Docker sandbox's container may outlive mlra if it is killed (until the next "
        f"mlra start removes it): its commands run as uid {uid}, the uid that ties it to "
        "mlra, so a command could hold the tie"
    )


def keeper_claim(commands: run_uid.UidClaim | None) -> run_uid.UidClaim | None:
    """A uid of the keeper's own where the commands got one (mlra is root), given back
    with theirs; None (KEEPER_UID) where none can be claimed."""
    if commands is None:
        return None
    try:
        return run_uid.claim()
    except OSError:
        return None


class Tie:
    """mlra's attach to its container's stdin: held while the container lives."""

    def __init__(self, handle: Any, sock: socket.socket | None) -> None:
        self._handle: Any = handle
        self._sock = sock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._released = False
        """Set first by `release` (a worker thread's, often): a ping on the loop that
        raced it schedules no other."""

    @classmethod
    def hold(cls, container: Any) -> tuple[Tie | None, str | None]:
        """The tie to a container made with TIED_ARGS, before it starts; or none and why."""
        try:
            handle = container.attach_socket(params={"stdin": 1, "stream": 1})
        except Exception as exc:
            from mlra.tools.sandbox.docker_preflight import short_error

            return None, untied_words(short_error(exc))
        # Held whatever it is, until `release`: dropped or closed, the engine closes the
        # container's stdin (StdinOnce) and the container ends under the run.
        sock = _socket_of(handle)
        if sock is None:
            return cls(handle, None), untied_words(
                "the engine's attach is not a socket of this process"
            )
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            _probe(sock)
        try:
            os.set_inheritable(sock.fileno(), False)  # so already; no command keeps it
        except OSError as exc:
            return cls(handle, sock), untied_words(str(exc))
        return cls(handle, sock), None

    def keep_alive(self, every: float | None = None) -> None:
        """Write a newline on the tie every `every` seconds (KEEPALIVE_S), from the running
        loop (no thread), till `release`; on a plain socket or a TLS one (an https engine,
        tcp:// with TLS), never blocking the loop (one not ready to take a byte skips its
        turn). An ssh:// engine's channel gets none."""
        if self._sock is None:
            return
        loop = asyncio.get_running_loop()
        every = KEEPALIVE_S if every is None else every

        def ping() -> None:
            sock = self._sock
            if sock is None or self._released:
                return
            try:
                _send_newline(sock)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                pass  # not ready to take a byte: its turn is skipped
            except (OSError, ValueError) as exc:
                if _closed(sock, exc):
                    return  # the container has ended, or is ending
            self._timer = timer = loop.call_later(every, ping)
            if self._released:  # since the check above: `release` may have missed it
                timer.cancel()

        self._loop, self._timer = loop, loop.call_later(every, ping)

    def release(self) -> None:
        """Let the container go (it stops: only once it is removed, or being removed)."""
        self._released = True
        handle, self._handle = self._handle, None
        sock, self._sock = self._sock, None
        timer, loop = self._timer, self._loop
        if timer is not None and loop is not None:  # called from a thread too
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(timer.cancel)
        if sock is not None:  # at once, whatever other reference the client keeps to it
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for closing in (handle, sock):
            if closing is not None:
                with contextlib.suppress(Exception):
                    closing.close()


def _probe(sock: socket.socket) -> None:
    """Have the kernel probe a tcp:// tie, so a vanished peer (a dropped route, a proxy
    gone) is seen within a minute or so: SO_KEEPALIVE alone first probes after two idle
    hours. Each setting where the system has it."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in KEEPALIVE_PROBES.items():
        option = getattr(socket, name, None)
        if option is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, option, value)


def _send_newline(sock: socket.socket) -> None:
    """One newline, without blocking. A TLS socket takes no MSG_DONTWAIT, so it is made
    non-blocking for the one send (nothing else uses it): a record only partly written
    is finished by the next turn's send, as OpenSSL asks, the same byte."""
    if not isinstance(sock, ssl.SSLSocket):
        sock.send(b"\n", socket.MSG_DONTWAIT)
        return
    timeout = sock.gettimeout()
    sock.settimeout(0.0)
    try:
        sock.send(b"\n")
    finally:
        sock.settimeout(timeout)


_CLOSED = {
    errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN, errno.ESHUTDOWN,
    errno.EBADF, errno.ETIMEDOUT,
}  # fmt: skip


def _closed(sock: socket.socket, exc: Exception) -> bool:
    """Whether a send failed because the tie is closed (its peer gone, the socket shut or
    closed), which ends the keepalive; any other failure only skips a turn."""
    if sock.fileno() == -1 or isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
        return True
    return isinstance(exc, OSError) and exc.errno in _CLOSED


def _socket_of(handle: Any) -> socket.socket | None:
    """The socket under the docker client's attach: itself, or a SocketIO's (unix
    sockets), or an npipe's (none: not on Linux)."""
    if isinstance(handle, socket.socket):
        return handle
    sock = getattr(handle, "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


TIE_CLOSED = (
    "its tie to mlra was closed while mlra ran (a `docker attach` that detached, an engine "
    "restart, or a proxy's or ssh tunnel's idle timeout?)"
)


def ended_words(container: Any, tied: bool) -> str | None:
    """Why a command cannot run: the container is no longer running. Where it was tied
    and its keeper exited 0 (it read its stdin's end: a `docker stop` or the OOM killer
    leaves another status), the tie was closed while mlra ran; OOMKilled is no sign
    against it: the engine keeps it set once any command was killed for memory. None
    where it runs."""
    try:
        container.reload()
        state = container.attrs.get("State") or {}
    except Exception:
        return None
    if state.get("Running"):
        return None
    if tied and state.get("ExitCode") == 0:
        return (
            f"the container has ended: {TIE_CLOSED}, so no command can run in it any more; "
            "see docs/security.md"
        )
    return f"the container has ended (exit status {state.get('ExitCode')})"


def killed_note(container: Any) -> str | None:
    """The note for a command killed as its tied container ended under it (the kernel
    ends every process of the container with its keeper), which was only an exit 137:
    the tie was closed. None where the container runs, or ended otherwise (blocking).
    The exec's end may come before the engine's word that the container ended, so that
    word is waited for, ENDING_WAIT_S at most (the container may well run on)."""
    with contextlib.suppress(Exception):  # still running after it, or the engine is gone
        container.wait(timeout=ENDING_WAIT_S, condition="not-running")
    words = ended_words(container, tied=True)
    if words is None or TIE_CLOSED not in words:
        return None
    return (
        f"[the container ended under this command, killing it: {TIE_CLOSED}; no command "
        "can run in it any more, see docs/security.md]"
    )
