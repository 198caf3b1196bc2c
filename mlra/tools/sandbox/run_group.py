"""The cgroup that holds a whole run: every sandbox of the run (its own and each
attempt's) is made under it, so the run's memory, processes and (with `--cpus`) CPU
time are one pool the kernel keeps, whatever each sandbox's own share says.

Shares can over-subscribe (K attempts at once each get 1/K of the memory, and the
run's own sandbox has the whole of it beside them): the group's limit is what holds
the total. It is made where the sandboxes' own groups would be (tools/sandbox/limits.py:
a delegated cgroup v2 group, or cgroup v1's memory and pids hierarchies where they are
writable), named after this process so that a later mlra removes it if this one is
killed, and removed when the run ends.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from mlra.tools.sandbox.limits import (
    CGROUP_ROOT,
    CPU_PERIOD_US,
    GROUP_PREFIX,
    cpu_quota_us,
    kill_group,
    make_v1_group,
    own_cgroup,
    remove_stale_groups,
)


class RunGroup:
    """One run's cgroup (v2) or groups (v1, one a controller), and the limits on them."""

    def __init__(self, *, memory_mb: int | None, pids: int | None, cpus: float | None) -> None:
        self.memory_mb = memory_mb
        self.pids = pids
        self.cpus = cpus
        self.parents: dict[str, Path] = {}
        """Where a sandbox makes its group: "" (v2), or "memory" and "pids" (v1)."""
        self.cpu_join: Path | None = None
        """cgroup v1: the run's `cpu` group, which the sandboxes' commands join as it is
        (a sandbox makes no cpu group of its own)."""
        self.via = "none"
        self.name = f"{GROUP_PREFIX}{os.getpid()}-run-{secrets.token_hex(4)}"
        """The group's name in every hierarchy (a later mlra reads its owner's pid in it)."""
        self.not_held: str | None = None
        """Why the run's total is not held (via "none"), in words for the user."""

    @property
    def held(self) -> bool:
        return self.via != "none"

    def setup(self) -> str:
        """Make the group(s); how the run's total is held: "cgroup v2", "cgroup v1" or
        "none" (no writable cgroup: each sandbox keeps only its own limits)."""
        if self._setup_v2(self.name):
            self.via = "cgroup v2"
        elif self._setup_v1(self.name):
            self.via = "cgroup v1"
        else:
            self.not_held = "no writable cgroup with the memory and pids controllers here"
        return self.via

    def _parent(self, controller: str) -> Path | None:
        """Where the run's group is made in `controller`'s hierarchy ("" for v2): beside
        this process's own group, so the run stays inside whatever holds mlra itself."""
        own = own_cgroup(controller)
        if own is None:
            return None
        return CGROUP_ROOT / controller / own.lstrip("/")  # "" adds nothing

    def _setup_v2(self, name: str) -> bool:
        if not (CGROUP_ROOT / "cgroup.controllers").exists():
            return False
        parent = self._parent("")
        if parent is None:
            return False
        remove_stale_groups(parent)
        group = parent / name
        try:
            group.mkdir()
            available = set((group / "cgroup.controllers").read_text().split())
            if not {"memory", "pids"} <= available:
                raise OSError("no memory and pids controllers")
            if self.memory_mb is not None:
                (group / "memory.max").write_text(str(self.memory_mb * 1024 * 1024))
                with contextlib.suppress(OSError):
                    (group / "memory.swap.max").write_text("0")
            if self.pids is not None:
                (group / "pids.max").write_text(str(self.pids))
            if self.cpus is not None and "cpu" in available:
                (group / "cpu.max").write_text(f"{cpu_quota_us(self.cpus)} {CPU_PERIOD_US}")
            (group / "cgroup.subtree_control").write_text("+memory +pids")
            if self.cpus is not None and "cpu" in available:
                # Each sandbox's share its own cpu.max (tools/sandbox/limits.py).
                with contextlib.suppress(OSError):
                    (group / "cgroup.subtree_control").write_text("+cpu")
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            return False
        self.parents[""] = group
        return True

    def _setup_v1(self, name: str) -> bool:
        limits: list[tuple[str, str, int | None]] = [
            ("memory", "memory.limit_in_bytes", self.memory_mb and self.memory_mb * 1024 * 1024),
            ("pids", "pids.max", self.pids),
        ]
        if self.cpus is not None:
            limits.append(("cpu", "cpu.cfs_quota_us", cpu_quota_us(self.cpus)))
        made: dict[str, Path] = {}
        for controller, limit_file, value in limits:
            parent = self._parent(controller)
            if parent is None:
                continue
            settings = {limit_file: value}
            if controller == "cpu":  # the period first: the quota is read against it
                settings = {"cpu.cfs_period_us": CPU_PERIOD_US, **settings}
            group = make_v1_group(parent / name, controller, settings)
            if group is not None:
                made[controller] = group
        if "memory" not in made or "pids" not in made:
            # Half a pool holds nothing together: the sandboxes make their groups as before.
            for group in made.values():
                with contextlib.suppress(OSError):
                    group.rmdir()
            return False
        self.cpu_join = made.pop("cpu", None)
        self.parents = made
        return True

    def usage(self) -> tuple[int | None, int | None]:
        """(memory bytes, processes) the whole run holds now, where the group can say."""
        memory = self.parents.get("") or self.parents.get("memory")
        pids = self.parents.get("") or self.parents.get("pids")
        names = ("memory.current",) if "" in self.parents else ("memory.usage_in_bytes",)
        return _read_int(memory, names[0]), _read_int(pids, "pids.current")

    def close(self) -> None:
        """Kill what is left in the run's groups and remove them (the sandboxes' own groups
        under them first: a group with children cannot be removed)."""
        groups = [*self.parents.values(), *([self.cpu_join] if self.cpu_join else [])]
        for group in groups:
            for child in _children(group):
                kill_group(child)
                with contextlib.suppress(OSError):
                    child.rmdir()
            kill_group(group)
            with contextlib.suppress(OSError):
                group.rmdir()
        self.parents.clear()
        self.cpu_join = None
        self.via = "none"


def _children(group: Path) -> list[Path]:
    try:
        return [p for p in group.iterdir() if p.is_dir()]
    except OSError:
        return []


def _read_int(group: Path | None, name: str) -> int | None:
    if group is None:
        return None
    try:
        return int((group / name).read_text().strip())
    except (OSError, ValueError):
        return None
