"""Commands in a Docker container: one container per run, from the task's image.

The container sees the run's workspace bind-mounted at /workspace and nothing
else of the host; it runs as a non-root user with no capabilities, no network
unless the task allows it, the GPUs, memory, CPUs and process count it was
given, and an environment built from nothing (no API keys). Files are read and
written host-side through the bind mount, so the tools and the Files pane work
as with the local sandbox.

Its root file system is read-only: what a command can write is the workspace
(under its disk quota: its volume, mounted before the container binds the path, or
the du watcher, workspace_disk.py) and /tmp and /dev/shm, tmpfs mounts bounded
in size and charged to the container's memory limit, which every container has
(the task's, the user's or the machine's default: default_limits.py).

This module holds the container's life cycle; the checks before a run and the
removal of leftovers are in docker_preflight.py, each command's exec and its
signals in docker_exec.py, and the container's stats in docker_stats.py.
Containers carry the run id and the owning process in labels, are removed when
the run ends, end when their mlra dies (docker_tie.py), and a later start removes
those whose owner died without doing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlra.events import LimitsInForce
from mlra.tools.sandbox import accounts, run_uid
from mlra.tools.sandbox.base import (
    ExecResult,
    OutputCallback,
    Sandbox,
    SandboxError,
    SandboxSpec,
    SandboxUsage,
    read_only_mounts,
)
from mlra.tools.sandbox.default_limits import disk_for, memory_for, tmpfs_bounds
from mlra.tools.sandbox.docker_exec import (
    CONTROL_DIR,
    KILL_WAIT_S,
    RUN_SHARED,
    STDIN_DIR,
    WRAPPER,
    DockerExec,
    SessionSignals,
)
from mlra.tools.sandbox.docker_preflight import (
    DEFAULT_IMAGE,
    REQUEST_TIMEOUT_S,
    DockerUnavailable,
    docker_client,
    engine_of,
    missing_image,
    no_bridge,
    no_gpu_runtime,
    preflight,
    remove_container,
    remove_leftover_containers,
    run_labels,
    short_error,
)
from mlra.tools.sandbox.docker_run_group import DockerRunGroup
from mlra.tools.sandbox.docker_stats import StatsReader
from mlra.tools.sandbox.docker_stdin import StdinFolder
from mlra.tools.sandbox.docker_tie import (
    KEEPER,
    KEEPER_UID,
    TIED_ARGS,
    Tie,
    held_words,
    keeper_claim,
)
from mlra.tools.sandbox.docker_user import container_user, docker_root_outside_words
from mlra.tools.sandbox.env import (
    STANDARD_PATH,
    is_secret_name,
    refused_env_names,
    sandbox_env,
)
from mlra.tools.sandbox.gpu_inventory import given_ids
from mlra.tools.sandbox.output import OutputSink
from mlra.tools.sandbox.runner import finish_despite_cancel
from mlra.tools.sandbox.start_step import Pending, made_or_undone
from mlra.tools.sandbox.time_out import TimeOut
from mlra.tools.sandbox.volume_settle import settle_before_use
from mlra.tools.sandbox.workspace_disk import WorkspaceDisk

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_PIDS_LIMIT",
    "DockerSandbox",
    "DockerUnavailable",
    "docker_client",
    "preflight",
    "remove_leftover_containers",
]

logger = logging.getLogger(__name__)

INSIDE_WORKDIR = "/workspace"
INSIDE_HOME = accounts.INSIDE_HOME
DEFAULT_PIDS_LIMIT = 8192
START_REQUESTS = 13
"""The most requests `_start` makes to the engine: the bridge's and the image's look-ups,
the image's accounts read from a container made for it (create, two archives, remove),
the container's create, start and inspect, and two execs of two requests each."""
START_WAIT_S = START_REQUESTS * REQUEST_TIMEOUT_S
"""How long a cancelled start waits for its container to be made before it goes on: each
of its requests to its time-out, where an engine that answers takes seconds. The
workspace's walk (handed to the container's uid) is bounded by nothing, so a thread still
going then removes its container at its end, and the close waits for that before it
gives the uid back (`_pending`)."""

