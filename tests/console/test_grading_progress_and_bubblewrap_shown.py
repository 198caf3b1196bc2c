"""What a user reads off a run: a long grading shows how far it has got, and
the run says which bubblewrap confined it (binary and version).

A whole baseline run through the real command line, the real bubblewrap and the task's
own evaluator script, whose grading waits, mid-way, until the test has seen its
progress in the run's log (`mlra report` without matplotlib and the batch's lines are
asserted in tests/batch/test_batch.py; Docker's engine version in
tests/tools/test_docker_sandbox.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import fold
from mlra.console.panes.status import activity
from mlra.tools.sandbox.bwrap import find_bwrap
from tests.conftest import answer_copy

CHECK_IN_TWO = '''
"""The answer task's check, graded in two halves with a progress bar between them:
the second waits until `release` appears in the task folder (60 s at most)."""
import json, sys, time
from pathlib import Path

artifact, task_root, out = (Path(a) for a in sys.argv[1:4])
sys.stderr.write("Scoring answers:  50%|#####     | 1/2 [00:00<00:00, 9.9it/s]\\r")
sys.stderr.flush()
deadline = time.monotonic() + 60
while not (task_root / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.02)
sys.stderr.write("Scoring answers: 100%|##########| 2/2 [00:00<00:00, 9.9it/s]\\n")
given = artifact.read_text().strip()
out.write_text(json.dumps({"score": float(given == "42"), "metrics": {}}))
'''


def test_a_grading_shows_its_progress_and_the_run_names_its_bubblewrap(tmp_path: Path) -> None:
    task = answer_copy(tmp_path / "task", files={"hidden/check.py": CHECK_IN_TWO})
    runs = tmp_path / "runs"
    log = runs / "r" / "events.jsonl"
    stdout = tmp_path / "stdout"
    args = ["run", str(task), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    with stdout.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlra", *args, "--run-id", "r"],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        # The grading is held mid-way until its progress is in the log: seen while it runs.
        deadline = time.monotonic() + 120
        while b'"done":1,"total":2' not in _read(log):
            assert proc.poll() is None, stdout.read_text()
            assert time.monotonic() < deadline, stdout.read_text()
            time.sleep(0.02)  # polling a file another process writes: nothing to await
        events = read_events(log)
        (task / "release").write_text("")
        assert proc.wait(timeout=120) == 0, stdout.read_text()
    finally:
        proc.kill()
        proc.wait()

    progress = [e for e in events if isinstance(e, ev.EvaluationProgress)]
    assert progress[-1].what == "Scoring answers"
    assert (progress[-1].done, progress[-1].total) == (1, 2)
    # The console's status line says it while the grading runs; the headless lines too.
    state = fold(events)
    assert state.phase == "evaluating"
    assert activity(state, state.elapsed_s)[0].plain == "grading 50% (1/2) Scoring answers"
    printed = stdout.read_text()
    assert "grading: 50% (1/2) Scoring answers" in printed
    assert '"score": 1.0' in (runs / "r" / "result.json").read_text()

    # Which bubblewrap confined the commands, and its version, as the binary says it.
    binary = find_bwrap()
    assert binary is not None
    said = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    version = re.search(r"\d+\.\d+(?:\.\d+)?", said)
    assert version is not None
    started = events[0]
    assert isinstance(started, ev.RunStarted)
    assert started.sandbox.isolated_by == binary
    assert started.sandbox.isolated_by_version == version[0]
    result = json.loads((runs / "r" / "result.json").read_text())
    assert (result["isolated_by"], result["isolated_by_version"]) == (binary, version[0])
    assert f"sandbox local (bwrap {version[0]} at {binary}, " in printed


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
