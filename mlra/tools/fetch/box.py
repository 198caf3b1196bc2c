"""A sandbox of its own for every step mlra takes outside the agent's sandbox for it.

Cloning, downloading, parsing a feed, extracting a PDF's text and summarizing a clone
all handle what the agent chose (a URL, a repository, a file in its workspace), so
none of them runs as mlra: each runs in bubblewrap as an unprivileged uid with no
capabilities (as root, a host uid claimed for the step, run_uid.py: a hostile
repository's hooks take that uid's inotify instances and processes, not root's, and
read no root-only file of what the box shows), seeing the OS read-only, one folder of its own read-write (a staging
folder in the run folder, never the workspace, never another run) and nothing else of
the host: no home folder, no project checkout, no task files, no sockets. Its
environment is built from nothing (no API keys, no proxies, no git or ssh config), its
memory and file sizes are bounded, and it is killed with everything it started on a
time-out, on a size cap and when the run stops. It shares the host's network (git and
HTTPS need it), which is why what it connects to is decided beforehand by the policy
(policy.py) and pinned to a checked address; the runner inside follows no redirect.

Where no bubblewrap works the step runs unconfined only if the run itself is
unconfined (`--isolation none`), with the same policy, environment and limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlra.tools.sandbox import bwrap as bw
from mlra.tools.sandbox import run_uid
from mlra.tools.sandbox.base import SandboxError
from mlra.tools.sandbox.env import shown_interpreter
from mlra.tools.sandbox.local_steps import BECOME_WAIT_S
from mlra.tools.sandbox.runner import finish_despite_cancel, spawned
from mlra.tools.sandbox.start_step import made_or_undone

if TYPE_CHECKING:
    from mlra.tools.registry import ToolContext

RUNNER = Path(__file__).resolve().parent / "runner.py"
STDOUT_LIMIT = 2 * 1024 * 1024
"""The most of a step's answer read back (a clone's summary, a page range's text)."""
STDERR_LIMIT = 64 * 1024
MEMORY_MB = 2048
"""Per process (RLIMIT_DATA): git's packing and pypdf on a 100 MB PDF stay well under it."""
TMPFS_MB = 64
"""/tmp and /dev/shm (RAM) where bubblewrap can size them: a step writes to its folder."""
WATCH_INTERVAL_S = 0.2
KILL_WAIT_S = 5.0


def root_outside_of(ctx: ToolContext, what: str) -> Callable[[str], object] | None:
    """A fetch box's `on_root_outside` for a tool call: the run is told once."""
    said = ctx.root_outside
    return None if said is None else functools.partial(said, what)


class FetchUnconfined(SandboxError):
    """No bubblewrap works here and the run is confined: the step is refused."""


@dataclass
class BoxResult:
    exit_code: int | None
    stdout: bytes
    stderr: str
    timed_out: bool = False
    stopped: str | None = None
    """Why a watcher stopped it (a size cap), if one did."""


@functools.lru_cache(maxsize=4)
def _bwrap_problem(binary: str) -> str | None:
    with tempfile.TemporaryDirectory(prefix="mlra-fetch-probe-") as tmp:
        argv = bw.bwrap_argv(
            binary,
            workspace=Path(tmp),
            inside_cwd=bw.INSIDE_WORKDIR,
            command=["true"],
            network=True,
            gpus="none",
        )
        return bw.probe(argv)


_ROOT_OUTSIDE: dict[str, str | None] = {}
"""Why bubblewrap (by binary) cannot start as a claimed uid here, None where it can: a
host's setting, learnt by the first step that claims one (FetchBox._claim)."""


def confinement(allow_unconfined: bool) -> str | None:
    """The bubblewrap binary fetch steps run in, or None to run them unconfined (only
    where `allow_unconfined`); FetchUnconfined where neither may be."""
    binary = bw.find_bwrap()
    problem = "bubblewrap (bwrap) was not found" if binary is None else _bwrap_problem(binary)
    if problem is None:
        return binary
    if allow_unconfined:
        return None
    raise FetchUnconfined(
        f"mlra runs what it fetches for the agent in a sandbox of its own, and none can be had "
        f"here ({problem}); install bubblewrap, or run with --isolation none"
    )