_KILL_ALL_BUT = r"""
keep=" 1 $1 $$ "; i=0
while [ $i -lt 100 ]; do
  found=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$keep" in *" $p "*) continue;; esac
    read -r s < "$d/stat" 2>/dev/null || continue
    case "${s##*) }" in Z*|X*) continue;; esac
    kill -KILL "$p" 2>/dev/null && found=1
  done
  [ -z "$found" ] && exit 0
  i=$((i+1))
done
exit 1
"""
"""SIGKILL every process in the container but its init, its main process ($1) and
itself, again until none is left (one may fork meanwhile): every command, job and
daemon, while the container stays up for the next command."""

_SIGNAL_ALL_BUT = r"""
keep=" 1 $1 $$ "
for pass in 1 2 3; do
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$keep" in *" $p "*) continue;; esac
    pp=; while read -r k v; do [ "$k" = PPid: ] && { pp=$v; break; }; done 2>/dev/null < "$d/status"
    [ "$pp" = 0 ] && continue
    kill -"$2" "$p" 2>/dev/null
  done
done
exit 0
"""
"""Signal ($2: STOP or CONT) every process in the container but its init, its main
process ($1), itself and what the engine execs (parent 0, outside the container: mlra's
command wrappers, which only wait on their command); three passes, for what forked as
the first went by. A pause stops daemons that left their command's session too, which
session signals miss. A stopped wrapper never saw its killed command end: a stop of a
paused run waited out each command's KILL_WAIT_S."""


