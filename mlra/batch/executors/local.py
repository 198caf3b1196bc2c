"""Runs on this machine: a pool of `mlra run` subprocesses within its capacity.

A run starts only when the CPUs, memory and GPUs it asks for are free, so the
pool never holds more than the machine can; each GPU run gets its own devices
through CUDA_VISIBLE_DEVICES, and runs that asked for none see no GPU at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from mlra.batch.executors import LOCAL_RUN_ENV, Job
from mlra.batch.spec import Resources


@dataclass
class Capacity:
    cpus: float
    memory_gb: float
    gpus: list[str]
    """Device ids runs may be given (as CUDA_VISIBLE_DEVICES names them)."""

    @classmethod
    def of_this_machine(cls) -> Capacity:
        import psutil

        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:
            cpus = os.cpu_count() or 1
        return cls(
            cpus=float(cpus),
            memory_gb=psutil.virtual_memory().total / 2**30,
            gpus=visible_gpus(),
        )


def visible_gpus() -> list[str]:
    """The GPUs the batch may hand out (tools/sandbox/gpu_inventory.py): those the host's
    CUDA_VISIBLE_DEVICES names, else every one NVML sees; none without a driver."""
    from mlra.tools.sandbox.gpu_inventory import usable_gpus

    return [g.id for g in usable_gpus()]


def die_with_parent() -> None:
    """In the child: a batch killed outright takes its runs with it (they stay resumable)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class LocalExecutor:
    def __init__(self, capacity: Capacity | None = None, *, cwd: Path | None = None) -> None:
        self.capacity = capacity or Capacity.of_this_machine()
        self.cwd = cwd
        self._free_cpus = self.capacity.cpus
        self._free_memory = self.capacity.memory_gb
        self._free_gpus = list(self.capacity.gpus)
        self._changed = asyncio.Condition()

    def cannot_hold(self, resources: Resources) -> str | None:
        c = self.capacity
        if resources.placement:
            return "asks for custom resources, node labels or an accelerator type: --executor ray"
        if resources.gpus > len(c.gpus):
            return f"needs {resources.gpus} GPU(s); this machine has {len(c.gpus)}"
        if resources.cpus > c.cpus:
            return f"needs {resources.cpus:g} CPUs; this machine has {c.cpus:g}"
        if resources.memory_gb > c.memory_gb:
            return f"needs {resources.memory_gb:g} GB of memory; this machine has {c.memory_gb:.0f}"
        return None

    def _fits(self, r: Resources) -> bool:
        return (
            r.cpus <= self._free_cpus + 1e-9
            and r.memory_gb <= self._free_memory + 1e-9
            and r.gpus <= len(self._free_gpus)
        )

    async def _acquire(self, r: Resources) -> list[str]:
        async with self._changed:
            await self._changed.wait_for(lambda: self._fits(r))
            self._free_cpus -= r.cpus
            self._free_memory -= r.memory_gb
            gpus, self._free_gpus = self._free_gpus[: r.gpus], self._free_gpus[r.gpus :]
            return gpus

    async def _release(self, r: Resources, gpus: list[str]) -> None:
        async with self._changed:
            self._free_cpus += r.cpus
            self._free_memory += r.memory_gb
            self._free_gpus += gpus
            self._changed.notify_all()

    async def run(self, job: Job, log_path: Path) -> int:
        gpus = await self._acquire(job.resources)
        try:
            env = {**os.environ, **job.env, "CUDA_VISIBLE_DEVICES": ",".join(gpus)}
            env[LOCAL_RUN_ENV] = "1"
            args = list(job.args)
            if self.capacity.gpus:
                # The sandbox builds its environment from nothing: name the devices to it
                # too; a resumed run is given those the pool hands it now, not its old ones.
                args += ["--gpus", ",".join(gpus) or "none"]
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "ab") as log:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "mlra",
                    *args,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                    env=env,
                    cwd=self.cwd,
                    preexec_fn=die_with_parent,
                )
                try:
                    return await proc.wait()
                except asyncio.CancelledError:
                    # The batch is stopping: the run records a stop and stays resumable.
                    if proc.returncode is None:
                        proc.send_signal(signal.SIGTERM)
                        try:
                            await asyncio.wait_for(proc.wait(), 30)
                        except TimeoutError:
                            proc.kill()
                            await proc.wait()
                    raise
        finally:
            await self._release(job.resources, gpus)

    def close(self) -> None:
        pass
