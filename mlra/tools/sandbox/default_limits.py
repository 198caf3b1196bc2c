"""The memory limit and disk quota a sandbox gets when nobody asked for one.

A run with no limit can take the machine from under mlra: one command held 4 GiB
in a process plus 3 GiB in `/tmp` and 1 GiB in `/dev/shm` (both RAM), and nothing
bounded what it wrote into the workspace. So every sandbox has both by default,
derived from the machine it runs on, and each says where it came from:

- memory: the machine's memory (physical RAM, or mlra's own cgroup limit where that
  is lower: a container, a batch node's slice) less a reserve for mlra and the OS,
  `max(2 GiB, 1/8 of it)`, and never less than half of it;
- disk: half the space free on the workspace's file system beyond its reserve
  (below) when the sandbox is made, and at most `DISK_CAP_MB` (200 GiB), or what
  `MLRA_DISK_CAP_GB` says: a machine that starts many runs side by side (a test suite,
  a shared box) caps each default so that the first ones do not leave the later ones
  nothing beyond the reserve.

The runs disk keeps a reserve no sandbox's quota may take, `max(2 GiB, 5%)` of the
disk: the run's log, snapshots, grading copies, a neighbour's run and the OS need it
(a workspace volume that would eat into it is refused: tools/sandbox/volume.py).

A task's `[resources]` values are what the task needs; they are capped at what the
machine can give (the memory default; 90% of the free space), with the cap said.
The user's flags are taken as given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024
MEMORY_RESERVE_MIN_MB = 2048
MEMORY_RESERVE_FRACTION = 8
"""The reserve is at least 1/8 of the machine's memory."""
DISK_CAP_MB = 200 * 1024
DISK_FREE_FRACTION = 2
"""The default quota is at most 1/2 of the free space..."""
DISK_CEILING_PERCENT = 90
"""...and a task's own is at most 90% of it: the log, snapshots and the OS need the rest."""
DISK_RESERVE_MIN_MB = 2048
DISK_RESERVE_PERCENT = 5
"""The runs disk's reserve: at least 2 GiB, and 5% of the disk's size."""
CGROUP_ROOT = Path("/sys/fs/cgroup")
NO_LIMIT_V1 = 1 << 60
"""cgroup v1 writes "no limit" as a number near 2**63."""


@dataclass(frozen=True)
class Chosen:
    """A limit and where it came from, as the log records it."""

    mb: int | None
    """None: no limit."""
    source: str


