"""Sampling what the run uses: GPUs through NVML, CPU and RAM through psutil (the
machine's, the run's own commands', and the whole run's from its cgroup against its
budget), the blocks the workspace holds on disk (a search's: its attempts' folders
too; tools/sandbox/disk_use.py, the measure its disk budget is shared by). Each sample
is an event, so a replay shows the figures as they were. A sample must cost next to
nothing: NVML and psutil calls are cheap, and the workspace walk is done at most every
few seconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlra.agent.metrics.files import MAX_FILES, metric_file_kind
from mlra.events import GpuSample, ResourceSample
from mlra.tasks.evaluators.graders_running import graders_in
from mlra.tools.sandbox.base import Sandbox, SandboxUsage
from mlra.tools.sandbox.disk_use import disk_use
from mlra.tools.sandbox.gpu_inventory import given_ids, named_indexes, nvml_uuid
from mlra.tools.sandbox.run_group import RunGroup


def disk_sizes(roots: list[Path], spot: Callable[[str], None] | None = None) -> list[int]:
    """The blocks each of `roots` holds, in bytes (tools/sandbox/disk_use.py), measured
    together (a hard link counts once); `spot` is told the path (relative to the first
    root) of each of its files whose name is a metric file's (agent/metrics/files.py)."""

    def metric(rel: str) -> None:
        if spot is not None and metric_file_kind(os.path.basename(rel)) is not None:
            spot(rel)

    return [use.bytes for use in disk_use(roots, metric if spot is not None else None)]


def _handle(pynvml: Any, index: int) -> Any:
    """One GPU's NVML handle, or None: one GPU NVML refuses does not hide the others."""
    try:
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None


