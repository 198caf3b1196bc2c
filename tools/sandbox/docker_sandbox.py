"""Commands in a Docker container: one container per run, from the task's image.

The container sees the run's workspace bind-mounted at /workspace and nothing
else of the host; it runs as a non-root user with no capabilities, no network
unless the task allows it, the GPUs, memory, CPUs and process count it was
given, and an environment built from nothing (no API keys). Files are read and
written host-side through the bind mount, so the tools and the Files pane work
as with the local sandbox.

Each command runs in its own session inside the container, under a small shell
wrapper that records the session's id; a time-out, a cancellation or the
command's own end kills that whole process group, as the local sandbox does.
Containers carry the run id and the owning process in labels, are removed when
the run ends, and a later start removes those whose owner died without doing it.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import io
import logging
import os
import secrets
import shutil
import socket
import tarfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlra.events import LimitsInForce
from mlra.tools.sandbox.base import (
    ExecResult,
    OutputCallback,
    Sandbox,
    SandboxError,
    SandboxSpec,
)
from mlra.tools.sandbox.env import (
    STANDARD_PATH,
    is_secret_name,
    refused_env_names,
    sandbox_env,
)
from mlra.tools.sandbox.local import (
    OUTPUT_HEAD_CHARS,
    OUTPUT_TAIL_CHARS,
    PIPE_DRAIN_GRACE_S,
    BoundedOutput,
    _finish_despite_cancel,
)

logger = logging.getLogger(__name__)

INSIDE_WORKDIR = "/workspace"
INSIDE_HOME = "/tmp/home"
CONTROL_DIR = "/tmp/.mlra"
"""Where the wrapper keeps each command's session id and stdin, inside the container."""
DEFAULT_IMAGE = "mlra:latest"
"""What `mlra image build` tags."""
DEFAULT_PIDS_LIMIT = 8192
FALLBACK_UID = 1000
LABEL_RUN = "mlra.run"
LABEL_OWNER = "mlra.owner"
"""host/pid/start-time of the mlra process that made the container."""
KILL_WAIT_S = 5.0

_WRAPPER = r"""
d=/tmp/.mlra; t=$1; shift
if [ -f "$d/$t.in" ]; then exec 3<"$d/$t.in"; else exec 3</dev/null; fi
setsid "$@" <&3 3<&- &
pid=$!
echo "$pid" > "$d/$t.pid"
exec 3<&-
wait "$pid"; rc=$?
kill -KILL -"$pid" 2>/dev/null
rm -f "$d/$t.pid" "$d/$t.in"
exit "$rc"
"""
"""Runs the command in a new session (an asynchronous list of a non-interactive
shell is not a group leader, so `setsid` needs no fork and `$!` is the session's
id) and kills what it left behind once it ends."""

_KILL = r"""
f=/tmp/.mlra/$1.pid; i=0
while [ ! -s "$f" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
[ -s "$f" ] && kill -"$2" -"$(cat "$f")" 2>/dev/null
exit 0
"""


class DockerUnavailable(SandboxError):
    """The engine, the image or the GPU runtime is missing; the message says what to do."""


def docker_client(timeout: float = 30.0) -> Any:
    """A client for the engine DOCKER_HOST names (or the default socket), checked with a ping."""
    try:
        import docker
    except ImportError:
        raise DockerUnavailable(
            "the docker Python package is not installed (pip install docker)"
        ) from None
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as exc:
        raise DockerUnavailable(
            f"cannot reach the Docker engine at {host} ({_short(exc)}); start it "
            "(e.g. `systemctl start docker`), set DOCKER_HOST, or use --sandbox local"
        ) from None
    return client


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[-1] if text else type(exc).__name__
    return line if len(line) < 300 else line[:300] + "..."


def _missing_image(image: str) -> DockerUnavailable:
    hint = (
        "build it with `mlra image build`"
        if image == DEFAULT_IMAGE
        else f"build or pull it (docker pull {image})"
    )
    return DockerUnavailable(f"the Docker image {image} is not on this engine; {hint}")


