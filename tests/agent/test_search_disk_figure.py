"""A search's disk figure (`pool_disk_mb`, shown by `mlra runs` and the Resources pane
against the run's disk budget) is what its workspace and attempts hold on disk. It
used to count each running attempt's volume image by its size, the whole quota, on
top of the files on the volume: three attempts of a 50 MB run read as 3.0 GB of a
2.0 GB budget. Real volumes: as root with loop devices and mkfs.ext4 (skipped, saying
why, elsewhere)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.loop.resources import ResourceMonitor
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.run_budget import held_mb
from mlra.console.panes.resources import budget_use
from mlra.tools.sandbox import volume
from tests.agent.test_search import _scripted_search
from tests.scripts import call, turn

WHY_NOT = volume.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no workspace volume: {WHY_NOT}")

PAD_MB = 3


def _du_mb(*folders: Path) -> float:
    """What `du` says the folders hold, a volume by what is on it (du goes into mounts),
    its image left out: the user's `du -sh` once the volumes are carried back."""
    out = subprocess.run(
        ["du", "-s", "-k", "-c", f"--exclude=*.{volume.TAG}-*.img", *map(str, folders)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return int(out.splitlines()[-1].split()[0]) / 1024


async def test_a_searchs_disk_figure_is_what_its_folders_hold_not_its_volumes_quotas(
    tmp_path: Path, answer_task: Path
) -> None:
    """While a1 runs on its volume (a quota of about half the 1 GB budget) with a 3 MB
    file on it, the run's sample counts the 3 MB and the workspace's files, as `du` does,
    not the half gigabyte; the Resources pane shows it so against the budget."""
    samples: list[ev.ResourceSample] = []
    reference: list[float] = []

    def measured(controller: RunController) -> bool:
        workspace = controller.run_dir / "attempts" / "a1" / "workspace"
        if not workspace.is_mount():
            return False
        (workspace / "pad.bin").write_bytes(b"x" * (PAD_MB * 2**20))
        samples.append(ResourceMonitor(controller.workspace).sample())
        reference.append(_du_mb(controller.workspace, controller.run_dir / "attempts"))
        return True

    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Wait")),
            turn("", call("attempt_wait", attempt="a1")),
            turn("Nothing to submit."),
        ],
        "worker": [{"hold": "measured", **turn("", call("report", summary="done"))}],
    }
    controller, _, _ = await _scripted_search(
        tmp_path / "runs",
        answer_task,
        script,
        release=("measured", measured),
        search="llm",
        attempts=1,
        disk_mb=1024,
    )
    events = read_events(controller.run_dir / "events.jsonl")
    run = next(e for e in events if isinstance(e, ev.RunStarted))
    share = next(e for e in events if isinstance(e, ev.AttemptStarted)).share
    assert run.budget is not None and share is not None and (share.disk_mb or 0) >= 100
    [sample], [du] = samples, reference
    assert sample.pool_disk_mb is not None
    assert PAD_MB <= sample.pool_disk_mb <= du + 0.1, (sample.pool_disk_mb, du)
    assert "disk 0.0/1.0G" in budget_use(run.budget, sample, compact=False)
    # The budget counts the ended attempt by the same measure.
    a1 = controller.run_dir / "attempts" / "a1"
    assert held_mb([a1]) <= _du_mb(a1) + 1
