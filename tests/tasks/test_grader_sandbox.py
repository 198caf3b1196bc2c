"""What a user notices of the grader's sandbox as root, where it runs as a uid of its own:
a task file the user left 0600 is still graded (and left as it was), its scratch quota
follows the run's `--disk`, and where bubblewrap cannot start as an unprivileged uid the
run says so once, a typed notice in its log and its lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.tasks.evaluators.base import run_evaluation
from mlra.tasks.spec import load_task
from mlra.tools.sandbox import bwrap as bw
from mlra.tools.sandbox import run_uid
from tests.conftest import ANSWER_TASK, answer_copy, mlra_cli
from tests.tools.refusing_bwrap import refusing_bwrap

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or bw.isolation_problem() is not None or not run_uid.CLAIMS_DIRS,
    reason="needs root and a working bubblewrap (the grader gets a uid of its own as root)",
)


def _task(tmp_path: Path, check: str | None = None) -> Path:
    return answer_copy(tmp_path / "task", files={} if check is None else {"hidden/check.py": check})


async def test_a_task_file_left_0600_is_graded_and_left_as_it_was(tmp_path: Path) -> None:
    task_dir = _task(tmp_path)
    expected = task_dir / "hidden" / "expected.txt"
    expected.chmod(0o600)  # as a tight umask leaves a file the user wrote
    closed = task_dir / "hidden" / "closed"  # and a folder only its owner may enter
    closed.mkdir(mode=0o700)
    (closed / "also.txt").write_text("42\n")
    (task_dir / "hidden" / "check.py").write_text(
        (ANSWER_TASK / "hidden" / "check.py").read_text()
        + "assert (task_root / 'hidden/closed/also.txt').read_text() == '42\\n'\n"
    )
    answer = tmp_path / "answer.txt"
    answer.write_text("42\n")
    work = tmp_path / "evaluation"
    outcome = await run_evaluation(load_task(task_dir), answer, work)
    assert outcome.ok and outcome.score == 1.0, outcome.error
    assert outcome.details["isolation"] == "bwrap"
    # The user's files as they were: nothing chmod-ed or chown-ed in place.
    assert (expected.stat().st_mode & 0o777, expected.stat().st_uid) == (0o600, 0)
    assert (closed.stat().st_mode & 0o777, closed.stat().st_uid) == (0o700, 0)
    assert not work.with_name("evaluation-task-files").exists()  # the copies went with it


def test_the_graders_scratch_quota_follows_the_runs_disk(tmp_path: Path) -> None:
    """`--disk 20m` bounds the grader's scratch folder as it bounds the workspace: a
    checker that writes 30 MB fails, naming the quota and that it came from --disk."""
    task_dir = _task(
        tmp_path,
        "import sys\nfrom pathlib import Path\nout = Path(sys.argv[3])\n"
        "out.with_name('big').write_bytes(b'x' * 30_000_000)\nout.write_text('{\"score\": 1.0}')\n",
    )
    runs = tmp_path / "runs"
    args = ["run", str(task_dir), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    proc = mlra_cli([*args, "--disk", "20m"], cwd=tmp_path)
    (run_dir,) = runs.iterdir()
    finished = [
        e for e in read_events(run_dir / "events.jsonl") if isinstance(e, ev.EvaluationFinished)
    ]
    assert len(finished) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    graded = finished[0]
    limits = graded.evaluator_limits
    assert limits is not None
    assert (limits.disk_mb, limits.sources["disk_mb"]) == (20, "the run's --disk")
    # The checker's write failed against that quota. Its error is mlra's line naming the
    # quota where the volume was seen full after it, else the checker's own ENOSPC (ext4
    # may refuse a write with a little space still free, which the line waits for).
    assert not graded.ok and graded.error is not None
    assert "No space left on device" in graded.error, graded.error
    if not graded.error.startswith("evaluation script failed"):
        assert graded.error.startswith(
            "grading needed more disk than its scratch quota of 20 MB (the run's --disk)"
        ), graded.error


def test_a_run_says_once_that_its_sandboxes_ran_as_root_outside(tmp_path: Path) -> None:
    """Where bubblewrap cannot start as an unprivileged uid (AppArmor on Ubuntu 24.04;
    here a bubblewrap that refuses every uid but root's), the agent's sandbox and the
    grader's both run as root outside: the run still scores, and says it once."""
    refusing = refusing_bwrap(tmp_path)
    runs = tmp_path / "runs"
    proc = mlra_cli(
        ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)],
        cwd=tmp_path,
        env={"MLRA_BWRAP": str(refusing)},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = runs.iterdir()
    events = read_events(run_dir / "events.jsonl")
    said = [e for e in events if isinstance(e, ev.Notice) and e.kind == "root_outside"]
    assert len(said) == 1  # the agent's sandbox fell back first; the grader's is not said again
    assert said[0].level == "warning"
    assert "so the agent's sandbox ran as root outside it" in said[0].message
    assert "No permissions to create new namespace" in said[0].message
    (finished,) = [e for e in events if isinstance(e, ev.EvaluationFinished)]
    assert finished.ok and finished.score == 1.0 and finished.isolation == "bwrap"
    assert "ran as root outside it" in proc.stdout  # the headless lines show it
