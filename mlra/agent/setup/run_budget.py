"""A run's budget, and each attempt's share of it.

Every sandbox used to take the machine's defaults for itself: two attempts at once got
the whole memory each (42 GB on a 24 GB machine) and the whole free disk twice, and
so did two runs of a batch. Now a top-level run computes one budget when it starts
(the user's flags, else the task's `[resources]` capped at the machine, else the
machine's defaults; `batch --parallel K` runs each 1/K of the defaults), records it in
`run_started`, and everything it starts draws from it:

- K attempts at once each get 1/K of its memory, CPUs and processes; one at a time,
  all of them (the run's own sandbox idles while it waits);
- of the disk, an attempt gets what the run's own workspace, the ended attempts'
  folders (kept: later attempts copy from them) and the running attempts' shares
  leave, shared between the attempts that may still start beside the running ones.

The shares say what each sandbox may take; a run-level cgroup (tools/sandbox/run_group.py)
holds the run's total, so over-subscribed shares still cannot pass it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Protocol

from mlra import events as ev
from mlra.agent.record.state import RunState
from mlra.agent.setup.config import RunConfig
from mlra.agent.setup.run_setup import limit_choices, sandbox_spec
from mlra.tasks.spec import TaskSpec
from mlra.tools.sandbox.backends import sandbox_backend
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.default_limits import (
    Chosen,
    batch_share_now,
    default_disk,
    default_memory,
)
from mlra.tools.sandbox.disk_use import disk_use
from mlra.tools.sandbox.run_group import RunGroup

MIB = 1024 * 1024
INODES_PER_MB = 64
"""One inode per 16 KiB of disk: ext4's default ratio."""
MIN_PIDS = 64
SMALL_DISK_ROOM_MB = 1024
"""A default quota leaving the run less than this beyond its starter files is told."""


class BudgetSpent(Exception):
    """Why an attempt cannot get a share (the disk is spent): one line for the agent."""


def run_budget(task: TaskSpec, config: RunConfig, workspace: Path) -> ev.Budget:
    """The budget of a run starting now: an attempt's own run has its share already."""
    if config.budget is not None:
        return config.budget
    k = config.machine_shared_by
    memory_mb, disk_mb, sources = limit_choices(task, config, workspace)
    if config.memory_mb is None:
        memory_mb, sources["memory_mb"] = _of_default(
            Chosen(memory_mb, sources.get("memory_mb", "")), default_memory(), k
        )
    from_default = config.disk_mb is None and disk_mb is None
    if config.disk_mb is None:
        disk_mb, sources["disk_mb"] = _of_default(
            Chosen(disk_mb, sources.get("disk_mb", "")),
            default_disk(workspace, config.machine_free_mb),
            k,
        )
        if from_default and config.machine_free_mb is not None:
            now = batch_share_now(Chosen(disk_mb, sources["disk_mb"]), workspace)
            disk_mb, sources["disk_mb"] = now.mb, now.source
    cpus: float | None = config.cpus
    if cpus is not None:
        sources["cpus"] = "--cpus"
    elif k > 1:
        count = os.cpu_count() or 1
        cpus = round(count / k, 2)
        sources["cpus"] = f"1/{k} of this machine's {count} CPUs (batch --parallel {k})"
    else:
        sources["cpus"] = "this machine's CPUs, no quota"
    pids = config.pids_limit or sandbox_backend(config.sandbox).default_pids
    sources["pids"] = "--pids-limit" if config.pids_limit else "default"
    return ev.Budget(
        memory_mb=memory_mb or None,
        cpus=cpus,
        disk_mb=disk_mb or None,
        disk_from_default=from_default,
        inodes=disk_mb * INODES_PER_MB if disk_mb else None,
        pids=pids,
        sources=sources,
    )


