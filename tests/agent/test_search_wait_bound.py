"""The greedy policy's wait says the wait it is: bounded by the run's time left (as the
`attempt_wait` tool bounds it), not the hour it asked for whatever the run's limit."""

from __future__ import annotations

import re
from pathlib import Path

from mlra.durations import parse_duration
from tests.agent.test_search import _variant_task
from tests.conftest import mlra_cli


def test_a_searchs_wait_is_said_within_the_time_the_run_has_left(
    tmp_path: Path, answer_task: Path
) -> None:
    task = _variant_task(answer_task, tmp_path)
    args = [
        *("run", str(task), "--model", "baseline", "--no-tui", "--isolation", "none"),
        *("--search", "greedy", "--attempts", "2", "--time-limit", "5m"),
    ]
    proc = mlra_cli(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bounds = re.findall(r"\] attempt_wait for any attempt, up to (\S+)", proc.stdout)
    assert bounds, proc.stdout
    assert all(0 < parse_duration(b) <= 300 for b in bounds), bounds
    assert "up to 60m" not in proc.stdout