class GpuMonitor:
    """NVML, opened once; "no GPU" is a state, not an error."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._uuids: list[str | None] = []
        self.error: str | None = None
        self.sample_error: str | None = None
        """Why the last sample left a GPU out (an NVML call it refused), for a report."""
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [_handle(pynvml, i) for i in range(count)]
            self._uuids = [nvml_uuid(pynvml, h) for h in self._handles]
            self._nvml = pynvml
            if not count:
                self.error = "no GPU"
        except Exception as exc:  # NVML missing, no driver, no device
            self.error = f"no GPU ({type(exc).__name__}: {exc})" if str(exc) else "no GPU"

    def given(self, ids: list[str]) -> set[int]:
        """The indexes of the GPUs `ids` name: indexes, UUIDs or unique starts of them, as
        `--gpus` and CUDA_VISIBLE_DEVICES name GPUs."""
        return named_indexes(ids, self._uuids)

    def sample(self) -> list[GpuSample]:
        if self._nvml is None:
            return []
        out = []
        for index, handle in enumerate(self._handles):
            if handle is None:
                self.sample_error = f"GPU{index}: NVML gave no handle for it"
                continue
            try:
                name = self._nvml.nvmlDeviceGetName(handle)
                mem = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as exc:
                self.sample_error = f"GPU{index}: {type(exc).__name__}: {exc}"
                continue
            try:  # a GPU whose utilisation NVML does not give is still shown
                util: float | None = float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except Exception as exc:
                self.sample_error = f"GPU{index} utilisation: {type(exc).__name__}: {exc}"
                util = None
            out.append(
                GpuSample(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    util_percent=util,
                    mem_used_mb=mem.used / 2**20,
                    mem_total_mb=mem.total / 2**20,
                )
            )
        return out


class ResourceMonitor:
    """Samples the host, seen through the run's sandbox where that has figures of its
    own (a container's CPU share, memory limit and GPUs): pass it as `sandbox`."""

    def __init__(
        self,
        workspace: Path,
        *,
        disk_every_s: float = 5.0,
        sandbox: Sandbox | None = None,
        group: RunGroup | None = None,
        attempts: Callable[[], list[Sandbox]] | None = None,
    ) -> None:
        import psutil

        self._psutil = psutil
        self.workspace = workspace
        self.sandbox = sandbox
        self.group = group
        """The run's cgroup (tools/sandbox/run_group.py): the whole run's use of its budget."""
        self.attempts = attempts
        """The sandboxes of a search's running attempts: their commands are the run's
        work too, so a searching run whose own sandbox only waits does not read as idle."""
        self._attempts = workspace.parent / "attempts"
        self._pool_disk_mb: float | None = None
        self.gpus = GpuMonitor()
        self._disk_every = disk_every_s
        self._disk_at = 0.0
        self._disk_mb = 0.0
        self._commands = CommandTrees()
        self.metric_files: list[str] = []
        """The metric files the last walk found (agent/metrics/), workspace-relative."""
        psutil.cpu_percent(interval=None)  # primes the counter: the next call is a delta

    def sample(self) -> ResourceSample:
        now = time.monotonic()
        if now - self._disk_at >= self._disk_every:
            found: list[str] = []
            searching = self._attempts.is_dir()
            roots = [self.workspace, self._attempts] if searching else [self.workspace]
            held = disk_sizes(roots, found.append)
            self._disk_mb = held[0] / 2**20
            self.metric_files = sorted(found)[:MAX_FILES]
            self._disk_at = now
            if searching:
                self._pool_disk_mb = sum(held) / 2**20
        mem = self._psutil.virtual_memory()
        sample = ResourceSample(
            cpu_percent=self._psutil.cpu_percent(interval=None),
            ram_used_mb=(mem.total - mem.available) / 2**20,
            ram_total_mb=mem.total / 2**20,
            disk_workspace_mb=round(self._disk_mb, 2),
            gpus=self.gpus.sample(),
            gpu_error=self.gpus.error,
        )
        if self._pool_disk_mb is not None:
            sample.pool_disk_mb = round(self._pool_disk_mb, 2)
        if self.group is not None:
            memory, processes = self.group.usage()
            sample.pool_mem_mb = None if memory is None else round(memory / 2**20, 1)
            sample.pool_processes = processes
        usage = self.sandbox.usage() if self.sandbox is not None else None
        boxes = self._attempt_boxes()
        # The attempts' commands and the graders of the run's validations (its own and
        # its attempts'): a run that waits on a validation works in its grader.
        graders = graders_in(self.workspace.parent)
        attempts = [pid for box in [*boxes, *graders] for pid in box.command_pids()]
        if usage is None:
            own = self.sandbox.command_pids() if self.sandbox else []
            self._commands.measure(sample, own + attempts)
            if self.sandbox is not None:
                self._given_only(sample, self.sandbox.spec.gpus)
        else:
            sample = sandbox_view(sample, usage, mem.total / 2**20, self.gpus)
            if attempts:  # the container's own use, and the attempts' commands on the host
                cpu, mem_mb, _ = self._commands.totals(attempts)
                sample.run_cpu_percent = (sample.run_cpu_percent or 0) + cpu
                sample.run_mem_mb = (sample.run_mem_mb or 0) + mem_mb
        # Attempts in containers of their own: their commands have no host pids to walk.
        for box in boxes:
            used = box.usage()
            if used is not None:
                sample.run_cpu_percent = (sample.run_cpu_percent or 0) + (used.cpu_percent or 0)
                sample.run_mem_mb = round((sample.run_mem_mb or 0) + (used.mem_used_mb or 0), 1)
        return sample

    def _given_only(self, sample: ResourceSample, gpus: str | None) -> None:
        """Only the GPUs the run was given (`--gpus`, the host's CUDA_VISIBLE_DEVICES; a
        search's attempts share them out), as a container's figures show only its own:
        on a shared machine the others' load is not the run's."""
        ids = given_ids(gpus or "all")
        if ids is None:
            return
        given = self.gpus.given(ids)
        sample.gpus = [g for g in sample.gpus if g.index in given]
        if not sample.gpus and sample.gpu_error is None:
            sample.gpu_error = "no GPU given to the run"

    def _attempt_boxes(self) -> list[Sandbox]:
        if self.attempts is None:
            return []
        try:
            return [box for box in self.attempts() if box is not None]
        except Exception:  # an attempt starting or ending as this reads: the next sample has it
            return []


class CommandTrees:
    """The run's own CPU and memory: the process trees of its running commands, not
    the whole machine's. psutil's per-process CPU figure is a delta since the last
    reading, so a process is kept from one sample to the next."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._known: dict[int, Any] = {}

    def measure(self, sample: ResourceSample, roots: list[int]) -> None:
        cpu, mem_mb, processes = self.totals(roots)
        sample.run_cpu_percent, sample.run_mem_mb, sample.run_processes = cpu, mem_mb, processes

    def totals(self, roots: list[int]) -> tuple[float, float, int]:
        """(CPU %, memory MB, processes) of the trees under `roots`."""
        psutil = self._psutil
        seen: dict[int, Any] = {}
        cpu = mem = 0.0
        for root in roots:
            try:
                leader = self._known.get(root) or psutil.Process(root)
                tree = [leader, *leader.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in tree:
                proc = self._known.get(proc.pid, proc)  # the one with the CPU counter primed
                try:
                    cpu += proc.cpu_percent(interval=None)
                    mem += proc.memory_info().rss
                except psutil.Error:
                    continue
                seen[proc.pid] = proc
        self._known = seen
        return round(cpu, 1), round(mem / 2**20, 1), len(seen)


def sandbox_view(
    sample: ResourceSample, usage: SandboxUsage, host_mem_mb: float, gpus: GpuMonitor
) -> ResourceSample:
    """What the sandbox has: its own CPU and memory use (CPU as a share of the CPUs it
    may use) and only the GPUs it was given, by index or by UUID (`gpus` knows which
    index a UUID names)."""
    sample.run_cpu_percent = usage.cpu_percent  # the container is the run's own
    sample.run_mem_mb = None if usage.mem_used_mb is None else round(usage.mem_used_mb, 1)
    if usage.cpu_percent is not None:
        cpus = usage.cpus or os.cpu_count() or 1
        sample.cpu_percent = round(min(usage.cpu_percent / cpus, 100.0), 1)
    if usage.mem_used_mb is not None:
        sample.ram_used_mb = round(usage.mem_used_mb, 1)
        sample.ram_total_mb = round(min(usage.mem_limit_mb or host_mem_mb, host_mem_mb), 1)
    ids = usage.gpu_ids
    if ids is not None:
        given = gpus.given(ids)
        sample.gpus = [g for g in sample.gpus if g.index in given]
        if not ids and sample.gpu_error is None:
            sample.gpu_error = "no GPU given to the container"
    return sample