def preflight(image: str, gpus: str | None) -> None:
    """Check, before a run folder is made, what would otherwise fail at the sandbox's
    start: the engine, the image, and a GPU runtime when GPUs are asked for."""
    import docker

    client = docker_client()
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise _missing_image(image) from None
    if (gpus or "none").strip().lower() not in ("none", ""):
        runtimes = (client.info().get("Runtimes") or {}).keys()
        if "nvidia" not in runtimes and not shutil.which("nvidia-container-runtime-hook"):
            raise DockerUnavailable(
                f"GPUs were asked for (--gpus {gpus}) but the Docker engine has no GPU runtime; "
                "install the NVIDIA Container Toolkit and run "
                "`nvidia-ctk runtime configure --runtime=docker`, then restart Docker; "
                "or run with --gpus none"
            )


# --- owners and leftovers -----------------------------------------------------------------


def _owner_label() -> str:
    import psutil

    pid = os.getpid()
    return f"{socket.gethostname()}/{pid}/{psutil.Process(pid).create_time():.2f}"


def _owner_alive(label: str) -> bool:
    """Whether the process that made a container still runs (containers of other hosts
    sharing the engine are assumed alive: their owners cannot be checked from here)."""
    import psutil

    host, _, rest = label.partition("/")
    pid_text, _, started = rest.partition("/")
    if host != socket.gethostname():
        return True
    try:
        proc = psutil.Process(int(pid_text))
        return f"{proc.create_time():.2f}" == started
    except (ValueError, psutil.Error):
        return False


def remove_leftover_containers(client: Any | None = None) -> list[str]:
    """Remove the containers of runs whose mlra process died without removing them
    (a killed console, a crash); returns the run ids they belonged to."""
    client = client if client is not None else docker_client()
    removed = []
    for container in client.containers.list(all=True, filters={"label": LABEL_RUN}):
        labels = container.labels or {}
        if _owner_alive(labels.get(LABEL_OWNER, "")):
            continue
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(labels.get(LABEL_RUN, container.name))
    return removed


# --- what the Resources pane reads ------------------------------------------------------------

_ACTIVE: dict[Path, DockerSandbox] = {}
"""Started Docker sandboxes by workspace, so the resource monitor finds its container."""


def active_sandbox(workspace: Path) -> DockerSandbox | None:
    return _ACTIVE.get(workspace.resolve())


@dataclass
class ContainerUsage:
    cpu_percent: float
    """Of one CPU, as `docker stats` and psutil per process count it (200 = two CPUs busy)."""
    mem_used_mb: float
    mem_limit_mb: float


# --- the sandbox ----------------------------------------------------------------------------