def box_env(home: str) -> dict[str, str]:
    """Built from nothing: no keys, no proxies, no git or ssh configuration of the host."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        "GCM_INTERACTIVE": "never",
    }


class FetchBox:
    """Runs fetch steps confined, each seeing `folder` (read-write) and nothing else."""

    def __init__(
        self,
        folder: Path,
        *,
        bwrap: str | None,
        hide: Sequence[Path] = (),
        read_only: Sequence[Path] = (),
        file_limit_bytes: int | None = None,
        on_root_outside: Callable[[str], object] | None = None,
    ) -> None:
        """`bwrap` from `confinement()`; None runs unconfined. `hide`: host paths masked
        even where the OS's or Python's folders would show them (hidden task files).
        `on_root_outside` is told why, each time a step runs as root outside (the run
        says it once: agent/loop/root_outside.py)."""
        self.folder = folder.resolve()
        self.bwrap = bwrap
        self.hide = list(hide)
        self.read_only = [p for p in [RUNNER, *read_only] if p.exists()]
        self.file_limit_bytes = file_limit_bytes
        self.on_root_outside = on_root_outside
        self.root_outside: str | None = None
        """Why the last step ran as root outside (FetchBox._claim), or None."""
        self._prlimit = shutil.which("prlimit", path="/usr/bin:/bin")

    @property
    def inside(self) -> str:
        """The folder as the step sees it."""
        return bw.INSIDE_WORKDIR if self.bwrap is not None else str(self.folder)

    def runner(self, *args: str) -> list[str]:
        """The command line of the runner (runner.py) doing one step."""
        return [shown_interpreter(), "-I", str(RUNNER), *args]

    def _rlimits(self) -> list[str]:
        limits = [f"--data={MEMORY_MB * 1024 * 1024}", "--core=0"]
        if self.file_limit_bytes is not None:
            limits.append(f"--fsize={self.file_limit_bytes}")
        return limits

    def _argv(self, command: Sequence[str], user: run_uid.UidClaim | None) -> list[str]:
        prefix = [self._prlimit, *self._rlimits(), "--"] if self._prlimit else []
        if self.bwrap is None:
            return [*prefix, *command]
        argv = bw.bwrap_argv(
            self.bwrap,
            workspace=self.folder,
            inside_cwd=bw.INSIDE_WORKDIR,
            command=list(command),
            network=True,
            gpus="none",
            read_only=self.read_only,
            hide=self.hide,
            prefix=prefix,
            tmp_mb=TMPFS_MB,
            shm_mb=TMPFS_MB,
        )
        if user is None:
            return argv
        try:
            user.view.stage(argv)  # the run folder's staging folder is 0700 (run_uid.View)
        except OSError as exc:
            raise SandboxError(str(exc)) from None
        return [*user.prefix(), *user.view.wrap(argv)]

    def _claim(self) -> run_uid.UidClaim | None:
        """As root, a uid of the step's own, given the folder; None where mlra is not root
        or the step runs unconfined. A uid that cannot be claimed (no claims folder) is
        a refusal, not a step run as root outside. Where bubblewrap cannot start as such a
        uid at all (unprivileged user namespaces off: a kernel setting, or AppArmor's
        restriction on Ubuntu 24.04), the step runs as root outside, as the agent's own
        sandbox does there (run_uid.become): still confined by bubblewrap, and the clone
        or the read still works."""
        if self.bwrap is None or not run_uid.wanted():
            return None
        self.root_outside = _ROOT_OUTSIDE.get(self.bwrap)
        if self.root_outside is not None:
            return None
        return self._own_uid()

    def _own_uid(self) -> run_uid.UidClaim | None:
        assert self.bwrap is not None
        try:
            user = run_uid.claim()
        except OSError as exc:
            raise FetchUnconfined(f"no uid of its own for the fetch's sandbox: {exc}") from None
        try:
            run_uid.hand_tree(self.folder, user.uid, user.gid)
            if self.bwrap not in _ROOT_OUTSIDE:  # tried once a process, as the first step's user
                _ROOT_OUTSIDE[self.bwrap] = bw.probe(self._argv(["true"], user))
        except BaseException:  # its view's binds refused (SandboxError) among them
            self._give_back(user)
            raise
        self.root_outside = _ROOT_OUTSIDE[self.bwrap]
        if self.root_outside is not None:
            self._give_back(user)
            return None
        return user

    def _give_back(self, user: run_uid.UidClaim | None) -> None:
        """The folder is mlra's again (what landed moves on to the workspace's owner,
        landing.hand_over) and the uid is free: nothing runs as it any more."""
        if user is None:
            return
        with contextlib.suppress(OSError):
            run_uid.hand_tree(self.folder, os.geteuid(), os.getegid())
        user.release()

    async def run(
        self,
        command: Sequence[str],
        *,
        timeout_s: float,
        stdin_fd: int | None = None,
        watch: Callable[[], str | None] | None = None,
    ) -> BoxResult:
        """Run one step to its end, its time-out, or until `watch` (called every 0.2 s
        in a thread) returns a reason to stop it. Never leaves a process behind."""
        home: str
        scratch: str | None = None
        if self.bwrap is not None:
            home = bw.INSIDE_HOME
        else:
            scratch = tempfile.mkdtemp(prefix="mlra-fetch-home-")
            home = scratch
        # Given back before a cancellation goes on, if it comes as the uid is claimed.
        user = await made_or_undone(self._claim, self._give_back, BECOME_WAIT_S)
        if self.root_outside is not None and self.on_root_outside is not None:
            self.on_root_outside(self.root_outside)
        try:
            argv = self._argv(command, user)
            return await self._run(argv, home, timeout_s, stdin_fd, watch)
        finally:
            # The step's processes are gone (killed with their session, the pid
            # namespace with bubblewrap) before its uid is given back.
            await finish_despite_cancel(asyncio.to_thread(self._give_back, user))
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    async def _run(
        self,
        argv: Sequence[str],
        home: str,
        timeout_s: float,
        stdin_fd: int | None,
        watch: Callable[[], str | None] | None,
    ) -> BoxResult:
        # A stop as asyncio connects the pipes kills the whole session (unconfined, git's
        # remote helper would hold them): see runner.spawned.
        proc = await spawned(
            asyncio.create_subprocess_exec(
                *argv,
                stdin=stdin_fd if stdin_fd is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=str(self.folder),
                env=box_env(home),
                start_new_session=True,
                preexec_fn=None if self._prlimit else self._preexec(),
            ),
            _killed,
        )
        assert proc.stdout is not None and proc.stderr is not None
        out = asyncio.ensure_future(_read_head(proc.stdout, STDOUT_LIMIT))
        err = asyncio.ensure_future(_read_tail(proc.stderr, STDERR_LIMIT))
        deadline = time.monotonic() + timeout_s
        timed_out = False
        stopped: str | None = None
        try:
            while proc.returncode is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(WATCH_INTERVAL_S, left)):
                        await proc.wait()
                if proc.returncode is None and watch is not None:
                    stopped = await asyncio.to_thread(watch)
                    if stopped is not None:
                        break
        finally:
            if proc.returncode is None:
                _kill_group(proc.pid)
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(proc.wait(), KILL_WAIT_S)
        try:
            stdout, stderr = await asyncio.wait_for(asyncio.gather(out, err), KILL_WAIT_S)
        except TimeoutError:
            out.cancel()
            err.cancel()
            stdout, stderr = b"", b""
        return BoxResult(
            exit_code=proc.returncode,
            stdout=stdout,
            stderr=stderr.decode("utf-8", errors="replace"),
            timed_out=timed_out,
            stopped=stopped,
        )

    def _preexec(self) -> Callable[[], None]:
        import resource

        limits = [(resource.RLIMIT_DATA, MEMORY_MB * 1024 * 1024), (resource.RLIMIT_CORE, 0)]
        if self.file_limit_bytes is not None:
            limits.append((resource.RLIMIT_FSIZE, self.file_limit_bytes))

        def enter() -> None:
            for kind, value in limits:
                resource.setrlimit(kind, (value, value))

        return enter


async def _killed(proc: asyncio.subprocess.Process) -> None:
    """A step cancelled as it started: its session killed, its end waited for."""
    _kill_group(proc.pid)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), KILL_WAIT_S)


def _kill_group(pid: int) -> None:
    """The step's session: bubblewrap (whose namespace dies with it) or the command."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _read_head(stream: asyncio.StreamReader, limit: int) -> bytes:
    """The first `limit` bytes; the rest is read and dropped, so the writer never blocks."""
    kept = bytearray()
    while chunk := await stream.read(1 << 16):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return bytes(kept)


async def _read_tail(stream: asyncio.StreamReader, limit: int) -> bytes:
    kept = bytearray()
    while chunk := await stream.read(1 << 16):
        kept += chunk
        if len(kept) > 2 * limit:
            del kept[: len(kept) - limit]
    return bytes(kept[-limit:])
