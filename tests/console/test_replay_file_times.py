"""The replay's Files pane dates a file as the live one does: by the file's own time."""

from __future__ import annotations

import os

from mlra.agent.record.eventlog import read_events
from mlra.agent.record.snapshots import SnapshotStore
from mlra.agent.record.workspace_history import WorkspaceHistory
from tests.conftest import BaselineRun


def test_a_replayed_file_shows_its_own_time_not_the_snapshots(
    answer_baseline_run: BaselineRun,
) -> None:
    run_dir = answer_baseline_run.run_dir
    history = WorkspaceHistory(read_events(run_dir / "events.jsonl"), SnapshotStore(run_dir))
    files = {info.path: info for info in history.tree_at() if not info.is_dir}
    assert "question.txt" in files
    for path, info in files.items():
        on_disk = os.stat(run_dir / "workspace" / path).st_mtime_ns / 1e9
        # Before, the time the snapshot was taken: a starter file copied in with its
        # own (older) time, shown live with it, showed in replay as of the run's start.
        assert abs(info.mtime - on_disk) < 1e-6, path