def _gib(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB"


# --- memory -----------------------------------------------------------------------------


def machine_memory_mb() -> int:
    """The memory mlra's processes can have: physical RAM, or less under a cgroup limit."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB
    limit = _own_cgroup_memory_mb()
    return min(total, limit) if limit else total


def _own_cgroup_memory_mb() -> int | None:
    """The lowest memory limit on mlra's own cgroup and its ancestors, if any."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, name = CGROUP_ROOT, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = CGROUP_ROOT / "memory", "memory.limit_in_bytes"
        else:
            continue
        group = base / path.lstrip("/")
        while True:
            try:
                text = (group / name).read_text().strip()
            except OSError:
                text = ""
            if text.isdigit() and int(text) < NO_LIMIT_V1:
                found.append(int(text) // MIB)
            if group == base or base not in group.parents:
                break
            group = group.parent
    return min(found) if found else None


def default_memory() -> Chosen:
    total = machine_memory_mb()
    reserve = max(MEMORY_RESERVE_MIN_MB, total // MEMORY_RESERVE_FRACTION)
    mb = max(total - reserve, total // 2)
    return Chosen(
        mb,
        f"default: this machine's {_gib(total)} less {_gib(total - mb)} for mlra and the OS",
    )


def task_memory(task_mb: int) -> Chosen:
    """A task's `memory_gb`, capped at what the machine can give its sandbox."""
    ceiling = default_memory()
    if ceiling.mb is not None and task_mb > ceiling.mb:
        return Chosen(
            ceiling.mb,
            f"the task's [resources] memory_gb ({_gib(task_mb)}), capped at this machine's "
            f"default ({ceiling.source.removeprefix('default: ')})",
        )
    return Chosen(task_mb, "the task's [resources] memory_gb")


def tmpfs_bounds(memory_mb: int) -> tuple[int, int]:
    """The sizes of /tmp and /dev/shm (MB) under a memory limit: a half and a quarter
    of it, so files there alone never fill the limit and leave no room to delete them."""
    return max(1, memory_mb // 2), max(1, memory_mb // 4)


# --- disk -------------------------------------------------------------------------------


def statvfs_of(path: Path) -> os.statvfs_result | None:
    """The file system holding `path`, or its nearest existing parent (a folder about to
    be made); None where none can be read."""
    for candidate in (path, *path.parents):
        try:
            return os.statvfs(candidate)
        except OSError:
            continue
    return None


def free_mb(path: Path) -> int:
    """Space free to mlra on the file system holding `path` (or its nearest existing parent)."""
    st = statvfs_of(path)
    return 0 if st is None else st.f_bavail * st.f_frsize // MIB


def disk_reserve_mb(path: Path) -> int:
    """What the disk holding `path` keeps free of every quota: `max(2 GiB, 5%)` of its size."""
    st = statvfs_of(path)
    if st is None:
        return DISK_RESERVE_MIN_MB
    size_mb = st.f_blocks * st.f_frsize // MIB
    return max(DISK_RESERVE_MIN_MB, size_mb * DISK_RESERVE_PERCENT // 100)


def beyond_reserve_mb(path: Path) -> int:
    """Space free on the disk holding `path` less its reserve (0 when inside it)."""
    return max(0, free_mb(path) - disk_reserve_mb(path))


def disk_cap_mb() -> int:
    """The most a default quota takes: `MLRA_DISK_CAP_GB` where set, else DISK_CAP_MB."""
    raw = os.environ.get("MLRA_DISK_CAP_GB", "").strip()
    try:
        return max(1, int(float(raw) * 1024)) if raw else DISK_CAP_MB
    except ValueError:
        return DISK_CAP_MB


def default_disk(path: Path, batch_free_mb: int | None = None) -> Chosen:
    """Half what is free beyond the reserve: a volume takes its quota from the disk when
    it is made, so sandboxes made one after another (a run, its grader, parallel
    attempts) each get half of what the last left, and none takes the reserve. A run of
    a batch takes half of `batch_free_mb`, what the batch found free beyond the reserve
    when it started, so that its runs at once get equal shares (a volume that no longer
    fits is made smaller as it is made: tools/sandbox/disk_claim.py)."""
    measured = beyond_reserve_mb(path) if batch_free_mb is None else batch_free_mb
    reserve, cap = disk_reserve_mb(path), disk_cap_mb()
    mb = max(1, min(measured // DISK_FREE_FRACTION, cap))
    when = "" if batch_free_mb is None else " when the batch started"
    return Chosen(
        mb,
        f"default: half the {_gib(measured)} free on the workspace's disk beyond its reserve "
        f"of {_gib(reserve)}{when}, at most {_gib(cap)}",
    )


def batch_share_now(chosen: Chosen, path: Path) -> Chosen:
    """A batch run's default disk share, at most half what is free beyond the reserve now
    (what a run alone would take). The batch's figure (`--machine-free-disk`) is from
    when it started: late in a long batch it is stale, and a wrong one (10**9) recorded
    a 200 GiB budget the volume, made smaller as it was made, never had. An honest
    figure is not cut: a sibling's share is at most half of it, so half what it left is
    still at least one share."""
    now = beyond_reserve_mb(path)
    if chosen.mb is None or chosen.mb <= now // DISK_FREE_FRACTION:
        return chosen
    return Chosen(
        max(1, now // DISK_FREE_FRACTION),
        f"{chosen.source}, capped at half the {_gib(now)} free beyond the reserve now",
    )


def task_disk(task_mb: int, path: Path) -> Chosen:
    """A task's `disk_gb`, capped at 90% of the space free and never the disk's reserve."""
    free = free_mb(path)
    ceiling = max(1, min(free * DISK_CEILING_PERCENT // 100, beyond_reserve_mb(path)))
    if task_mb > ceiling:
        return Chosen(
            ceiling,
            f"the task's [resources] disk_gb ({_gib(task_mb)}), capped at "
            f"{DISK_CEILING_PERCENT}% of the {_gib(free)} free on the workspace's disk, "
            f"less its reserve of {_gib(disk_reserve_mb(path))}",
        )
    return Chosen(task_mb, "the task's [resources] disk_gb")


# --- a sandbox's own --------------------------------------------------------------------

NO_LIMIT = 0
"""A spec's limit of 0 means "none" (the user's `--memory none`); None means the default."""


def memory_for(asked_mb: int | None, source: str | None) -> Chosen:
    """A sandbox's memory limit from its spec (None: the default; 0: none)."""
    if asked_mb is None:
        return default_memory()
    if asked_mb == NO_LIMIT:
        return Chosen(None, source or "no limit asked for")
    return Chosen(asked_mb, source or "the sandbox's spec")


def disk_for(asked_mb: int | None, source: str | None, workspace: Path) -> Chosen:
    """A sandbox's disk quota from its spec (None: the default; 0: none)."""
    if asked_mb is None:
        return default_disk(workspace)
    if asked_mb == NO_LIMIT:
        return Chosen(None, source or "no quota asked for")
    return Chosen(asked_mb, source or "the sandbox's spec")
