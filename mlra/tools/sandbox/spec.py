"""What the task and the flags ask of a sandbox: its spec, apart from the sandbox
classes (base.py) so that a spec can be written without importing them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlra.tools.sandbox.run_group import RunGroup


@dataclass
class SandboxSpec:
    """What the task and flags ask of the sandbox."""

    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    hide_paths: list[Path] = field(default_factory=list)
    """Host paths that must not be visible from inside (hidden task files, other runs)."""
    read_only: list[Path] = field(default_factory=list)
    """Host paths to show read-only at their own paths (e.g. under /tmp, which is fresh inside)."""
    read_write: list[Path] = field(default_factory=list)
    """Host paths to show writable at their own paths (the evaluator's dataset cache)."""
    read_only_files: dict[str, Path] = field(default_factory=dict)
    """Workspace-relative path -> the task's original file or folder, shown there
    read-only over the workspace (a task's `[files] read_only`): a command's write fails
    with the OS's error, and the file tools refuse it."""
    read_only_over: dict[Path, Path] = field(default_factory=dict)
    """Host path shown -> what is shown there instead, read-only: a copy mlra made that
    the sandbox's uid may read where the original is closed to it (the grader's copies
    of a task's 0600 files, tasks/evaluators/grader_files.py)."""
    memory_mb: int | None = None
    """For all the commands together (their /tmp and /dev/shm counted where the sandbox
    can): None for this machine's default (tools/sandbox/default_limits.py), 0 for none."""
    cpus: float | None = None
    gpus: str | None = None
    pids_limit: int | None = None
    file_size_mb: int | None = None
    disk_mb: int | None = None
    """The workspace's disk quota (blocks it holds on disk), enforced while commands run
    and against mlra's own writes: None for the default (from the free space), 0 for none."""
    disk_inodes: int | None = None
    """The workspace volume's inode budget (tools/sandbox/volume.py): None for the default."""
    disk_volume: bool = True
    """Keep the quota with a volume where one can be had; False: the du watcher always."""
    disk_shrinks: bool = False
    """The quota is (a share of) the machine's default: a volume made when others have
    taken space since takes half what is left rather than being refused; as is a quota
    of None."""
    limit_sources: dict[str, str] = field(default_factory=dict)
    """Where each limit came from ("memory_mb" -> "--memory", "the task", "default: ..."),
    recorded with the limits in force."""
    python_env: Path | None = None
    """The task's own virtual environment (tasks/environment.py), shown read-only at its
    own path, its `bin` first on PATH: `python` is the task's. None: mlra's own
    interpreter, as for any task that declares no requirements."""
    run_group: RunGroup | None = None
    """The cgroup of the run this sandbox belongs to (tools/sandbox/run_group.py): the
    sandbox's own group is made under it, so the run's total is kept whatever this
    sandbox's share. None: under mlra's own (a lone sandbox, the Docker sandbox)."""

    def draw_on(self, group: RunGroup | None) -> None:
        """Make this sandbox's group under a run's whose pool it draws on though the run
        did not start it for itself (a validation's grader): its memory no more than the
        run's, so a grader killed for it is told the run's figure, not the machine's."""
        self.run_group = group
        if group is None or group.memory_mb is None or not group.held:
            return
        if self.memory_mb is None or self.memory_mb > group.memory_mb:
            self.memory_mb = group.memory_mb
            self.limit_sources["memory_mb"] = "the run's budget, which a validation draws on"
