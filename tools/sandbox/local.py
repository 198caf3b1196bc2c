"""Commands on this machine, confined by bubblewrap where it is installed.

With bubblewrap (`bwrap`) a command sees the host file system read-only, the
run's workspace read-write at /workspace, a fresh /tmp, no network unless the
task asks for it, and neither the task's hidden files nor the user's credentials.
Without it commands run as plain child processes: nothing is confined, and the
run log says so once at the start.

Either way every command runs in its own process group, and nothing it started
outlives it: when it ends, times out or is cancelled the whole group is killed
with SIGKILL, so a stopped run leaves no training job holding the GPU.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import glob
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Literal, TypeVar

from mlra.tools.sandbox.base import (
    ExecResult,
    OutputCallback,
    Sandbox,
    SandboxError,
    SandboxSpec,
)
from mlra.tools.sandbox.env import is_secret_name, refused_env_names, sandbox_env

logger = logging.getLogger(__name__)

IsolationMode = Literal["auto", "bwrap", "none"]
T = TypeVar("T")

INSIDE_WORKDIR = "/workspace"
INSIDE_HOME = "/tmp/home"
OUTPUT_HEAD_CHARS = 256 * 1024
OUTPUT_TAIL_CHARS = 256 * 1024
READ_CHUNK = 64 * 1024
PIPE_DRAIN_GRACE_S = 2.0
"""How long output is still read after the command's process group is dead: only
a process that left the group (setsid) can keep the pipes open past that."""
GROUP_DEATH_WAIT_S = 5.0
PROBE_TIMEOUT_S = 20.0

SECRET_HOME_PATHS = (
    ".ssh",
    ".aws",
    ".azure",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".docker",
    ".kube",
    ".gnupg",
    ".password-store",
    ".local/share/keyrings",
    ".vault-token",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".config/op",
    ".anthropic",
    ".config/anthropic",
    ".openai",
    ".config/openai",
    ".claude",
    ".claude.json",
    ".huggingface",
    ".cache/huggingface/token",
    ".cache/huggingface/stored_tokens",
    ".config/wandb",
    ".npmrc",
    ".yarnrc",
    ".pypirc",
    ".config/pip",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".terraform.d/credentials.tfrc.json",
    ".bash_history",
    ".zsh_history",
    ".python_history",
)
"""Where credentials live under a home folder. Masked one by one, not the whole
home, because the interpreter mlra runs in may live there (pyenv, a venv)."""


SECRET_SOCKETS = (
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd",
    "/run/podman",
    "/run/user",
)
"""Sockets that would let a command act outside the sandbox (a read-only bind
does not stop connect()): the Docker daemon, the user's agents (ssh, gpg, D-Bus)."""


def secret_paths(home: Path | None = None) -> list[Path]:
    """Host locations that hold credentials or escape hatches, whether or not they exist."""
    home = home if home is not None else Path.home()
    paths = [home / rel for rel in SECRET_HOME_PATHS]
    paths += [Path(p) for p in SECRET_SOCKETS]
    if os.environ.get("SSH_AUTH_SOCK"):
        paths.append(Path(os.environ["SSH_AUTH_SOCK"]))
    for var in ("HF_HOME", "HF_TOKEN_PATH"):
        value = os.environ.get(var)
        if value:
            paths.append(Path(value) / "token" if var == "HF_HOME" else Path(value))
    return paths