def _of_default(chosen: Chosen, default: Chosen, k: int) -> tuple[int | None, str]:
    """The task's figure (`chosen`, None where it names none) or the machine's default,
    either at most 1/K of the default when K runs of a batch run at once."""
    assert default.mb is not None
    share = max(1, default.mb // k)
    if chosen.mb is None:
        if k == 1:
            return default.mb, default.source
        return share, f"1/{k} of the {default.source} (batch --parallel {k})"
    if k > 1 and chosen.mb > share:
        return share, f"{chosen.source}, capped at 1/{k} of the default (batch --parallel {k})"
    return chosen.mb, chosen.source


def attempt_share(
    budget: ev.Budget, *, parallel: int, running: list[ev.Budget], held_mb: int
) -> ev.Budget:
    """A new attempt's share of the run's `budget` with `parallel` attempts at most at
    once, `running` the shares of those running now and `held_mb` what the run's own
    workspace and the ended attempts hold on disk. Raises BudgetSpent."""
    k = parallel
    why = f"1/{k} of the run's budget (--attempts-parallel {k})" if k > 1 else "the run's budget"
    sources = {
        name: why for name in ("memory_mb", "cpus", "pids") if getattr(budget, name) is not None
    }
    disk = None
    if budget.disk_mb is not None:
        reserved = sum(s.disk_mb or 0 for s in running)
        left = budget.disk_mb - held_mb - reserved
        slots = max(1, k - len(running))
        if left < slots:
            raise BudgetSpent(
                f"the run's disk budget of {budget.disk_mb} MB is spent: the run's workspace "
                f"and the ended attempts hold {held_mb} MB, the running ones' shares {reserved} "
                "MB; start from an ended attempt once fewer are running, or submit"
            )
        disk = left // slots
        sources["disk_mb"] = (
            f"{'1/' + str(slots) + ' of ' if slots > 1 else ''}the {left} MB of the run's "
            f"{budget.disk_mb} MB disk budget left by the run's workspace and the ended "
            f"attempts ({held_mb} MB) and the running ones' shares ({reserved} MB)"
        )
    return ev.Budget(
        memory_mb=None if budget.memory_mb is None else max(1, budget.memory_mb // k),
        cpus=None if budget.cpus is None else round(budget.cpus / k, 3),
        disk_mb=disk,
        disk_from_default=budget.disk_from_default,
        inodes=disk * INODES_PER_MB if disk else None,
        pids=None if budget.pids is None else max(MIN_PIDS, budget.pids // k),
        sources=sources,
        held_by=budget.held_by,
    )


def small_disk_notice(budget: ev.Budget, quota_mb: int | None, starter_mb: int) -> str | None:
    """Why a run's default disk quota is too small to count on, or None. A nearly full
    runs disk gave a run 62 MB (half the 0.1 GiB free beyond the reserve) and it said
    nothing: a task writing a checkpoint would have stopped over its quota mid-run. The
    rule: a default quota (not `--disk`, not the task's) that leaves under 1 GiB beyond
    what the starter files already hold. `quota_mb` is the quota in force, less than the
    budget's where other runs took space before its volume was made."""
    if not budget.disk_from_default or quota_mb is None:
        return None
    room = quota_mb - starter_mb
    if room >= SMALL_DISK_ROOM_MB:
        return None
    why = budget.sources.get("disk_mb", "the machine's default").removeprefix("default: ")
    return (
        f"the workspace's disk quota is only {quota_mb:,} MB ({why}), "
        f"{max(0, room):,} MB beyond the {starter_mb:,} MB its starter files hold: writing "
        "data or a checkpoint may stop the run over its quota; free space on the runs "
        "folder's disk, or ask for a quota with --disk SIZE"
    )


def own_share(budget: ev.Budget, config: RunConfig) -> ev.Budget:
    """The part of the disk a searching run's own sandbox takes: its workspace's volume
    is reserved whole when it is made, beside every attempt's, so it takes 1/(K+1) of
    the run's disk (K attempts at once) and the attempts the rest; a run that does not
    search, or an attempt's (its share already), takes its budget whole."""
    if config.search == "none" or config.attempt is not None or budget.disk_mb is None:
        return budget
    disk = max(1, budget.disk_mb // (config.attempts_parallel + 1))
    return budget.model_copy(update={"disk_mb": disk, "inodes": disk * INODES_PER_MB})


def roomy_volume(workspace: Path) -> bool:
    """The workspace is its volume, mounted, and has a GiB or more free on it: no small
    disk notice could be due, without walking its files (statvfs only). A run's start
    walked the whole starter for the notice's figure on every run."""
    if not os.path.ismount(workspace):
        return False
    try:
        st = os.statvfs(workspace)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize // MIB >= SMALL_DISK_ROOM_MB


def held_mb(folders: list[Path], volumes: Literal["live", "held"] = "held") -> int:
    """What `folders` hold of the disk budget, in MB: their blocks, as the run's disk
    figure counts them (tools/sandbox/disk_use.py: a hard link once; no mount entered
    and an image counted by its blocks, as an ended attempt has no live volume), or
    their inodes at the budget's 16 KiB each where those come to
    more. Counted by blocks alone, an attempt that left its inode budget of empty files
    (a few hundred KB) left the next attempts as many inodes again, beyond the run's
    `inodes`. `volumes="live"`: a mounted workspace volume counted by its files (a
    run's starter, once its volume is up)."""
    total = sum(
        max(use.bytes, use.inodes * (MIB // INODES_PER_MB))
        for use in disk_use(folders, volumes=volumes)
    )
    return -(-total // MIB)


def hold_run(budget: ev.Budget, config: RunConfig) -> tuple[ev.Budget, RunGroup | None]:
    """The run-level cgroup a top-level run's sandboxes are made under, and the budget
    saying whether one holds the run's total and, where none does, why."""
    group = sandbox_backend(config.sandbox).run_group(
        memory_mb=budget.memory_mb, pids=budget.pids, cpus=budget.cpus
    )
    if group is None:
        return budget, None
    via = group.setup()
    held = budget.model_copy(update={"held_by": via, "not_held": group.not_held})
    return held, group if group.held else None


class BudgetedRun(Protocol):
    """What `budgeted_spec` needs of the run (its controller)."""

    task: TaskSpec
    config: RunConfig
    run_dir: Path
    workspace: Path
    state: RunState
    run_group: RunGroup | None


def budgeted_spec(run: BudgetedRun, python_env: Path | None) -> tuple[SandboxSpec, ev.Budget]:
    """The run's sandbox spec with its limits from its budget (a resumed run's as it was
    recorded; an attempt's run: its share), and that budget. A top-level run makes its
    run-level cgroup here, once; its attempts' runs are given it (agent/agents/attempt_runs.py)."""
    budget = run.state.budget or run_budget(run.task, run.config, run.workspace)
    if run.config.attempt is None and run.run_group is None:
        budget, run.run_group = hold_run(budget, run.config)
    spec = sandbox_spec(
        run.task, run.config, run.run_dir, python_env=python_env,
        budget=own_share(budget, run.config), run_group=run.run_group,
    )  # fmt: skip
    return spec, budget