class _StartStopped(Exception):
    """The start gave up (an attempt stopped as its sandbox starts): its thread stops."""


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
        self._engine: tuple[str, str | None] | None = None
        """The engine's address and version, read when the sandbox starts."""
        self.container: Any = None
        self._claim: run_uid.UidClaim | None = None
        self._keeper: run_uid.UidClaim | None = None
        """The keeper's own uid (docker_tie.py), claimed and given back with `_claim`."""
        self._pending = Pending()
        """A cancelled start's thread still making its container, which runs as the claim's
        uid until the thread removes it: the close gives the uid back once it ended."""
        self._claims = uid is None and run_uid.wanted()
        self.uid, self.gid = self._user(uid)
        self._path = os.pathsep.join(STANDARD_PATH)
        self._start_lock = asyncio.Lock()
        self._running: set[DockerExec] = set()
        self._paused = False
        self._signals = SessionSignals(lambda: self.container, f"{self.uid}:{self.gid}")
        self._stats = StatsReader()
        sources = dict(spec.limit_sources)
        memory = memory_for(spec.memory_mb, sources.get("memory_mb"))
        disk = disk_for(spec.disk_mb, sources.get("disk_mb"), self.workspace)
        sources["memory_mb"], sources["disk_mb"] = memory.source, disk.source
        self.memory_mb = memory.mb
        self.tmp_mb, self.shm_mb = tmpfs_bounds(memory.mb) if memory.mb else (None, None)
        self._sources = sources
        self._quota = WorkspaceDisk.for_spec(self.workspace, disk.mb, spec)
        self._stdin: StdinFolder | None = None
        self._accounts: tuple[Path, ...] = ()
        """Its /etc/passwd and /etc/group, in the stdin folder's root (accounts.py)."""
        self._main_pid: str | None = None
        """The container's main process (docker_tie.KEEPER), the one a quota stop spares."""
        self._tie: Tie | None = None
        """mlra's hold on the container's stdin, which ends it when mlra dies (docker_tie.py)."""

    @property
    def workdir(self) -> str:
        return INSIDE_WORKDIR

    @property
    def isolation(self) -> str:
        return "docker"

    @property
    def isolated_by(self) -> tuple[str, str | None] | None:
        return self._engine

    @property
    def network_via(self) -> str | None:
        return "docker bridge" if self.spec.network else None

    @property
    def limits(self) -> LimitsInForce:
        quota = self._quota
        notes = [] if quota is None or quota.problem is None else [quota.problem]
        limits = LimitsInForce(
            memory_mb=self.memory_mb,
            cpus=self.spec.cpus,
            pids=self.pids_limit,
            tmp_mb=self.tmp_mb,
            shm_mb=self.shm_mb,
            tmpfs_counted=self.memory_mb is not None,
            sources=self._sources,
            via="docker",
            notes=notes,
        )
        return limits if quota is None else quota.in_force(limits)

    def claim_disk(self, nbytes: int) -> str | None:
        return None if self._quota is None else self._quota.claim(nbytes)

    def disk_room(self) -> int | None:
        return None if self._quota is None else self._quota.room()

    @property
    def gpu_ids(self) -> list[str] | None:
        """The host GPUs given to the container: None for all, [] for none."""
        return given_ids(self.spec.gpus or "none")

    def _user(self, uid: int | None) -> tuple[int, int]:
        """The container's user (docker_user.py): `uid` where given, else a uid of its
        own as root, else root outside where none can be claimed (`root_outside` says why:
        the run says it once, a typed notice)."""
        if uid is not None:
            return uid, uid
        user = container_user(self.workspace, claims=self._claims)
        self._claim, self.root_outside = user.claim, user.root_outside
        self._keeper = keeper_claim(user.claim)
        return user.uid, user.gid

    @property
    def keeper_uid(self) -> int:
        """The uid the container's init and main process run as (docker_tie.py)."""
        return KEEPER_UID if self._keeper is None else self._keeper.uid

    def root_outside_words(self, what: str) -> str | None:
        if self.root_outside is None:
            return None
        return docker_root_outside_words(what, self.root_outside)

    # --- life cycle ---------------------------------------------------------------------

    async def start(self) -> list[str]:
        async with self._start_lock:
            if self.container is not None:
                return []
            # Started again after a close, its claim let go (one that fell back stays root).
            if self._claims and self._claim is None and self.root_outside is None:
                self.uid, self.gid = self._user(None)
                self._signals = SessionSignals(lambda: self.container, f"{self.uid}:{self.gid}")
            # The containers of killed runs before their volumes are settled: one still
            # writing to its workspace's volume as it is carried back would lose what it
            # writes after (into an image then deleted). Then the volume, as the container
            # binds whatever is at the workspace's path.
            notices = await asyncio.to_thread(self._connect)
            await asyncio.to_thread(settle_before_use, self.workspace)
            if self._quota is not None:
                notices += await self._quota.start(self._stop_for_quota)
            try:
                # Cancelled as its container is made, the start waits for it and removes
                # it: a container started once no one awaits it ran on (start_step.py).
                # Told to stop, the thread ends at its next request to the engine.
                stop = threading.Event()
                notices += await made_or_undone(
                    lambda: self._start(stop), self._unmade, START_WAIT_S, self._pending, stop
                )
                if self._tie is not None:  # through a proxy's idle timeout (docker_tie.py)
                    self._tie.keep_alive()
            except BaseException:
                # A thread still making its container (past START_WAIT_S) binds the
                # volume: it is closed by the sandbox's close, once that thread removed
                # the container (`_pending`), never under it; nor under a container the
                # engine refused to remove (kept, as a killed mlra's is).
                if self._quota is not None and not self._pending.busy() and self.container is None:
                    await self._quota.close()
                raise
            return notices

    def _connect(self) -> list[str]:
        self.client = docker_client()
        self._engine = engine_of(self.client)
        removed = remove_leftover_containers(self.client)
        if not removed:
            return []
        return [
            "removed containers left by runs that ended without cleaning up: " + ", ".join(removed)
        ]

    def _start(self, stop: threading.Event) -> list[str]:
        """Make and start the container; cut short, what it made removed, at the next
        request to the engine once `stop` is set (the start gave up)."""
        try:
            return self._started(stop)
        except _StartStopped:
            self._unmade()
            raise SandboxError("the sandbox's start was given up") from None

    def _started(self, stop: threading.Event) -> list[str]:
        import docker.errors

        def go_on() -> None:
            if stop.is_set():
                raise _StartStopped

        notices: list[str] = []
        if self.spec.network and (refused := no_bridge(self.client)) is not None:
            raise refused  # a resumed run, a batch's, an attempt: checked here as well
        try:
            image = self.client.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise missing_image(self.image) from None
        for entry in (image.attrs.get("Config") or {}).get("Env") or []:
            if entry.startswith("PATH="):
                self._path = entry[len("PATH=") :]
        go_on()
        self._own_workspace()
        go_on()
        self._stdin = StdinFolder()
        try:  # its uid named, with its home, where `whoami`, git and pip look it up
            self._accounts = accounts.container_accounts(
                self.client, image.id, self._stdin.root, uid=self.uid, gid=self.gid
            )
        except BaseException:
            self._forget_stdin_dir()
            raise
        go_on()
        try:
            self.container = self.client.containers.create(**self._container_args())
        except docker.errors.APIError as exc:
            self._forget_stdin_dir()
            raise self._explain(exc) from None
        # Tied before it starts, so it never runs untied where the tie can be made.
        self._tie, untied = Tie.hold(self.container)
        if untied is None and self.keeper_uid == self.uid:
            untied = held_words(self.uid)
        if untied is not None:
            notices.append(untied)
        try:
            self.container.start()
        except docker.errors.APIError as exc:
            self._unmade()
            raise self._explain(exc) from None
        group = self._run_group()
        if group is not None and not group.holds(self.container.id):
            group.missed(self.container.id)
        go_on()
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
        go_on()
        # Read before any command of the agent's runs, so it names the real one.
        code, out = self.container.exec_run(
            ["cat", "/proc/1/task/1/children"], user=f"{self.uid}:{self.gid}"
        )
        first = out.decode(errors="replace").split()[:1]
        self._main_pid = first[0] if code == 0 and first and first[0].isdigit() else None
        return notices

    def _unmade(self, _notices: object = None) -> None:
        """Undo `_start`: its container and its stdin folder."""
        self._remove()
        self._forget_stdin_dir()

    def _container_args(self) -> dict[str, Any]:
        import docker.types

        volumes = {str(self.workspace): {"bind": INSIDE_WORKDIR, "mode": "rw"}}
        if self._stdin is not None:
            volumes[str(self._stdin.shown)] = {"bind": STDIN_DIR, "mode": "ro"}
        for shown, etc in zip(self._accounts, ("/etc/passwd", "/etc/group"), strict=False):
            volumes[str(shown)] = {"bind": etc, "mode": "ro"}
        for shown in self.spec.read_only:
            if shown.exists():
                real = str(shown.resolve())
                volumes[real] = {"bind": real, "mode": "ro"}
        for original, rel in read_only_mounts(self.workspace, self.spec.read_only_files):
            # The task's original over the workspace's copy, as bubblewrap shows it.
            volumes[original] = {"bind": f"{INSIDE_WORKDIR}/{rel}", "mode": "ro"}
        args: dict[str, Any] = {
            "image": self.image,
            "command": KEEPER,  # ends the container when mlra dies (docker_tie.py)
            **TIED_ARGS,
            "init": True,
            "name": f"mlra-{self.run_id.replace('/', '-')}-{secrets.token_hex(2)}",
            "hostname": "sandbox",
            "labels": run_labels(self.run_id),
            # Its init and main process only: each command's exec names the user.
            "user": f"{self.keeper_uid}:{self.keeper_uid}",
            # The keeper's; every exec names its own (the workspace, the commands' uid's).
            "working_dir": "/",
            "volumes": volumes,
            "environment": {},
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "network_mode": "bridge" if self.spec.network else "none",
            "pids_limit": self.pids_limit,
            # Nothing outside the workspace and the RAM-backed /tmp, /dev/shm is
            # writable: the image's own layer would be disk with no quota.
            "read_only": True,
        }
        group = self._run_group()
        if group is not None and group.cgroup_parent is not None:
            args["cgroup_parent"] = group.cgroup_parent  # the run's total held over all
        if self.memory_mb:
            args["mem_limit"] = f"{int(self.memory_mb)}m"
            args["memswap_limit"] = f"{int(self.memory_mb)}m"  # no swap on top
        tmp = f",size={self.tmp_mb}m" if self.tmp_mb else ""
        args["tmpfs"] = {"/tmp": f"rw,exec,nosuid,nodev,mode=1777{tmp}"}
        if self.shm_mb:
            args["shm_size"] = f"{self.shm_mb}m"
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

    def _run_group(self) -> DockerRunGroup | None:
        """The run's group this container is started under, while it holds the run."""
        group = self.spec.run_group
        return group if isinstance(group, DockerRunGroup) and group.held else None

    def _explain(self, exc: Exception) -> SandboxError:
        text = short_error(exc)
        if "device driver" in text or "nvidia" in text.lower():
            return no_gpu_runtime(self.spec.gpus, text)
        return SandboxError(f"the container could not be started: {text}")

    def _own_workspace(self) -> None:
        """Hand the whole workspace to the container's user.

        Walked by folder descriptors (trees.walk does not enter a folder that turned
        into a link between its lstat and its open, and does not recurse: a resumed
        run's workspace may hold a folder thousands of levels deep) and each entry
        changed relative to its folder without following links: a daemon of the
        agent's flipping a folder into a link to `/` must not get host files chowned.
        """
        if os.geteuid() != 0:
            return
        # To root too, where it fell back: a resumed run's workspace is a former claimed
        # uid's, which root without CAP_DAC_OVERRIDE could not write.
        run_uid.hand_tree(self.workspace, self.uid, self.gid)

    async def close(self) -> None:
        """Remove the container, then carry the workspace off its volume. Run to its end
        when cancelled meanwhile (an attempt stopped as its run closes): a close cut short
        at the container's removal left the volume mounted, its image in the run's folder
        for as long as mlra ran, and a search's disk budget counted it as the attempt's."""
        await finish_despite_cancel(self._close())

    async def _close(self) -> None:
        """The container gone, then the volume closed and the uid given back, whatever
        raises on the way; where the container could not be removed (the engine refused
        each time), neither: its processes may still write to the volume and run as the
        uid, so the volume stays mounted (carried back by the next mlra, which removes
        the container first) and the uid claimed until mlra ends."""
        await self._pending.ended()  # its container removed, nothing runs as the uid
        try:
            for running in list(self._running):
                with contextlib.suppress(Exception):
                    await running.kill()
            self._running.clear()
            await self._signals.settle()
        finally:
            gone = self.container is None or await asyncio.to_thread(self._remove)
            self._forget_stdin_dir()
            if gone:
                if self._quota is not None:  # nothing writes to the volume any more
                    await self._quota.close()
                for claim in (self._claim, self._keeper):  # no process runs as them
                    if claim is not None:
                        claim.release()
                self._claim = self._keeper = None

    def _forget_stdin_dir(self) -> None:
        if self._stdin is not None:
            self._stdin.remove()
            self._stdin = None

    async def _stop_for_quota(self) -> None:
        """Over the disk quota: kill every process in the container but its init and
        main process, so the container stays up for the agent to delete files."""
        for running in list(self._running):
            if self._main_pid is None:  # no way to spare the main process: sessions only
                with contextlib.suppress(Exception):
                    await running.kill()
        if self._main_pid is not None:
            await asyncio.to_thread(self._kill_all_but_main)

    def _kill_all_but_main(self) -> None:
        container = self.container
        if container is None or self._main_pid is None:
            return
        with contextlib.suppress(Exception):
            container.exec_run(
                ["sh", "-c", _KILL_ALL_BUT, "sh", self._main_pid], user=f"{self.uid}:{self.gid}"
            )

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
                raise SandboxError(
                    f"the container could not be stopped: {short_error(exc)}"
                ) from None
        try:
            container.wait(timeout=KILL_WAIT_S * 6)
        except Exception as exc:
            raise SandboxError(
                f"the container did not stop after SIGKILL: {short_error(exc)}"
            ) from None

    def _remove(self) -> bool:
        """Remove the container; whether it is gone. One the engine would not remove is
        kept, for a later close to try again."""
        container, self.container = self.container, None
        if container is None:
            return True
        refused = remove_container(container)
        if refused is None:
            if self._tie is not None:
                self._tie.release()
                self._tie = None
            return True
        self.container = container
        logger.warning(
            "could not remove container %s (%s): its workspace's volume stays mounted",
            container.name,
            short_error(refused),
        )
        return False

    def suspend_commands(self) -> None:
        """SIGSTOP each running command's session, as the local sandbox does (see
        docker_exec.py for why not `docker pause`)."""
        if self._paused or self.container is None:
            return
        self._paused = True
        for running in list(self._running):
            running.suspend()
        self._signal_all("STOP")  # daemons that left their session (setsid, nohup...)

    def resume_commands(self) -> None:
        if not self._paused:
            return
        self._paused = False
        self._signal_all("CONT")
        for running in list(self._running):
            running.resume()

    def _signal_all(self, sig: str) -> None:
        if self._main_pid is not None:
            self._signals.send_script(_SIGNAL_ALL_BUT, self._main_pid, sig)

    # --- files --------------------------------------------------------------------------
    # Read and written host-side through the bind mount; what mlra writes as root is
    # handed to the container's user so its commands can change it.

    def created(self, fd: int) -> None:
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
        # Its account's name (accounts.py), which tools that ask who they run as
        # (getpass, as torch's compile cache does) read first.
        env.update({"USER": accounts.SANDBOX_USER, "LOGNAME": accounts.SANDBOX_USER})
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
        timeout: float | TimeOut,
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
        if self._quota is not None:
            await self._quota.clear_to_start()  # the command's time starts after
        sink = OutputSink(on_output)
        started = time.monotonic()
        running = DockerExec(
            client=self.client,
            container=self.container,
            uid=self.uid,
            gid=self.gid,
            token=token,
            sink=sink,
            signals=self._signals,
            stdin_folder=self._stdin,
            tied=self._tie is not None,
        )
        stops_before = self._quota.stops if self._quota is not None else 0
        shared = RUN_SHARED if self._run_group() else ""
        self._running.add(running)
        try:
            begun = asyncio.ensure_future(
                asyncio.to_thread(
                    running.begin,
                    ["sh", "-c", WRAPPER, "sh", token, str(self.memory_mb or ""), shared, *command],
                    inside_cwd,
                    self._env(inside_cwd, env),
                    stdin,
                )
            )
            try:
                await asyncio.shield(begun)  # a cancel must not end the wait for it
            except BaseException:
                await finish_despite_cancel(running.kill_once_begun(begun))
                running.abandon()
                raise
            timed_out = await running.see_through(timeout, started)
            exit_code = await asyncio.to_thread(running.exit_code)
            ended = await asyncio.to_thread(running.tie_note, exit_code, sink.text())
        finally:
            self._running.discard(running)
            running.forget_stdin()
        output = sink.text()
        note = None if self._quota is None else self._quota.note_since(stops_before)
        notes = [n for n in (note, ended) if n is not None]
        for line in notes:
            output = f"{output.rstrip()}\n{line}\n"
            if on_output is not None:
                with contextlib.suppress(Exception):
                    on_output("stderr", f"{line}\n")
        return ExecResult(
            exit_code=exit_code,
            output=output,
            duration_s=round(time.monotonic() - started, 3),
            timed_out=timed_out,
            killed=timed_out,
            notes=notes,
            disk_note=note,
        )

    # --- resources ----------------------------------------------------------------------

    def usage(self) -> SandboxUsage | None:
        """The container's own CPU and memory use (one cheap, non-blocking stats call)
        and the GPUs it was given."""
        container = self.container
        if container is None:
            return None
        stats = self._stats.read(container)
        return SandboxUsage(
            cpu_percent=None if stats is None else stats.cpu_percent,
            cpus=self.spec.cpus,
            mem_used_mb=None if stats is None else stats.mem_used_mb,
            mem_limit_mb=None if stats is None else stats.mem_limit_mb or None,
            gpu_ids=self.gpu_ids,
        )
