"""A run whose default disk quota is too small to count on says so as it starts.

On a nearly full disk a run took 62 MB (half the 0.1 GiB free beyond the reserve) and
said nothing: a task writing a checkpoint would have stopped over its quota mid-run.
A real small disk (the 4 GiB ext4 image tests/conftest.py mounts, its reserve 2 GiB),
mostly filled, and a real `mlra run` on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.agent.setup.run_budget import roomy_volume, small_disk_notice
from mlra.tools.sandbox import volume
from mlra.tools.sandbox.default_limits import MIB, disk_reserve_mb, free_mb

WHY_NOT = volume.unavailable()
LEFT_MB = 200
"""Free beyond the reserve once the disk is filled: a default quota of about 100 MB."""


def _run(disk: Path, task: Path, *flags: str) -> tuple[str, list[ev.Event]]:
    runs = disk / "runs"
    argv = [sys.executable, "-m", "mlra", "run", str(task), "--model", "baseline", "--no-tui"]
    argv += ["--isolation", "none", "--runs-dir", str(runs), *flags]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    return done.stdout, read_events(run_dir / "events.jsonl")


def _fill(disk: Path) -> None:
    with open(disk / "other.img", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, (free_mb(disk) - disk_reserve_mb(disk) - LEFT_MB) * MIB)


@pytest.mark.skipif(WHY_NOT is not None, reason=f"no workspace volume: {WHY_NOT}")
def test_a_tiny_default_disk_quota_is_told_at_the_start(disk: Path, answer_task: Path) -> None:
    _fill(disk)
    out, events = _run(disk, answer_task)
    (started,) = [e for e in events if isinstance(e, ev.RunStarted)]
    assert started.budget is not None and started.budget.disk_mb is not None
    assert started.budget.disk_mb <= LEFT_MB // 2
    warned = [e for e in events if isinstance(e, ev.Notice) and "disk quota" in e.message]
    assert len(warned) == 1, warned
    said = warned[0].message
    assert warned[0].level == "warning"
    assert f"only {started.budget.disk_mb:,} MB" in said
    assert "beyond its reserve of 2.0 GiB" in said  # why: the free space and the reserve
    assert "--disk SIZE" in said and "free space" in said
    assert events.index(started) < events.index(warned[0])
    assert said in out  # the headless transcript shows it


@pytest.mark.skipif(WHY_NOT is not None, reason=f"no workspace volume: {WHY_NOT}")
def test_a_small_quota_asked_for_is_not_told(disk: Path, answer_task: Path) -> None:
    _fill(disk)
    out, events = _run(disk, answer_task, "--disk", "50m")
    assert not [e for e in events if isinstance(e, ev.Notice) and "disk quota" in e.message]
    assert "disk quota" not in out


def test_the_rule_is_under_a_gib_beyond_the_starter() -> None:
    def budget(mb: int, *, default: bool = True) -> ev.Budget:
        source = "default: half the 3.0 GiB free on the workspace's disk beyond its reserve"
        return ev.Budget(disk_mb=mb, disk_from_default=default, sources={"disk_mb": source})

    assert small_disk_notice(budget(1500), 1500, 10) is None
    assert small_disk_notice(budget(1500), 1500, 600) is not None  # the starter holds most
    assert small_disk_notice(budget(900), 900, 0) is not None
    assert small_disk_notice(budget(900, default=False), 900, 0) is None  # the task's, --disk
    said = small_disk_notice(budget(1500), 700, 10)  # its volume took less: others took space
    assert said is not None and "only 700 MB (half the 3.0 GiB free" in said


@pytest.mark.skipif(WHY_NOT is not None, reason=f"no workspace volume: {WHY_NOT}")
def test_the_starter_is_walked_only_where_a_notice_could_be_due(disk: Path, tmp_path: Path) -> None:
    """A volume with a GiB or more free needs no walk of its files (statvfs says so);
    a nearly full one, or a workspace that is no volume, is measured."""
    assert roomy_volume(disk)
    assert not roomy_volume(tmp_path)
    _fill(disk)
    with open(disk / "more.img", "wb") as f:  # the reserve too: under a GiB left
        os.posix_fallocate(f.fileno(), 0, (free_mb(disk) - LEFT_MB) * MIB)
    assert not roomy_volume(disk)
