"""The run-level cgroup (tools/sandbox/run_group.py): sandboxes made under it keep their
own limits, and the run's limit holds their total even where their shares add up to
more (a sandbox allowed 1 GB under a run of 64 MB is stopped at 64 MB)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from mlra.tools.sandbox.run_group import RunGroup

HOG = "x = b'x' * (200 * 2**20); print('kept', len(x))"


@pytest.fixture
def run_group() -> Iterator[RunGroup]:
    group = RunGroup(memory_mb=64, pids=32, cpus=None)
    if group.setup() == "none":
        pytest.skip("no writable cgroup with memory and pids controllers here")
    yield group
    group.close()


async def test_two_sandboxes_over_subscribed_are_held_to_the_runs_memory(
    tmp_path: Path, run_group: RunGroup
) -> None:
    """Each sandbox may have 1 GB; the run has 64 MB: the kernel kills the 200 MB hog,
    the agent is told, and the other sandbox (and the first) go on."""
    sandboxes = []
    for name in ("own", "attempt"):
        (tmp_path / name).mkdir()
        spec = SandboxSpec(memory_mb=1024, run_group=run_group)
        sb = LocalSandbox(tmp_path / name, spec, isolation_mode="none")
        await sb.start()
        sandboxes.append(sb)
    try:
        hog = await sandboxes[1].exec(["python3", "-c", HOG], timeout=60)
        assert hog.exit_code != 0 and "kept" not in hog.output
        assert "the run's, shared by all its sandboxes" in hog.output, hog.output
        ok = await sandboxes[0].exec(["python3", "-c", "print('fine')"], timeout=60)
        assert (ok.exit_code, ok.output) == (0, "fine\n")
        again = await sandboxes[1].exec(["echo", "still-here"], timeout=60)
        assert again.output == "still-here\n"
    finally:
        for sb in sandboxes:
            await sb.close()


async def test_the_runs_process_limit_holds_sandboxes_allowed_more(
    tmp_path: Path, run_group: RunGroup
) -> None:
    """A sandbox allowed 4,096 processes under a run of 32 cannot start 100."""
    spec = SandboxSpec(pids_limit=4096, run_group=run_group)
    sb = LocalSandbox(tmp_path, spec, isolation_mode="none")
    await sb.start()
    try:
        many = "for i in $(seq 100); do sleep 5 & done 2>&1; wait; echo done"
        result = await sb.exec(["bash", "-c", many], timeout=60)
        assert "Resource temporarily unavailable" in result.output, result.output
    finally:
        await sb.close()


def test_the_runs_group_and_its_sandboxes_groups_are_removed_at_its_end(tmp_path: Path) -> None:
    group = RunGroup(memory_mb=64, pids=32, cpus=0.5)
    if group.setup() == "none":
        pytest.skip("no writable cgroup here")
    parents = list(group.parents.values()) + ([group.cpu_join] if group.cpu_join else [])
    assert all(p.is_dir() for p in parents)
    (parents[0] / "mlra-child").mkdir()  # a sandbox's group, left behind
    group.close()
    # (Not "no group of this process": the other tests this worker ran may have left one.)
    assert not any(p.exists() for p in parents)


async def test_a_sandboxs_cpu_share_is_a_quota_of_its_own_under_the_runs(tmp_path: Path) -> None:
    """A run of 1 CPU whose attempt's share is 0.25: the attempt's commands ran under the
    run's quota only, so one attempt could take the whole run's CPU from the others; now
    the kernel keeps its share, in a cpu group of its own under the run's."""
    group = RunGroup(memory_mb=None, pids=64, cpus=1.0)
    via = group.setup()
    try:
        if via == "cgroup v1" and group.cpu_join is None:
            pytest.skip("no writable cpu hierarchy here")
        if (
            via == "cgroup v2"
            and "cpu" not in (group.parents[""] / "cgroup.subtree_control").read_text()
        ):
            pytest.skip("no cpu controller delegated here")
        if via == "none":
            pytest.skip("no writable cgroup here")
        sandbox = LocalSandbox(tmp_path, SandboxSpec(cpus=0.25, run_group=group),
                               isolation_mode="none")  # fmt: skip
        await sandbox.start()
        try:
            assert sandbox.limits.cpus == 0.25
            result = await sandbox.exec(["cat", "/proc/self/cgroup"], timeout=30)
            lines = [line.split(":", 2) for line in result.output.splitlines()]
            if via == "cgroup v1":
                path = next(p for _, c, p in lines if "cpu" in c.split(","))
                own = Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
                assert own.parent == group.cpu_join
                assert (own / "cpu.cfs_quota_us").read_text().split() == ["25000"]
            else:
                path = next(p for _, c, p in lines if c == "")
                own = Path("/sys/fs/cgroup") / path.lstrip("/")
                assert own.parent == group.parents[""]
                assert (own / "cpu.max").read_text().split() == ["25000", "100000"]
        finally:
            await sandbox.close()
    finally:
        group.close()
