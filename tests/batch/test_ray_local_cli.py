"""`mlra batch --executor ray` with no `--ray-address`, as a person types it: the batch
starts a local Ray of its own (slow: some 10 s to start one here).

Before, that Ray was started from a thread that ended as soon as it was up; Ray's head
processes die with the thread that started them (PR_SET_PDEATHSIG), so the batch printed
nothing and exited 1 a minute later, Ray's "Failed to connect to GCS" in ray.log only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import mlra_cli

pytest.importorskip("ray")


@pytest.mark.slow
def test_a_batch_on_a_local_ray_it_starts_itself_runs_to_its_end(
    tmp_path: Path, answer_task: Path
) -> None:
    (tmp_path / "answer").symlink_to(answer_task)
    args = ["batch", "--tasks", "answer", "--models", "baseline", "--seeds", "2"]
    args += ["--executor", "ray", "--out", "b", "--no-tui", "--isolation", "none"]
    first = mlra_cli(args, cwd=tmp_path, timeout=240)
    said = first.stdout + first.stderr
    assert first.returncode == 0, said + (tmp_path / "b" / "ray.log").read_text()
    assert "batch: 2/2 finished (0 already were; 0 retries)" in first.stdout
    again = mlra_cli(args, cwd=tmp_path, timeout=240)  # the same command: nothing to do
    assert again.returncode == 0, again.stdout + again.stderr
    assert "batch: 2/2 finished (2 already were; 0 retries)" in again.stdout
    assert list((tmp_path / "b" / ".incoming").iterdir()) == []  # its own folder removed
