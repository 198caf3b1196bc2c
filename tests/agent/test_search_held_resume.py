"""A search killed while its attempt's validation went on as the attempt's closing one
(agent/agents/closing_validation.py), then resumed: the grading is lost with the run, and
the attempt's transcript said first that it "goes on as the closing one", then
`interrupted`, then that the artifact is validated, with nothing to say the first was
lost. The notice at resume says so. The real command line, killed for real once the
attempt's log holds the notice that the grading goes on (by events)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from tests.agent.test_search_held_validation import _at_limit, _held_grading_task
from tests.conftest import SECRET_ENV, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn


def test_a_held_validation_lost_with_a_killed_run_is_said_lost_on_resume(
    tmp_path: Path, answer_task: Path
) -> None:
    task = _held_grading_task(answer_task, tmp_path)
    grader = task / "hidden" / "held.py"
    grader.write_text(  # its pid, for the test to end the one the kill leaves behind
        f"import os\nopen({str(tmp_path / 'pid')!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        + grader.read_text()
    )
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42", time_limit=8)),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("validate", path="answer.txt")),
            turn("", call("bash", command="sleep 100", timeout=300)),
        ],
    }
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env["OPENAI_API_KEY"] = "sk-test-not-a-secret"
    runs = tmp_path / "runs"
    run_dir = runs / "s"
    child = run_dir / "attempts" / "a1" / "events.jsonl"
    with ScriptedModelServer(script, turn_by_history=True) as server:
        args = [
            *(sys.executable, "-m", "mlra", "run", str(task), "--model", "openai/test"),
            *("--base-url", server.url_for("openai"), "--no-tui", "--runs-dir", str(runs)),
            *("--run-id", "s", "--search", "llm", "--attempts", "1"),
            *("--attempt-min-time", "5s", "--isolation", "none", "--time-limit", "10m"),
        ]
        proc = subprocess.Popen(
            args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            deadline = time.monotonic() + 120
            while not (child.exists() and any(_at_limit(e) for e in read_events(child))):
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"never held (exit {proc.poll()})")
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)  # the grading goes on as the closing one
        finally:
            proc.kill()
            proc.wait()
            assert proc.stderr is not None
            proc.stderr.close()
        for pid in (tmp_path / "pid").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)  # its grader, if its watcher missed it
        (tmp_path / "go").touch()
        resumed = mlra_cli(["resume", str(run_dir), "--no-tui"], cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    own = read_events(child)
    asked = next(e for e in own if isinstance(e, ev.ToolCall) and e.tool == "validate")
    lost = next(e for e in own if isinstance(e, ev.ToolResult) and e.call_id == asked.call_id)
    assert lost.error == "interrupted"
    went_on, again = [e for e in own if _at_limit(e)]
    assert "goes on as the closing one" in went_on.message, went_on.message
    assert again.message.startswith(
        "its time limit was reached with answer.txt in its workspace: validating it again "
        f"(its validation {asked.call_id}, going on as the closing one, was lost as the run "
        "stopped), within the "
    ), again.message
    assert went_on.seq < lost.seq < again.seq
    (closing,) = [e for e in own if isinstance(e, ev.Validation)]
    assert closing.call_id != asked.call_id and closing.ok and closing.score == 0.5
