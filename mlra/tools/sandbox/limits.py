"""Memory, process, CPU and file-size limits for the local sandbox, as Docker has them.

A cgroup holds every process a run's commands start, daemons that left their
session included, so it bounds their memory and number together and can kill all
of them at once. cgroup v2 is used where this process may create a child group
with the memory and pids controllers (delegated), cgroup v1's memory and pids
hierarchies where they are writable (root on a v1 host). Otherwise rlimits do
what they can, per process; which mechanism is in force is recorded, with what
it cannot enforce, so a run never claims a limit it did not have. A CPU share
(`--cpus`, an attempt's part of it) is a cpu group's quota, where the sandbox has a
cgroup and a cpu group can be made beside it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import secrets
import shlex
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from mlra.events import LimitsInForce
from mlra.tools.sandbox.tether import kill_groups

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_PREFIX = "mlra-"
KILL_WAIT_S = 5.0
DEFAULT_PIDS = 4096
CPU_PERIOD_US = 100_000
DEFAULT_FILE_SIZE_MB = 64 * 1024
"""Large enough for a checkpoint shard; small enough that a runaway log cannot fill a disk."""

MEMORY_HINTS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")

TmpfsKind = Literal["sized", "unsized", "host"]
"""The sandbox's /tmp and /dev/shm: tmpfs mounts of its own, bounded by `--size`
("sized") or not (a bubblewrap older than 0.9: "unsized"), or the host's ("host":
no bubblewrap)."""


class SandboxLimits:
    """The limits of one sandbox's commands and the cgroup (if any) that holds them."""

    def __init__(
        self,
        *,
        memory_mb: int | None,
        pids: int | None,
        file_size_mb: int | None,
        tmp_mb: int | None = None,
        shm_mb: int | None = None,
        sources: Mapping[str, str] | None = None,
        parents: Mapping[str, Path] | None = None,
        cpu_join: Path | None = None,
        cpus: float | None = None,
    ) -> None:
        self.memory_mb = memory_mb
        self.cpus = cpus
        """The sandbox's CPU share (an attempt's of the run's `--cpus`), kept by a cpu
        group of its own (under the run's) where one can be made."""
        self._cpu_held = False
        self.pids = pids
        self.file_size_mb = file_size_mb
        self.tmp_mb = tmp_mb
        self.shm_mb = shm_mb
        self.sources = dict(sources or {})
        self._groups: dict[str, Path] = {}
        self._parents = dict(parents or {})
        """The run's groups (tools/sandbox/run_group.py) this sandbox's are made under:
        "" (v2), "memory" and "pids" (v1); none: under mlra's own."""
        self._cpu_join = cpu_join
        """cgroup v1: the run's cpu group, joined as it is (never removed here)."""
        """controller ("memory", "pids", or "" for a v2 group holding both) -> its folder."""
        self.version: int | None = None
        self.in_force = LimitsInForce(via="none")

    # --- setting up ---------------------------------------------------------------------

    def setup(
        self, *, tmpfs: TmpfsKind = "host", bwrap_version: str = "", root_outside: bool = False
    ) -> LimitsInForce:
        """Make the cgroup (where one can be had) and record what holds; `tmpfs` says
        what the sandbox's /tmp and /dev/shm are (`bwrap_version` names the binary that
        could not size them); `root_outside`: the commands' uid is root on the host."""
        # Named after this process, so a later mlra can tell the groups of one that was
        # killed (and never removed them) from those of one still running.
        name = f"{GROUP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        if not self._setup_v2(name):
            self._setup_v1(name)
        notes: list[str] = []
        memory_by = "cgroup" if self._memory_group() else "rlimit"
        pids_by = "cgroup" if self._pids_group() else None
        if self.pids is not None and pids_by is None:
            if root_outside:
                notes.append(
                    "the process limit is not enforced: no writable cgroup, and the kernel "
                    "ignores RLIMIT_NPROC for a sandbox whose uid maps to root"
                )
            else:
                pids_by = "rlimit"
        if self.memory_mb is not None and memory_by == "rlimit":
            notes.append(
                "memory is limited per process (RLIMIT_DATA), not for all commands together"
            )
        counted = memory_by == "cgroup" and tmpfs != "host"
        notes += self._tmpfs_notes(tmpfs, counted, bwrap_version)
        via = f"cgroup v{self.version}" if self.version else "rlimit"
        sized = tmpfs == "sized"
        self.in_force = LimitsInForce(
            memory_mb=self.memory_mb,
            cpus=self.cpus if self._cpu_held else None,
            pids=self.pids if pids_by else None,
            file_size_mb=self.file_size_mb,
            tmp_mb=self.tmp_mb if sized else None,
            shm_mb=self.shm_mb if sized else None,
            tmpfs_counted=None if tmpfs == "host" else counted and self.memory_mb is not None,
            sources=self.sources,
            via=via,
            notes=notes,
        )
        return self.in_force

    def _tmpfs_notes(self, tmpfs: TmpfsKind, counted: bool, bwrap_version: str) -> list[str]:
        # Without bubblewrap /tmp is the host's, as the notice of no isolation says.
        if self.memory_mb is None or tmpfs == "host" or counted:
            return []
        if tmpfs == "sized":
            return [
                "/tmp and /dev/shm are not counted in the memory limit (no cgroup); "
                f"each is bounded by its own size ({self.tmp_mb} MB, {self.shm_mb} MB)"
            ]
        return [
            "/tmp and /dev/shm are bounded by nothing but the host's RAM: no cgroup counts "
            f"them, and bubblewrap {bwrap_version or '(this one)'} cannot size a tmpfs "
            "(0.9 and later can)"
        ]

    def _setup_v2(self, name: str) -> bool:
        if not (CGROUP_ROOT / "cgroup.controllers").exists():
            return False
        own = _own_cgroup("")
        if own is None:
            return False
        parent = self._parents.get("") or CGROUP_ROOT / own.lstrip("/")
        _remove_stale_groups(parent)
        group = parent / name
        try:
            group.mkdir()
        except OSError:
            return False
        available = set((group / "cgroup.controllers").read_text().split())
        if not {"memory", "pids"} <= available:
            with contextlib.suppress(OSError):
                group.rmdir()
            return False
        try:
            if self.memory_mb is not None:
                (group / "memory.max").write_text(str(self.memory_mb * 1024 * 1024))
                with contextlib.suppress(OSError):
                    (group / "memory.swap.max").write_text("0")
            if self.pids is not None:
                (group / "pids.max").write_text(str(self.pids))
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            return False
        if self.cpus is not None and "cpu" in available:
            with contextlib.suppress(OSError):
                (group / "cpu.max").write_text(f"{cpu_quota_us(self.cpus)} {CPU_PERIOD_US}")
                self._cpu_held = True
        self._groups[""] = group
        self.version = 2
        return True

    def _setup_v1(self, name: str) -> None:
        for controller, limit_file, value in (
            ("memory", "memory.limit_in_bytes", self.memory_mb and self.memory_mb * 1024 * 1024),
            ("pids", "pids.max", self.pids),
        ):
            own = _own_cgroup(controller)
            run = self._parents.get(controller)
            # Under the run's group a sandbox with no limit of its own still has a group,
            # so its commands are counted in the run's.
            if own is None or (value is None and run is None):
                continue
            parent = run or CGROUP_ROOT / controller / own.lstrip("/")
            group = make_v1_group(parent / name, controller, {limit_file: value})
            if group is not None:
                self._groups[controller] = group
                self.version = 1
        own_cpu = _own_cgroup("cpu")
        if self.cpus is not None and self.version == 1 and own_cpu is not None:
            # A child's quota may not pass its parent's: a share never does.
            parent = self._cpu_join or CGROUP_ROOT / "cpu" / own_cpu.lstrip("/")
            settings = {"cpu.cfs_period_us": CPU_PERIOD_US,
                        "cpu.cfs_quota_us": cpu_quota_us(self.cpus)}  # fmt: skip
            group = make_v1_group(parent / name, "cpu", settings)
            if group is not None:
                self._groups["cpu"] = group  # joined instead of the run's, which holds it
                self._cpu_held = True

    def _memory_group(self) -> Path | None:
        return self._groups.get("") or self._groups.get("memory")

    def _pids_group(self) -> Path | None:
        return self._groups.get("") or self._groups.get("pids")

    def group_dirs(self) -> list[Path]:
        """The groups every command joins, each holding all its processes."""
        return list(self._groups.values())

    # --- starting commands ----------------------------------------------------------------

    def outer_prefix(self) -> list[str]:
        """A shell that joins the cgroups and then becomes the command (bwrap or the
        command itself), so every process the command starts is born inside.

        A shell costs less than a Python `preexec_fn`, which makes Popen fork the
        whole interpreter instead of using vfork.
        """
        if not self._groups:
            return []
        run_cpu = [self._cpu_join] if self._cpu_join and "cpu" not in self._groups else []
        joined = [*self._groups.values(), *run_cpu]
        joins = "".join(
            f"echo 0 > {shlex.quote(str(group / 'cgroup.procs'))} && " for group in joined
        )
        return ["/bin/sh", "-c", joins + 'exec "$@"', "mlra-limits"]

    def inside_prefix(self, prlimit: str | None) -> list[str]:
        """`prlimit` with the rlimits, run right before the command inside the sandbox.

        RLIMIT_NPROC counts the processes of a uid in its user namespace: set outside,
        it would count every process of the user running mlra.
        """
        if prlimit is None:
            return []
        args = [f"--{name}={value}" for name, value in self._rlimits()]
        if self.in_force.pids is not None and self._pids_group() is None:
            args.append(f"--nproc={self.pids}")
        return [prlimit, *args, "--"] if args else []

    def preexec(self, prlimit: str | None) -> Callable[[], None] | None:
        """The rlimits set between fork and exec, only where no `prlimit` can do it."""
        if prlimit is not None:
            return None
        kinds = {"fsize": resource.RLIMIT_FSIZE, "data": resource.RLIMIT_DATA}
        rlimits = [(kinds[name], value) for name, value in self._rlimits()]
        if not rlimits:
            return None

        def enter() -> None:
            for kind, value in rlimits:
                resource.setrlimit(kind, (value, value))

        return enter

    def _rlimits(self) -> list[tuple[str, int]]:
        limits: list[tuple[str, int]] = []
        if self.file_size_mb is not None:
            limits.append(("fsize", self.file_size_mb * 1024 * 1024))
        if self.memory_mb is not None and self._memory_group() is None:
            limits.append(("data", self.memory_mb * 1024 * 1024))
        return limits

    # --- watching and ending --------------------------------------------------------------

    def oom_kills(self) -> int:
        """How many processes the kernel killed for the memory limit so far."""
        group = self._memory_group()
        if group is None:
            return 0
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (group / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def memory_note(self, output: str, exit_code: int | None, oom_before: int) -> str | None:
        """A line for the agent when a command ran out of its memory, else None."""
        if self.memory_mb is None:
            return None
        if self.oom_kills() > oom_before:
            run = " (or the run's, shared by all its sandboxes)" if self._parents else ""
            return (
                f"[the sandbox's memory limit of {self.memory_mb} MB{run} was exceeded: "
                "the kernel killed a process of this command]"
            )
        if (
            self._memory_group() is None
            and exit_code not in (0, None)
            and any(hint in output for hint in MEMORY_HINTS)
        ):
            return (
                f"[this command probably hit the sandbox's memory limit of {self.memory_mb} MB "
                "per process]"
            )
        return None

    def pids_in_group(self) -> list[int]:
        group = self._pids_group() or self._memory_group()
        if group is None:
            return []
        try:
            return [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self) -> bool:
        """SIGKILL every process in the group until it is empty (a process may fork
        between a read of the group and the kill); False when there is no group."""
        group = self._pids_group() or self._memory_group()
        if group is None:
            return False
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            if self.version == 2 and (group / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (group / "cgroup.kill").write_text("1")
            pids = self.pids_in_group()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            # Killed processes leave the group once they are reaped.
            if not pids or time.monotonic() > deadline:
                return True
            time.sleep(0.005)

    def close(self) -> None:
        """Kill what is left and remove the groups."""
        self.kill_all()
        for group in self._groups.values():
            with contextlib.suppress(OSError):
                group.rmdir()
        self._groups.clear()


def _remove_stale_groups(parent: Path) -> None:
    """Remove the empty groups of mlra processes that are gone (killed, say), a run's
    group (tools/sandbox/run_group.py) with its sandboxes' groups in it."""
    try:
        entries = list(parent.glob(f"{GROUP_PREFIX}*"))
    except OSError:
        return
    for group in entries:
        owner = group.name[len(GROUP_PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            with contextlib.suppress(OSError):
                for child in group.glob(f"{GROUP_PREFIX}*"):
                    child.rmdir()
            with contextlib.suppress(OSError):
                group.rmdir()  # only an empty group can be removed


remove_stale_groups = _remove_stale_groups


def kill_group(group: Path) -> None:
    """SIGKILL every process in `group` (a run's leftovers at its end), a few rounds: as
    the tether's watcher kills a dead mlra's groups, with the same stdlib-only code."""
    kill_groups([str(group)])


def cpu_quota_us(cpus: float) -> int:
    """CFS quota a period for `cpus` CPUs (the kernel's least is 1 ms)."""
    return max(1000, int(cpus * CPU_PERIOD_US))


def make_v1_group(group: Path, controller: str, settings: Mapping[str, int | None]) -> Path | None:
    """Make a cgroup v1 group (old groups of dead mlra processes beside it removed first)
    and write its `settings` (a file -> its value; None: left as it is); None where it
    cannot be made or written, with nothing left. A memory limit is set with no swap on
    top, where the kernel accounts swap (swapaccount=1)."""
    _remove_stale_groups(group.parent)
    try:
        group.mkdir()
        for file, value in settings.items():
            if value is not None:
                (group / file).write_text(str(value))
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        return None
    limit = settings.get("memory.limit_in_bytes")
    if controller == "memory" and limit is not None:
        with contextlib.suppress(OSError):
            (group / "memory.memsw.limit_in_bytes").write_text(str(limit))
    return group


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path in the hierarchy of `controller` ("" for v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller == "" and controllers == "":
            return path
        if controller and controller in controllers.split(","):
            return path
    return None


own_cgroup = _own_cgroup
