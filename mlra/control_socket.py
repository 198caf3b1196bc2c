"""The wire between a live run and whoever steers it from outside its process.

A live run (headless, in the console, in a batch) serves a Unix socket in its run
folder (`control.sock`, mode 0600; the server in agent/control/control_server.py) that
`mlra ctl` and `mlra attach` (console/) speak to. Both ends live in separate
layers, so the messages they exchange live here, below both, as typed models:
one JSON object a line each way.

The socket is a file of the run folder so that who may steer a run is who may
read its folder: the folder's owner. Its mode and the server's check of the peer's
user id keep other users out; the sandbox never sees the run folder, so the agent
cannot reach it either.

A run folder's path can be longer than a socket address may be (108 bytes), so
both ends name the socket through a descriptor of the folder
(`/proc/self/fd/N/control.sock`), whatever the folder's depth.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SOCKET_NAME = "control.sock"

CtlOp = Literal[
    "status",
    "pause",
    "resume",
    "step",
    "approve",
    "reject",
    "edit",
    "inject",
    "breakpoints",
    "stop",
    "quit",
    "stop_job",
    "attempt_stop",
    "promote",
    "watch",
    "hold",
    "release",
]
"""`watch` streams the run's events (every one from `from_seq` on, then each as it is
appended) on the connection until the run ends; `hold` asks for the controls of an
attached console (one connection holds them at a time) and `release` gives them back.
The rest are the console's controls, recorded as the same `control` events."""


class CtlRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: CtlOp
    call_id: str | None = None
    """approve / reject / edit: the waiting call (the only one waiting when None)."""
    text: str | None = None
    """inject: the message; reject: why (the worker reads it)."""
    target: str | None = None
    """inject: worker (default), supervisor, or `attempt:ID` (that running attempt's
    worker); stop_job: the job; attempt_stop / promote: the attempt."""
    arguments: dict[str, Any] | None = None
    """edit: the call's new arguments."""
    rules: list[str] | None = None
    """breakpoints: the new rules (`bash:rm -rf`, `*`), replacing the old."""
    from_seq: int = 0
    """watch: events with a greater `seq` are sent."""
    client: str = "ctl"
    """Who asks: `ctl` (a one-off command) or `attach` (a console attached); recorded as
    the `source` of the control event it causes."""


class PendingCall(BaseModel):
    call_id: str
    tool: str
    agent: str = "worker"
    arguments: dict[str, Any] = Field(default_factory=dict)


class RunStatus(BaseModel):
    """What `mlra ctl RUN status` shows and an attached console starts from."""

    run_id: str
    task: str
    model: str = ""
    pid: int
    state: Literal["starting", "running", "paused", "waiting", "evaluating", "ended"]
    """waiting: a call waits for approval."""
    paused: bool = False
    """The user's pause holds the run (a waiting run too: then resume or step, not only
    approve, lets the call run)."""
    elapsed_s: float = 0.0
    time_limit_s: float | None = None
    steps: int = 0
    events: int = 0
    pending: list[PendingCall] = Field(default_factory=list)
    held: list[PendingCall] = Field(default_factory=list)
    """Calls a pause holds before they began (a step's next call, one the model wrote
    meanwhile): what `step` or `resume` runs next."""
    running_jobs: list[str] = Field(default_factory=list)
    running_attempts: list[str] = Field(default_factory=list)
    best_validation: float | None = None
    breakpoints: list[str] = Field(default_factory=list)
    tools: dict[str, list[str]] = Field(default_factory=dict)
    """Each agent's tool names (agent/agents/tool_lists.py): what a breakpoint may name,
    so an attached console refuses a misspelt rule in its dialog, as the run would."""
    hold_at_breaks: bool = True
    holder: str | None = None
    """The attached console that holds the controls, if one does."""
    watchers: int = 0
    score: float | None = None
    """Once graded."""


class CtlReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    message: str = ""
    """One line: what was done, or why it was refused."""
    status: RunStatus | None = None
    event: dict[str, Any] | None = None
    """watch: one event of the log, whole (the text and arguments the log stores once
    filled back in, as `mlra replay --json` prints it): `parse_event` reads it. A watching
    connection may still send requests; their replies (no `event`) come between the
    events, in the order asked."""
    ended: bool = False
    """watch: the run has ended; nothing follows. A watcher that fell too far behind gets
    instead `ok=False`, a message starting "dropped:", and the connection closes: it may
    watch again from the last `seq` it got."""


class NotLive(Exception):
    """No live run serves this folder (it ended, was killed, or never started here)."""


def socket_path(run_dir: Path) -> Path:
    return run_dir / SOCKET_NAME


@contextlib.contextmanager
def short_address(run_dir: Path) -> Iterator[str]:
    """The socket's address through a descriptor of its folder: short whatever the
    folder's depth. Valid inside the `with` only."""
    fd = os.open(run_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{SOCKET_NAME}"
    finally:
        os.close(fd)


def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


def encode(message: BaseModel) -> bytes:
    return message.model_dump_json(exclude_none=True).encode() + b"\n"


def connect(run_dir: Path, timeout: float = 5.0) -> socket.socket:
    """A connected socket to the run's server, or NotLive saying why not."""
    if not socket_path(run_dir).exists():
        raise NotLive(f"{run_dir} is not running (no {SOCKET_NAME})")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with short_address(run_dir) as address:
            sock.connect(address)
    except (ConnectionRefusedError, FileNotFoundError) as exc:
        sock.close()
        raise NotLive(f"{run_dir} is not running (its {SOCKET_NAME} is stale)") from exc
    except PermissionError as exc:
        sock.close()
        raise PermissionError(f"{run_dir}: its control socket is not yours to reach") from exc
    except OSError:
        sock.close()
        raise
    return sock


def request(run_dir: Path, req: CtlRequest, timeout: float = 10.0) -> CtlReply:
    """One request, one reply (not for `watch`)."""
    with connect(run_dir, timeout) as sock:
        sock.sendall(encode(req))
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    if not data.strip():
        raise NotLive(f"{run_dir}: the run ended before it answered")
    return CtlReply.model_validate(json.loads(data))


def is_live(run_dir: Path) -> bool:
    """Whether a live run serves this folder now (a stale socket is not live)."""
    try:
        with connect(run_dir, timeout=1.0):
            return True
    except (NotLive, OSError):
        return False