class LocalSandbox(Sandbox):
    """Runs commands as local processes, inside bubblewrap when it is available.

    `isolation_mode`: "auto" uses bubblewrap when it is installed and works and
    otherwise runs unconfined with a notice; "bwrap" insists on it (start()
    raises without it); "none" never uses it. `bwrap_search_path` is the PATH
    searched for `bwrap` (default: this process's PATH), so a caller or a test
    can look elsewhere or nowhere.
    """

    kind = "local"

    def __init__(
        self,
        workspace: Path,
        spec: SandboxSpec,
        *,
        isolation_mode: IsolationMode = "auto",
        bwrap_search_path: str | None = None,
    ) -> None:
        super().__init__(workspace, spec)
        if isolation_mode not in ("auto", "bwrap", "none"):
            raise ValueError(f"unknown isolation mode {isolation_mode!r}")
        self.isolation_mode: IsolationMode = isolation_mode
        self.bwrap: str | None = (
            None if isolation_mode == "none" else shutil.which("bwrap", path=bwrap_search_path)
        )
        self._use_bwrap = self.bwrap is not None
        self._home: Path | None = None
        self._started = False
        self._start_lock = asyncio.Lock()
        self._running: set[_Running] = set()

    @property
    def workdir(self) -> str:
        return INSIDE_WORKDIR if self._use_bwrap else str(self.workspace)

    @property
    def isolation(self) -> str:
        return "bwrap" if self._use_bwrap else "none"

    # --- life cycle ---------------------------------------------------------------------

    async def start(self) -> list[str]:
        async with self._start_lock:
            if self._started:
                return []
            notices = await self._start()
            self._started = True
            return notices

    async def _start(self) -> list[str]:
        notices: list[str] = []
        if self.isolation_mode == "bwrap" and self.bwrap is None:
            raise SandboxError(
                "isolation 'bwrap' was asked for, but bubblewrap (bwrap) is not installed; "
                "install it (e.g. apt-get install bubblewrap) or choose another isolation"
            )
        if self._use_bwrap:
            problem = await self._probe_bwrap()
            if problem is not None:
                if self.isolation_mode == "bwrap":
                    raise SandboxError(f"bubblewrap does not work here: {problem}")
                self._use_bwrap = False
                notices.append(
                    f"bubblewrap is installed but does not work here ({problem}), so " + _UNCONFINED
                )
        elif self.isolation_mode == "auto":
            notices.append("bubblewrap (bwrap) was not found, so " + _UNCONFINED)
        if not self._use_bwrap:
            self._home = Path(tempfile.mkdtemp(prefix="mlra-home-"))
        refused = refused_env_names(self.spec.env)
        if refused:
            notices.append(
                "these variables look like secrets and are not passed to commands: "
                + ", ".join(refused)
            )
        return notices

    async def close(self) -> None:
        for running in list(self._running):
            await _finish_despite_cancel(running.kill())
        self._running.clear()
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None
        self._started = False

    def suspend_commands(self) -> None:
        for running in self._running:
            running.suspend()

    def resume_commands(self) -> None:
        for running in self._running:
            running.resume()

    async def _probe_bwrap(self) -> str | None:
        """Why bubblewrap cannot run a command here with our arguments, or None.

        It can be installed and still fail (no user namespaces in a container), and
        it is better to learn that once at the start than on every command.
        """
        argv = self._bwrap_argv(INSIDE_WORKDIR, ["true"])
        try:
            result = await self._run(
                argv, timeout=PROBE_TIMEOUT_S, cwd=str(self.workspace),
                env=self._env(INSIDE_WORKDIR, None),
            )  # fmt: skip
        except SandboxError as exc:
            return str(exc)
        if result.timed_out:
            return f"a trial command did not finish in {PROBE_TIMEOUT_S:.0f} s"
        if result.exit_code != 0:
            lines = result.output.strip().splitlines()
            return lines[-1] if lines else f"exit code {result.exit_code}"
        return None

    # --- running commands ---------------------------------------------------------------

    async def exec(
        self,
        command: list[str],
        *,
        timeout: float,
        on_output: OutputCallback | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        if not command:
            raise SandboxError("empty command")
        if not self._started:
            await self.start()
        inside_cwd, host_cwd = self._resolve_cwd(cwd)
        argv = self._bwrap_argv(inside_cwd, command) if self._use_bwrap else list(command)
        return await self._run(
            argv,
            timeout=timeout,
            on_output=on_output,
            cwd=host_cwd,
            env=self._env(inside_cwd, env),
            stdin=stdin,
        )

    async def _run(
        self,
        argv: list[str],
        *,
        timeout: float,
        cwd: str,
        env: Mapping[str, str],
        on_output: OutputCallback | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run `argv` in a new session (so in its own process group) and collect its output.

        The protocol is asyncio's low-level one rather than `create_subprocess_exec`
        because `Process.wait()` only returns once the output pipes are closed, and
        a background process that inherited them would keep it waiting.
        """
        loop = asyncio.get_running_loop()
        output = BoundedOutput(OUTPUT_HEAD_CHARS, OUTPUT_TAIL_CHARS)
        started = time.monotonic()
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _CommandProtocol(loop, output, on_output),
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
            )
        except FileNotFoundError:
            raise SandboxError(f"command not found: {argv[0]}") from None
        except OSError as exc:
            raise SandboxError(f"cannot run {argv[0]}: {exc}") from None
        running = _Running(transport, protocol)
        self._running.add(running)
        timed_out = False
        try:
            if stdin is not None:
                pipe = transport.get_pipe_transport(0)
                if pipe is not None:
                    pipe.write(stdin)
                    pipe.close()  # after the buffered data is written: the command sees EOF
            timed_out = await running.wait(timeout, started)
            # Whatever the command left running in the background ends with it.
            await running.kill()
            try:
                await asyncio.wait_for(
                    asyncio.shield(protocol.pipes_closed), timeout=PIPE_DRAIN_GRACE_S
                )
            except TimeoutError:
                output.add(
                    "\n[a process that left the command's process group still holds its "
                    "output open; it was not read further]\n"
                )
        except BaseException:
            await _finish_despite_cancel(running.kill())
            raise
        finally:
            transport.close()
            self._running.discard(running)
        return ExecResult(
            exit_code=transport.get_returncode(),
            output=output.text(),
            duration_s=round(time.monotonic() - started, 3),
            timed_out=timed_out,
            killed=timed_out,
        )

    def _resolve_cwd(self, cwd: str | None) -> tuple[str, str]:
        """The working directory as the command sees it and as the host sees it."""
        host = self.host_path(cwd or ".")
        if not host.is_dir():
            raise SandboxError(f"working directory {cwd!r} is not a folder in the workspace")
        rel = self.relative(host)
        inside = self.workdir if rel == "." else f"{self.workdir}/{rel}"
        return inside, str(host)

    def _env(self, inside_cwd: str, extra: Mapping[str, str] | None) -> dict[str, str]:
        if self._use_bwrap:
            home = INSIDE_HOME
        else:
            if self._home is None:
                self._home = Path(tempfile.mkdtemp(prefix="mlra-home-"))
            home = str(self._home)
        env = sandbox_env(self.spec, workdir=inside_cwd, home=home)
        for name, value in (extra or {}).items():
            if not is_secret_name(name):
                env[name] = value
        return env

    def _bwrap_argv(self, inside_cwd: str, command: list[str]) -> list[str]:
        """The bubblewrap command line around `command`.

        The host's top-level folders are bound read-only one by one onto bwrap's
        own root rather than with `--ro-bind / /`, because /workspace must be
        created as a mount point, which a read-only bound root does not allow;
        the root itself is made read-only at the end.
        """
        assert self.bwrap is not None
        argv = [self.bwrap, *_root_binds()]
        argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        if (self.spec.gpus or "").strip().lower() != "none":
            # --dev gives a minimal /dev; CUDA needs the driver's device nodes.
            for node in sorted(glob.glob("/dev/nvidia*")):
                argv += ["--dev-bind", node, node]
        masked_dirs: list[Path] = []
        for path in [*secret_paths(), *self.spec.hide_paths]:
            mask = _mask_args(Path(path))
            if mask:
                argv += mask
                if mask[0] == "--tmpfs":
                    masked_dirs.append(Path(mask[1]))
        # A hidden folder, or the fresh /tmp, must not take the interpreter commands run
        # with along with it (a virtual environment may well live under /tmp).
        covered = [*masked_dirs, Path("/tmp")]
        for prefix in dict.fromkeys([sys.prefix, sys.base_prefix]):
            p = Path(prefix).resolve()
            if any(p == d or d in p.parents for d in covered):
                argv += ["--ro-bind", str(p), str(p)]
        for shown in self.spec.read_only:
            if shown.exists():
                argv += ["--ro-bind", str(shown.resolve()), str(shown.resolve())]
        argv += [
            "--bind", str(self.workspace), INSIDE_WORKDIR,
            "--dir", INSIDE_HOME,
            "--remount-ro", "/",
            "--chdir", inside_cwd,
            "--unshare-pid",
            "--die-with-parent",
        ]  # fmt: skip
        if not self.spec.network:
            argv.append("--unshare-net")
        return [*argv, "--", *command]


def _root_binds() -> list[str]:
    """Arguments that show the host's top-level entries read-only under bwrap's root."""
    args: list[str] = []
    for entry in sorted(os.scandir("/"), key=lambda e: e.name):
        target = "/" + entry.name
        if target in _FRESH_INSIDE:
            continue
        try:
            if entry.is_symlink():
                args += ["--symlink", os.readlink(target), target]
            elif entry.is_dir() or entry.is_file():
                args += ["--ro-bind", target, target]
        except OSError:
            continue
    return args


_FRESH_INSIDE = frozenset({"/dev", "/proc", "/tmp", INSIDE_WORKDIR})
"""Top-level paths the sandbox mounts itself instead of showing the host's."""


_UNCONFINED = (
    "commands run without isolation: the host file system is writable, the network is on, "
    "and hidden task files and the user's files are readable. Install bubblewrap to confine them."
)


def _mask_args(path: Path) -> list[str]:
    """bwrap arguments that make `path` look empty inside, or none if there is nothing to hide."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return []
    if real == Path("/") or any(real == p or p in real.parents for p in _ALREADY_PRIVATE):
        return []
    if real.is_dir():
        return ["--tmpfs", str(real)]
    return ["--ro-bind", "/dev/null", str(real)]


_ALREADY_PRIVATE = (Path("/tmp"), Path("/proc"), Path("/dev"))
"""Mounted fresh inside the sandbox, so nothing of the host's shows there anyway."""


# --- processes ----------------------------------------------------------------------------


class _CommandProtocol(asyncio.SubprocessProtocol):
    """Decodes each pipe incrementally as data arrives, so a UTF-8 character split
    across two reads is never garbled, and passes the text on at once."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        output: BoundedOutput,
        on_output: OutputCallback | None,
    ) -> None:
        self.output = output
        self.on_output = on_output
        self.exited: asyncio.Future[None] = loop.create_future()
        self.pipes_closed: asyncio.Future[None] = loop.create_future()
        self._decoders = {
            fd: codecs.getincrementaldecoder("utf-8")(errors="replace") for fd in (1, 2)
        }
        self._open = {1, 2}

    def _emit(self, fd: int, text: str) -> None:
        if not text:
            return
        self.output.add(text)
        if self.on_output is not None:
            try:
                self.on_output("stdout" if fd == 1 else "stderr", text)
            except Exception:
                # A broken display must not kill the command; it just stops being fed.
                logger.exception("an output callback raised; its output is no longer streamed")
                self.on_output = None

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd in self._decoders:
            self._emit(fd, self._decoders[fd].decode(data))

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd in self._open:
            self._open.discard(fd)
            self._emit(fd, self._decoders[fd].decode(b"", final=True))
            if not self._open and not self.pipes_closed.done():
                self.pipes_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


class _Running:
    """A command that has been started; its process group id is its pid (a new session)."""

    def __init__(self, transport: asyncio.SubprocessTransport, protocol: _CommandProtocol) -> None:
        self.transport = transport
        self.protocol = protocol
        self.pgid = transport.get_pid()
        self._suspended_at: float | None = None
        self._suspended_s = 0.0
        self._resumed = asyncio.Event()
        self._resumed.set()

    def suspend(self) -> None:
        if self._suspended_at is None and not self.protocol.exited.done():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGSTOP)
            self._suspended_at = time.monotonic()
            self._resumed.clear()

    def resume(self) -> None:
        if self._suspended_at is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGCONT)
            self._suspended_s += time.monotonic() - self._suspended_at
            self._suspended_at = None
            self._resumed.set()

    async def wait(self, timeout: float, started: float) -> bool:
        """Wait for the command to exit; True if it ran out of time first.

        Time spent suspended (the run paused) does not count against the time-out.
        """
        exited = self.protocol.exited
        while not exited.done():
            if self._suspended_at is not None:
                resumed = asyncio.ensure_future(self._resumed.wait())
                try:
                    await asyncio.wait([exited, resumed], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    resumed.cancel()
                continue
            left = timeout - (time.monotonic() - started - self._suspended_s)
            if left <= 0:
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(exited), timeout=left)
        return False

    async def kill(self) -> None:
        """SIGKILL the process group, reap the command and wait until the rest is dead.

        Grandchildren are not our children, so they cannot be reaped here; they are
        waited for until they are gone or zombies (dead, left to init to reap).
        """
        if not self.protocol.exited.done() or _group_alive(self.pgid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)
        await asyncio.shield(self.protocol.exited)
        deadline = time.monotonic() + GROUP_DEATH_WAIT_S
        delay = 0.002
        while _group_alive(self.pgid) and time.monotonic() < deadline:
            # SIGKILL is delivered asynchronously and there is nothing to await for
            # processes that are not our children; poll briefly.
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies do not count)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces and parentheses).
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def _finish_despite_cancel(aw: Awaitable[T]) -> T:
    """Await cleanup to its end even if the caller is cancelled meanwhile, then re-raise.

    Used where the process group must be dead before anything else happens: a
    cancelled run that returned early would leave its training job running.
    """
    task = asyncio.ensure_future(aw)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


class BoundedOutput:
    """Interleaved output kept to its head and tail, since a command may print gigabytes."""

    def __init__(self, head_chars: int, tail_chars: int) -> None:
        self.head_chars = head_chars
        self.tail_chars = tail_chars
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self.dropped_chars = 0
        self.dropped_lines = 0

    def add(self, text: str) -> None:
        if self._head_len < self.head_chars:
            take = text[: self.head_chars - self._head_len]
            self._head.append(take)
            self._head_len += len(take)
            text = text[len(take) :]
        if not text:
            return
        self._tail.append(text)
        self._tail_len += len(text)
        # Drop whole chunks only; the first kept one is trimmed when the text is built.
        while self._tail and self._tail_len - len(self._tail[0]) >= self.tail_chars:
            gone = self._tail.popleft()
            self._tail_len -= len(gone)
            self.dropped_chars += len(gone)
            self.dropped_lines += gone.count("\n")

    @property
    def cut(self) -> bool:
        return self.dropped_chars > 0 or self._tail_len > self.tail_chars

    def text(self) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        dropped_chars, dropped_lines = self.dropped_chars, self.dropped_lines
        excess = len(tail) - self.tail_chars
        if excess > 0:
            dropped_chars += excess
            dropped_lines += tail.count("\n", 0, excess)
            tail = tail[excess:]
        if dropped_chars == 0:
            return head + tail
        return (
            f"{head}\n[... {dropped_chars:,} characters ({dropped_lines:,} lines) of output "
            f"cut here; only the first and last {self.tail_chars // 1024} KB are kept ...]\n{tail}"
        )
