"""A run being stepped that is killed and resumed goes on being stepped.

The real command line: a baseline run started `--paused --break bash`, stepped with the
real `mlra ctl` until its call waits for approval, killed, then `mlra resume`. Before, the
resumed run kept its breakpoints but not its stepping: once the held call was approved it
ran to its end (submitted, graded), past the steps the user meant to inspect.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from tests.agent.test_resume_held_call import _env, _kill, _mlra
from tests.conftest import ANSWER_TASK, mlra_cli


def _wait(
    proc: subprocess.Popen[bytes], log: Path, what: str, found: Callable[[list[ev.Event]], bool]
) -> list[ev.Event]:
    """Poll the log another process writes until its events satisfy `found`."""
    deadline = time.monotonic() + 120
    while True:
        events = read_events(log) if log.exists() and log.stat().st_size else []
        if found(events):
            return events
        assert proc.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"the run never showed {what}"
        time.sleep(0.02)


def _after_resume(events: list[ev.Event], want: Callable[[ev.Event], bool]) -> bool:
    resumed = [e.seq for e in events if isinstance(e, ev.RunResumed)]
    return bool(resumed) and any(want(e) for e in events if e.seq > resumed[-1])


def _control(action: str, source: str) -> Callable[[ev.Event], bool]:
    return lambda e: isinstance(e, ev.Control) and e.action == action and e.source == source


def test_a_stepped_run_resumed_pauses_after_the_approved_call(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_dir = runs / "r"
    log = run_dir / "events.jsonl"
    args = ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    args += ["--run-id", "r", "--isolation", "none", "--break", "bash", "--paused"]

    def ctl(*words: str) -> str:
        done = mlra_cli(["ctl", str(run_dir), *words], cwd=tmp_path, env=_env())
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    with _mlra(args, tmp_path, _env()) as proc:
        start = _control("pause", "start")
        _wait(proc, log, "the start's pause", lambda events: any(map(start, events)))
        ctl("step")  # the baseline's first step: its bash call waits at the breakpoint
        asked = lambda e: isinstance(e, ev.ApprovalRequested)  # noqa: E731
        _wait(proc, log, "the call waiting", lambda events: any(map(asked, events)))
        _kill(proc)

    with _mlra(["resume", str(run_dir), "--no-tui"], tmp_path, _env()) as proc:
        events = _wait(proc, log, "the call asked again", lambda es: _after_resume(es, asked))
        approved_at = events[-1].seq
        assert ctl("approve").startswith("approved")
        stepped = _control("pause", "step")
        events = _wait(proc, log, "the pause after the call", lambda es: _after_resume(es, stepped))
        # Paused after the approved call, which ran, and nothing after it: not graded.
        results = [e for e in events if isinstance(e, ev.ToolResult) and e.seq > approved_at]
        assert [r.ok for r in results] == [True]
        assert not any(isinstance(e, ev.EvaluationStarted | ev.RunFinished) for e in events)
        assert ctl("resume").startswith("resumed")
        assert proc.wait(timeout=120) == 0
    events = read_events(log)
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
