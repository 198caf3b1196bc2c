"""A command's math libraries sized to its CPU share (tools/sandbox/env.py
`thread_count`): under a quota, torch started a thread a core and the quota throttled
them all, as nothing told it the share."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.env import thread_count
from mlra.tools.sandbox.local import IsolationMode, LocalSandbox
from mlra.tools.sandbox.run_group import RunGroup
from tests.tools.test_local_sandbox import MODES

THREADS = "import torch; print(torch.get_num_threads())"


async def _torch_threads(workspace: Path, spec: SandboxSpec, mode: IsolationMode) -> int:
    sandbox = LocalSandbox(workspace, spec, isolation_mode=mode)
    await sandbox.start()
    try:
        result = await sandbox.exec(["python", "-c", THREADS], timeout=120)
    finally:
        await sandbox.close()
    assert result.exit_code == 0, result.output
    return int(result.output.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", MODES)
async def test_torch_in_a_sandbox_with_a_cpu_share_starts_a_thread_a_cpu_of_it(
    tmp_path: Path, mode: IsolationMode
) -> None:
    """An attempt's 1.5 CPUs of a run's 3 (`--cpus 3 --attempts-parallel 2`): one thread."""
    group = RunGroup(memory_mb=None, pids=None, cpus=3.0)
    spec = SandboxSpec(cpus=1.5, run_group=group)
    assert await _torch_threads(tmp_path, spec, mode) == 1


async def test_the_runs_cpus_size_its_own_sandbox_and_the_task_may_say_otherwise(
    tmp_path: Path,
) -> None:
    group = RunGroup(memory_mb=None, pids=None, cpus=1.0)  # `--cpus 1`, the run's own
    assert await _torch_threads(tmp_path, SandboxSpec(run_group=group), "none") == 1
    own = SandboxSpec(run_group=group, env={"OMP_NUM_THREADS": "2"})
    assert await _torch_threads(tmp_path, own, "none") == 2


async def test_with_no_share_torch_is_left_its_own_count_and_none_is_over_the_cpus(
    tmp_path: Path,
) -> None:
    sandbox = LocalSandbox(tmp_path, SandboxSpec(), isolation_mode="none")
    await sandbox.start()
    try:
        result = await sandbox.exec(["bash", "-c", "echo ${OMP_NUM_THREADS:-unset}"], timeout=60)
    finally:
        await sandbox.close()
    assert result.output.strip() == "unset"
    cpus = len(os.sched_getaffinity(0))
    assert thread_count(SandboxSpec(cpus=cpus + 30.0)) == cpus  # `--cpus 32` on 2
    assert thread_count(SandboxSpec(cpus=0.25)) == 1
