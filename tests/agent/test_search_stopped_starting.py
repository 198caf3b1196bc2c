"""An attempt stopped while its sandbox starts (tools/sandbox/workspace_disk.py): its
workspace's volume is being made as the supervisor's `attempt_stop` lands. The start
was given up while its thread went on to mount the volume, which no sandbox then
recorded: after the search ended the volume stayed mounted, its loop device and image
held until some later mlra's sandbox settled it. Meanwhile a search under a disk
budget counted the image as the stopped attempt's, and refused the next attempt; so
did one whose attempt was stopped as its Docker container closed. Real volumes: as
root with loop devices and mkfs.ext4 (skipped, saying why, elsewhere)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.tools.sandbox import volume
from tests.agent.test_search import _scripted_search
from tests.conftest import TEST_IMAGE
from tests.scripts import call, turn
from tests.tools.test_workspace_volume import _loops_released

WHY_NOT = volume.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no workspace volume: {WHY_NOT}")


def _volume_being_made(attempt: str) -> Callable[[RunController], bool]:
    """Whether `attempt`'s workspace volume image exists: its volume is being made."""

    def being_made(controller: RunController) -> bool:
        folder = controller.run_dir / "attempts" / attempt
        return any(folder.glob(f".workspace.{volume.TAG}-*.img"))

    return being_made


def _mounts_under(folder: Path) -> list[str]:
    """The mount points under `folder` in this process's mount namespace."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [p for line in lines if (p := line.split()[4]).startswith(f"{folder}/")]


async def test_an_attempt_stopped_as_its_volume_is_made_leaves_none_mounted(
    tmp_path: Path, answer_task: Path
) -> None:
    """The supervisor's `attempt_stop` is let go once a1's volume image exists, so it
    lands while the volume is being made and mounted: once the search has ended, no
    volume, loop device or image of it is left, and a1's workspace is a plain folder."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Sleep")),
            {"hold": "stop", **turn("", call("attempt_stop", attempt="a1"))},
            turn("", call("submit", path="answer.txt")),
        ],
        "worker": [turn("", call("bash", command="sleep 300", timeout=600))],
    }
    runs = tmp_path / "runs"
    controller, _, _ = await _scripted_search(
        runs,
        answer_task,
        script,
        release=("stop", _volume_being_made("a1")),
        search="llm",
        attempts=1,
    )
    events = read_events(controller.run_dir / "events.jsonl")
    stops = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "attempt_stop"]
    assert [s.ok for s in stops] == [True]
    finished = next(e for e in events if isinstance(e, ev.AttemptFinished))
    assert (finished.attempt, finished.status) == ("a1", "stopped")
    assert _mounts_under(tmp_path) == []
    assert _loops_released(tmp_path)
    assert not any(runs.rglob(f"*{volume.TAG}*"))
    workspace = controller.run_dir / "attempts" / "a1" / "workspace"
    assert workspace.is_dir() and not workspace.is_mount()


async def test_the_attempt_after_one_stopped_as_its_volume_is_made_gets_a_share(
    tmp_path: Path, answer_task: Path
) -> None:
    """Under a disk budget (256 MB: the run's own workspace 128, the attempts the rest),
    a2 starts from a1 (which wrote 16 MB) and is stopped while its volume is being made.
    The next attempt starts, with what a2 really keeps (its copy of a1's workspace and
    its log) taken from its share. The volume the abandoned start went on to make stayed
    in a2's folder, and a2 was measured with it (its whole share): a3 was refused, 'the
    run's disk budget of 256 MB is spent', the search left with nothing to start."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Answer")),
            turn("", call("attempt_wait", attempt="a1", timeout=120)),
            turn("", call("attempt_start", instructions="Improve", parent="a1")),
            {"hold": "stop", **turn("", call("attempt_stop", attempt="a2"))},
            turn("", call("attempt_start", instructions="Improve", parent="a1")),
            turn("", call("attempt_stop", attempt="a3")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt; head -c 16M /dev/zero > big")),
            turn("", call("report", summary="wrote 42")),
            turn("", call("bash", command="sleep 300", timeout=600)),
            turn("", call("bash", command="sleep 300", timeout=600)),
        ],
    }
    controller, _, _ = await _scripted_search(
        tmp_path / "runs",
        answer_task,
        script,
        release=("stop", _volume_being_made("a2")),
        search="llm",
        attempts=3,
        disk_mb=256,
    )
    events = read_events(controller.run_dir / "events.jsonl")
    starts = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "attempt_start"]
    assert [s.ok for s in starts] == [True, True, True], starts[-1].output
    shares = {e.attempt: e.share for e in events if isinstance(e, ev.AttemptStarted)}
    a2, a3 = shares["a2"], shares["a3"]
    assert a2 is not None and a3 is not None and a2.disk_mb and a3.disk_mb
    assert a2.disk_mb - 32 < a3.disk_mb < a2.disk_mb
    finished = {e.attempt: e.status for e in events if isinstance(e, ev.AttemptFinished)}
    assert finished == {"a1": "validated", "a2": "stopped", "a3": "stopped"}


async def test_an_attempt_stopped_as_its_container_closes_leaves_its_share_to_the_next(
    tmp_path: Path, answer_task: Path, docker_host: str
) -> None:
    """In Docker, a1 answers and its run ends; the supervisor's `attempt_stop` is let go
    then, landing while a1's container is being removed. Its close went no further: a1's
    volume stayed mounted, its image (a1's whole 128 MB share) in its folder, and a2 was
    refused, 'the run's disk budget of 256 MB is spent'. Now a2 starts with what a1
    left (a1's log and answer, a megabyte or so), and no volume of a1's is left."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Answer")),
            {"hold": "stop", **turn("", call("attempt_stop", attempt="a1"))},
            turn("", call("attempt_start", instructions="Answer")),
            turn("", call("attempt_stop", attempt="a2")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="wrote 42")),
            turn("", call("bash", command="sleep 300", timeout=600)),
        ],
    }

    def a1s_run_has_ended(controller: RunController) -> bool:
        log = controller.run_dir / "attempts" / "a1" / "events.jsonl"
        return log.exists() and "run_finished" in log.read_text()

    controller, _, _ = await _scripted_search(
        tmp_path / "runs",
        answer_task,
        script,
        release=("stop", a1s_run_has_ended),
        isolation="auto",
        sandbox="docker",
        image=TEST_IMAGE,
        search="llm",
        attempts=2,
        disk_mb=256,
    )
    events = read_events(controller.run_dir / "events.jsonl")
    starts = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "attempt_start"]
    assert [s.ok for s in starts] == [True, True], starts[-1].output
    shares = {e.attempt: e.share for e in events if isinstance(e, ev.AttemptStarted)}
    a2 = shares["a2"]
    assert a2 is not None and a2.disk_mb is not None and a2.disk_mb > 120
    a1 = controller.run_dir / "attempts" / "a1"
    assert not any(a1.glob(f"*{volume.TAG}*")) and not (a1 / "workspace").is_mount()
