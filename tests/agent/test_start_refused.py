"""A `--disk` the command line let through, refused once the sandbox starts: other runs'
sandboxes took the space in between (a batch's runs, started together). The run ends
with one readable line, in its transcript and its result, not an internal error's
traceback.

A real small disk (a 4 GiB ext4 image mounted as root, as tests/tools/test_disk_claim.py
makes), a real `mlra run` on it; the race is made certain by holding the disk's claim
(tools/sandbox/disk_claim.py) as another sandbox setting space aside would, and taking
the space once the run's folder exists (the command line has checked) and before
letting go."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.tools.sandbox import volume
from mlra.tools.sandbox.default_limits import MIB, disk_reserve_mb, free_mb
from mlra.tools.sandbox.disk_claim import disk_claim

WHY_NOT = volume.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no workspace volume: {WHY_NOT}")
WAIT_S = 60.0
"""For the run's folder to appear: the command line's start, on a loaded machine."""


def test_a_disk_taken_after_the_check_ends_the_run_in_one_line(
    disk: Path, answer_task: Path
) -> None:
    runs = disk / "runs"
    ask = (free_mb(disk) - disk_reserve_mb(disk)) * 2 // 3  # fits now; not once half is gone
    argv = [sys.executable, "-m", "mlra", "run", str(answer_task), "--model", "baseline"]
    argv += ["--no-tui", "--isolation", "none", "--disk", f"{ask}m", "--runs-dir", str(runs)]
    with disk_claim(disk):  # another sandbox, setting its space aside
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + WAIT_S
            while not list(runs.glob("*/events.jsonl")):  # past the command line's check
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline, "the run's folder never appeared"
                time.sleep(0.05)
            with open(disk / "other.img", "wb") as f:
                os.posix_fallocate(f.fileno(), 0, ask * MIB)
        except BaseException:
            proc.kill()
            raise
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert "Traceback" not in out and "internal error" not in out
    (run_dir,) = runs.iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "error"
    # Its log has no run_started; its result names it all the same (`mlra runs`, batches).
    assert (result["run_id"], result["model"]) == (run_dir.name, "baseline")
    assert result["task"]
    assert result["message"].startswith("the run's sandbox did not start: ")
    assert "disk quota of" in result["message"] and "\n" not in result["message"]
    events = read_events(run_dir / "events.jsonl")
    said = [e.message for e in events if isinstance(e, ev.Notice) and e.level == "error"]
    assert said == [result["message"]]
    assert isinstance(events[-1], ev.RunFinished) and events[-1].status == "error"
    assert not any(volume.TAG in p.name for p in disk.rglob("*"))  # no volume left behind