class DockerSandbox(Sandbox):
    """One container per run; see the module's docstring for what it confines."""

    kind = "docker"

    def __init__(
        self,
        workspace: Path,
        spec: SandboxSpec,
        *,
        image: str = DEFAULT_IMAGE,
        run_id: str | None = None,
        pids_limit: int | None = DEFAULT_PIDS_LIMIT,
        uid: int | None = None,
    ) -> None:
        super().__init__(workspace, spec)
        self.image = image
        self.run_id = run_id or workspace.parent.name
        self.pids_limit = pids_limit
        self.client: Any = None
        self.container: Any = None
        self.uid, self.gid = self._user(uid)
        self._path = os.pathsep.join(STANDARD_PATH)
        self._start_lock = asyncio.Lock()
        self._running: set[_Exec] = set()
        self._paused = False
        self._signals: asyncio.Task[None] | None = None
        self._stats_prev: tuple[float, float] | None = None

    @property
    def workdir(self) -> str:
        return INSIDE_WORKDIR

    @property
    def isolation(self) -> str:
        return "docker"

    @property
    def limits(self) -> LimitsInForce:
        return LimitsInForce(
            memory_mb=self.spec.memory_mb,
            cpus=self.spec.cpus,
            pids=self.pids_limit,
            via="docker",
        )

    @property
    def gpu_ids(self) -> list[str] | None:
        """The host GPUs given to the container: None for all, [] for none."""
        gpus = (self.spec.gpus or "none").strip().lower()
        if gpus == "all":
            return None
        if gpus in ("none", ""):
            return []
        return [g.strip() for g in gpus.split(",") if g.strip()]

    def _user(self, uid: int | None) -> tuple[int, int]:
        """A non-root user that can write the workspace: its owner, or 1000 when root owns it
        (the workspace is then handed to 1000, which only root can do and only root needs)."""
        if uid is not None:
            return uid, uid
        st = self.workspace.stat() if self.workspace.exists() else None
        if st is not None and st.st_uid != 0:
            return st.st_uid, st.st_gid
        return FALLBACK_UID, FALLBACK_UID

    # --- life cycle ---------------------------------------------------------------------

    async def start(self) -> list[str]:
        async with self._start_lock:
            if self.container is not None:
                return []
            notices = await asyncio.to_thread(self._start)
            _ACTIVE[self.workspace] = self
            return notices

    def _start(self) -> list[str]:
        import docker

        notices: list[str] = []
        self.client = docker_client()
        removed = remove_leftover_containers(self.client)
        if removed:
            notices.append(
                "removed containers left by runs that ended without cleaning up: "
                + ", ".join(removed)
            )
        try:
            image = self.client.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise _missing_image(self.image) from None
        for entry in (image.attrs.get("Config") or {}).get("Env") or []:
            if entry.startswith("PATH="):
                self._path = entry[len("PATH=") :]
        self._own_workspace()
        try:
            self.container = self.client.containers.run(**self._container_args())
        except docker.errors.APIError as exc:
            raise self._explain(exc) from None
        refused = refused_env_names(self.spec.env)
        if refused:
            notices.append(
                "these variables look like secrets and are not passed to commands: "
                + ", ".join(refused)
            )
        code, out = self.container.exec_run(
            ["mkdir", "-p", INSIDE_HOME, CONTROL_DIR], user=f"{self.uid}:{self.gid}"
        )
        if code != 0:
            self._remove()
            raise SandboxError(f"the container cannot be prepared: {out.decode(errors='replace')}")
        return notices

    def _container_args(self) -> dict[str, Any]:
        import docker

        volumes = {str(self.workspace): {"bind": INSIDE_WORKDIR, "mode": "rw"}}
        for shown in self.spec.read_only:
            if shown.exists():
                real = str(shown.resolve())
                volumes[real] = {"bind": real, "mode": "ro"}
        args: dict[str, Any] = {
            "image": self.image,
            "command": ["sleep", "infinity"],
            "detach": True,
            "init": True,
            "name": f"mlra-{self.run_id}-{secrets.token_hex(2)}",
            "hostname": "sandbox",
            "labels": {LABEL_RUN: self.run_id, LABEL_OWNER: _owner_label()},
            "user": f"{self.uid}:{self.gid}",
            "working_dir": INSIDE_WORKDIR,
            "volumes": volumes,
            "environment": {},
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "network_mode": "bridge" if self.spec.network else "none",
            "pids_limit": self.pids_limit,
        }
        if self.spec.memory_mb:
            args["mem_limit"] = f"{int(self.spec.memory_mb)}m"
            args["memswap_limit"] = f"{int(self.spec.memory_mb)}m"  # no swap on top
        if self.spec.cpus:
            args["nano_cpus"] = int(self.spec.cpus * 1e9)
        ids = self.gpu_ids
        if ids is None:
            args["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        elif ids:
            args["device_requests"] = [
                docker.types.DeviceRequest(device_ids=ids, capabilities=[["gpu"]])
            ]
        return args

    def _explain(self, exc: Exception) -> SandboxError:
        text = _short(exc)
        if "device driver" in text or "nvidia" in text.lower():
            return DockerUnavailable(
                f"GPUs were asked for (--gpus {self.spec.gpus}) but the Docker engine has no GPU "
                f"runtime ({text}); install the NVIDIA Container Toolkit and run "
                "`nvidia-ctk runtime configure --runtime=docker`, then restart Docker; "
                "or run with --gpus none"
            )
        return SandboxError(f"the container could not be started: {text}")

    def _own_workspace(self) -> None:
        """Hand the whole workspace to the container's user.

        Walked by folder descriptors (os.fwalk does not enter a folder that turned
        into a link between its lstat and its open) and each entry changed relative
        to its folder without following links: a daemon of the agent's flipping a
        folder into a link to `/` must not get host files chowned to it.
        """
        if os.geteuid() != 0 or self.uid == 0:
            return
        for _root, dirs, files, dir_fd in os.fwalk(self.workspace, follow_symlinks=False):
            for name in [*dirs, *files]:
                with contextlib.suppress(OSError):
                    os.chown(name, self.uid, self.gid, dir_fd=dir_fd, follow_symlinks=False)
        os.chown(self.workspace, self.uid, self.gid)

    async def close(self) -> None:
        for running in list(self._running):
            with contextlib.suppress(Exception):
                await running.kill()
        self._running.clear()
        if self._signals is not None:
            with contextlib.suppress(BaseException):
                await self._signals
        _ACTIVE.pop(self.workspace, None)
        if self.container is not None:
            await asyncio.to_thread(self._remove)

    async def stop_processes(self) -> None:
        """Kill everything in the container, daemons that left their session included.

        The container's init is killed (`docker kill`, SIGKILL), which ends every
        process of its pid namespace at once; unlike a `docker exec` of a kill, this
        works however many processes the agent forked. The container is not usable
        for commands afterwards: this is done only when the run is ending.
        """
        if self.container is None:
            return
        await asyncio.to_thread(self._kill_container)
        for running in list(self._running):
            running.abandon()

    def _kill_container(self) -> None:
        container = self.container
        if container is None:
            return
        try:
            container.kill()
        except Exception as exc:
            # Already stopped (409 "is not running") is what was wanted.
            if "not running" not in str(exc):
                raise SandboxError(f"the container could not be stopped: {_short(exc)}") from None
        try:
            container.wait(timeout=KILL_WAIT_S * 6)
        except Exception as exc:
            raise SandboxError(f"the container did not stop after SIGKILL: {_short(exc)}") from None

    def _remove(self) -> None:
        container, self.container = self.container, None
        if container is None:
            return
        try:
            container.remove(force=True)
        except Exception as exc:
            if "No such container" not in str(exc) and "is already in progress" not in str(exc):
                logger.warning("could not remove container %s: %s", container.name, exc)

    def suspend_commands(self) -> None:
        """SIGSTOP each running command's session, as the local sandbox does.

        Not `docker pause`: an exec that starts while the container is frozen hangs
        the engine (runc waits on the frozen cgroup), and one may be starting now.
        """
        if self._paused or self.container is None:
            return
        self._paused = True
        for running in list(self._running):
            running.suspend()
            self._chain_signal(running.token, "STOP")

    def resume_commands(self) -> None:
        if not self._paused:
            return
        self._paused = False
        for running in list(self._running):
            self._chain_signal(running.token, "CONT")
            running.resume()

    def _chain_signal(self, token: str, sig: str) -> None:
        """Send a signal in the background, after those sent before (a resume must
        not overtake its pause)."""
        previous = self._signals

        async def send() -> None:
            if previous is not None:
                with contextlib.suppress(BaseException):
                    await previous
            await asyncio.to_thread(self._signal_blocking, token, sig)

        self._signals = asyncio.get_running_loop().create_task(send())

    def _signal_blocking(self, token: str, sig: str) -> None:
        container = self.container
        if container is None:
            return
        with contextlib.suppress(Exception):
            container.exec_run(["sh", "-c", _KILL, "sh", token, sig], user=f"{self.uid}:{self.gid}")

    # --- files --------------------------------------------------------------------------
    # Read and written host-side through the bind mount; what mlra writes as root is
    # handed to the container's user so its commands can change it.

    def _created(self, fd: int) -> None:
        # By descriptor: the entry just made, wherever its name leads by now.
        if os.geteuid() != 0 or self.uid == 0:
            return
        with contextlib.suppress(OSError):
            os.fchown(fd, self.uid, self.gid)

    # --- running commands ---------------------------------------------------------------

    def _folder(self, cwd: str) -> str:
        """The workspace-relative folder a command starts in, checked without following
        links out (the container resolves it again, confined, when the command starts)."""
        try:
            fd, rel = self.open_beneath(cwd, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            rel = None
        else:
            os.close(fd)
        if rel is None:
            raise SandboxError(f"working directory {cwd!r} is not a folder in the workspace")
        return rel

    def _env(self, inside_cwd: str, extra: Mapping[str, str] | None) -> dict[str, str]:
        env = sandbox_env(self.spec, workdir=inside_cwd, home=INSIDE_HOME)
        env["PATH"] = self._path  # the image's interpreter, not the host's
        if "CUDA_VISIBLE_DEVICES" not in self.spec.env:
            # The container only has the GPUs it was given, numbered from 0.
            env.pop("CUDA_VISIBLE_DEVICES", None)
        for name, value in (extra or {}).items():
            if not is_secret_name(name):
                env[name] = value
        return env

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
        if self.container is None:
            await self.start()
        rel = self._folder(cwd or ".")
        inside_cwd = INSIDE_WORKDIR if rel == "." else f"{INSIDE_WORKDIR}/{rel}"
        token = secrets.token_hex(8)
        output = BoundedOutput(OUTPUT_HEAD_CHARS, OUTPUT_TAIL_CHARS)
        started = time.monotonic()
        running = _Exec(self, token, asyncio.get_running_loop(), output, on_output)
        self._running.add(running)
        timed_out = False
        try:
            await asyncio.to_thread(
                running.begin,
                ["sh", "-c", _WRAPPER, "sh", token, *command],
                inside_cwd,
                self._env(inside_cwd, env),
                stdin,
            )
            timed_out = await running.wait(timeout, started)
            if timed_out:
                await running.kill()
            try:
                await asyncio.wait_for(asyncio.shield(running.finished), PIPE_DRAIN_GRACE_S)
            except TimeoutError:
                output.add(
                    "\n[a process that left the command's process group still holds its "
                    "output open; it was not read further]\n"
                )
                running.abandon()
            exit_code = await asyncio.to_thread(running.exit_code)
        except BaseException:
            await _finish_despite_cancel(running.kill())
            running.abandon()
            raise
        finally:
            self._running.discard(running)
        return ExecResult(
            exit_code=exit_code,
            output=output.text(),
            duration_s=round(time.monotonic() - started, 3),
            timed_out=timed_out,
            killed=timed_out,
        )

    # --- resources ----------------------------------------------------------------------

    def usage(self) -> ContainerUsage | None:
        """The container's CPU and memory use now (one cheap, non-blocking stats call)."""
        container = self.container
        if container is None:
            return None
        try:
            stats = container.stats(stream=False, one_shot=True)
        except Exception:
            return None
        cpu = stats.get("cpu_stats") or {}
        total = float((cpu.get("cpu_usage") or {}).get("total_usage") or 0)
        now = time.monotonic()
        percent = 0.0
        if self._stats_prev is not None:
            prev_total, prev_at = self._stats_prev
            if now > prev_at:
                percent = max(0.0, (total - prev_total) / 1e9 / (now - prev_at) * 100)
        self._stats_prev = (total, now)
        mem = stats.get("memory_stats") or {}
        used = float(mem.get("usage") or 0)
        detail = mem.get("stats") or {}
        # What `docker stats` shows: page cache that can be dropped does not count.
        used -= float(detail.get("inactive_file", detail.get("total_inactive_file", 0)) or 0)
        limit = float(mem.get("limit") or 0)
        return ContainerUsage(
            cpu_percent=round(percent, 1),
            mem_used_mb=max(used, 0.0) / 2**20,
            mem_limit_mb=limit / 2**20,
        )


class _Exec:
    """One command in the container: the exec, its output reader thread and its session."""

    def __init__(
        self,
        sandbox: DockerSandbox,
        token: str,
        loop: asyncio.AbstractEventLoop,
        output: BoundedOutput,
        on_output: OutputCallback | None,
    ) -> None:
        self.sandbox = sandbox
        self.token = token
        self.loop = loop
        self.output = output
        self.on_output = on_output
        self.exec_id: str | None = None
        self.stream: Any = None
        self.finished: asyncio.Future[None] = loop.create_future()
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")(errors="replace")
            for name in ("stdout", "stderr")
        }
        self._killed = False
        self.failed = False
        self._suspended_at: float | None = None
        self._suspended_s = 0.0
        self._resumed = asyncio.Event()
        self._resumed.set()

    def begin(self, argv: list[str], cwd: str, env: dict[str, str], stdin: bytes | None) -> None:
        """Create and start the exec (blocking; run in a thread) and start its reader."""
        api = self.sandbox.client.api
        container = self.sandbox.container
        user = f"{self.sandbox.uid}:{self.sandbox.gid}"
        if stdin is not None:
            info = tarfile.TarInfo(f"{self.token}.in")
            info.size, info.mode = len(stdin), 0o600
            info.uid, info.gid = self.sandbox.uid, self.sandbox.gid
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                tar.addfile(info, io.BytesIO(stdin))
        try:
            if stdin is not None:
                container.put_archive(CONTROL_DIR, buf.getvalue())
            self.exec_id = api.exec_create(
                container.id, argv, stdout=True, stderr=True, stdin=False, tty=False,
                environment=env, workdir=cwd, user=user,
            )["Id"]  # fmt: skip
            self.stream = api.exec_start(self.exec_id, stream=True, demux=True)
        except Exception as exc:
            self.failed = True
            raise SandboxError(f"cannot run the command in the container: {_short(exc)}") from None
        threading.Thread(target=self._read, name=f"docker-exec-{self.token}", daemon=True).start()

    def _read(self) -> None:
        try:
            for out, err in self.stream:
                if out:
                    self.loop.call_soon_threadsafe(self._emit, "stdout", out, False)
                if err:
                    self.loop.call_soon_threadsafe(self._emit, "stderr", err, False)
        except Exception:
            pass  # the stream was closed under us (abandon) or the engine went away
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self.loop.call_soon_threadsafe(self._done)

    def _emit(self, stream: str, data: bytes, final: bool) -> None:
        text = self._decoders[stream].decode(data, final=final)
        if not text:
            return
        self.output.add(text)
        if self.on_output is not None:
            try:
                self.on_output(stream, text)  # type: ignore[arg-type]
            except Exception:
                logger.exception("an output callback raised; its output is no longer streamed")
                self.on_output = None

    def _done(self) -> None:
        for name in ("stdout", "stderr"):
            self._emit(name, b"", True)
        if not self.finished.done():
            self.finished.set_result(None)

    def exit_code(self) -> int | None:
        if self.exec_id is None:
            return None
        try:
            info = self.sandbox.client.api.exec_inspect(self.exec_id)
        except Exception:
            return None
        return None if info.get("Running") else info.get("ExitCode")

    def suspend(self) -> None:
        if self._suspended_at is None:
            self._suspended_at = time.monotonic()
            self._resumed.clear()

    def resume(self) -> None:
        if self._suspended_at is not None:
            self._suspended_s += time.monotonic() - self._suspended_at
            self._suspended_at = None
            self._resumed.set()

    async def wait(self, timeout: float, started: float) -> bool:
        """Wait for the command's end; True if it ran out of time first (paused time
        does not count)."""
        while not self.finished.done():
            if self._suspended_at is not None:
                resumed = asyncio.ensure_future(self._resumed.wait())
                try:
                    await asyncio.wait(
                        [self.finished, resumed], return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    resumed.cancel()
                continue
            left = timeout - (time.monotonic() - started - self._suspended_s)
            if left <= 0:
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.finished), timeout=left)
        return False

    async def kill(self) -> None:
        """SIGKILL the command's session inside the container and wait for the exec's end."""
        # Also before the exec is known: it may be starting in a thread right now, and
        # the kill script waits a moment for its session id.
        if self._killed or self.failed or self.finished.done():
            return
        self._killed = True
        await asyncio.to_thread(self._kill_blocking)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.finished), KILL_WAIT_S)

    def _kill_blocking(self) -> None:
        self.sandbox._signal_blocking(self.token, "KILL")

    def abandon(self) -> None:
        """Stop reading (the reader thread ends when its socket is shut)."""
        if self.stream is not None:
            with contextlib.suppress(Exception):
                self.stream.close()
