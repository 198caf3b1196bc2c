"""How a run ends, said honestly: a run whose agent never submitted is never
reported as a submission (issue 15). Each ending is checked where the user reads
it: the log's `run_finished`, result.json, the headless last line and the exit
status; a run that was not submitted has nothing graded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.loop.drive import run_agent
from mlra.agent.record.eventlog import read_events
from tests.conftest import ANSWER_RECIPE, answer_copy, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, turn


def _run(tmp_path: Path, task: Path, script: dict[str, Any], *extra: str) -> tuple[int, str, Path]:
    with ScriptedModelServer(script) as server:
        args = ["run", str(task), "--model", "openai/test-model", "--no-tui"]
        args += ["--base-url", server.url_for("openai"), "--runs-dir", str(tmp_path / "runs")]  # type: ignore[list-item]
        proc = mlra_cli(
            [*args, *extra],
            cwd=tmp_path,
            timeout=120,
        )
    (run_dir,) = (tmp_path / "runs").iterdir()
    return proc.returncode, proc.stdout + proc.stderr, run_dir


def _ending(run_dir: Path) -> tuple[ev.RunFinished, list[ev.Event], dict[str, object]]:
    events = read_events(run_dir / "events.jsonl")
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished)
    result = json.loads((run_dir / "result.json").read_text())
    assert result["reason"] == finished.reason and result["status"] == finished.status
    return finished, events, result


def _not_graded(events: list[ev.Event]) -> None:
    assert not any(isinstance(e, ev.Submission | ev.EvaluationStarted) for e in events)


def test_a_supervisor_that_never_calls_a_tool_ends_no_tool_calls(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {"supervisor:fallback": turn("I think the answer is 42.")}
    code, out, run_dir = _run(tmp_path, answer_task, script)
    finished, events, result = _ending(run_dir)
    assert code == 1
    assert finished.status == "finished" and finished.reason == "no_tool_calls"
    assert "never called submit, so nothing was submitted" in finished.message
    assert "answered without a tool 4 turns in a row" in finished.message
    assert result["score"] is None
    _not_graded(events)
    last = out.strip().splitlines()[-1]
    assert last.startswith("run finished (no_tool_calls) · no score (the supervisor answered")
    assert "(submitted)" not in out and "the agent submitted" not in out


def test_a_supervisor_whose_every_turn_is_empty_says_so(tmp_path: Path, answer_task: Path) -> None:
    code, _, run_dir = _run(tmp_path, answer_task, {"supervisor:fallback": turn("")})
    finished, events, _ = _ending(run_dir)
    assert code == 1 and finished.reason == "no_tool_calls"
    assert "gave empty answers 4 turns in a row" in finished.message
    _not_graded(events)


def test_the_same_failing_call_again_and_again_ends_the_run(
    tmp_path: Path, answer_task: Path
) -> None:
    # answer.txt does not exist: each submit is an error observation, and the run goes on,
    # until the third identical one.
    script = {"supervisor:fallback": turn("Submitting.", call("submit", path="answer.txt"))}
    code, out, run_dir = _run(tmp_path, answer_task, script)
    finished, events, _ = _ending(run_dir)
    assert code == 1 and finished.reason == "repeated_failure"
    submits = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "submit"]
    assert len(submits) == 3 and not any(s.ok for s in submits)
    assert "submit call failed 3 times with the same arguments" in finished.message
    assert "does not exist in the workspace" in finished.message
    _not_graded(events)
    assert "run finished (repeated_failure)" in out


def test_the_supervisors_turns_are_bounded_and_the_limit_grades_like_a_budget(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": [
            turn("", plan("Answer the question", "Submit")),
            turn("", call("assign_subtask", step_id="1", instructions="Write answer.txt.")),
        ],
        "supervisor:fallback": turn("", plan("Answer the question", "Submit", done=1)),
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="done")),
        ],
    }
    code, _, run_dir = _run(tmp_path, answer_task, script, "--max-supervisor-turns", "5")
    finished, events, result = _ending(run_dir)
    assert finished.reason == "budget"
    assert finished.message == "supervisor turn limit reached (5 of 5 turns)"
    supervisor_turns = [
        e for e in events if isinstance(e, ev.StepStarted) and e.agent == "supervisor"
    ]
    assert len(supervisor_turns) == 5
    started = events[0]
    assert isinstance(started, ev.RunStarted) and started.config["supervisor_max_turns"] == 5
    # A limit imposed from outside grades what is there, and says it was not the agent.
    submission = next(e for e in events if isinstance(e, ev.Submission))
    assert submission.by == "budget"
    assert code == 0 and result["score"] == 1.0


def test_a_baseline_whose_recipe_timed_out_did_not_submit(
    tmp_path: Path, answer_task: Path
) -> None:
    task = answer_copy(
        tmp_path / "slow_answer",
        (ANSWER_RECIPE, 'command = "sleep 30"'),
        ('timeout = "1m"\n', 'timeout = "1s"\n'),
        ('timeout = "1s"\nsettings', 'timeout = "1m"\nsettings'),  # the evaluator's, as it was
        source=answer_task,
    )
    proc = mlra_cli(
        ["run", str(task), "--model", "baseline", "--no-tui", "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path,
        timeout=120,
    )
    (run_dir,) = (tmp_path / "runs").iterdir()
    finished, events, result = _ending(run_dir)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    step = next(e for e in events if isinstance(e, ev.ToolResult) and e.tool == "bash")
    assert step.timed_out
    submit = next(e for e in events if isinstance(e, ev.ToolResult) and e.tool == "submit")
    assert not submit.ok
    assert finished.status == "finished" and finished.reason == "no_submission"
    # The step that timed out is the cause named, not the submit it left nothing for.
    assert finished.message.startswith("the recipe's step 1 failed (timed out")
    assert finished.message.endswith("so nothing was submitted")
    assert result["score"] is None
    _not_graded(events)
    plans = [e for e in events if isinstance(e, ev.PlanUpdated)]
    assert [s.status for s in plans[-1].steps] == ["failed", "failed"]
    assert "run finished (no_submission)" in proc.stdout


def test_a_baseline_whose_recipe_step_failed_names_that_step_as_the_cause(
    tmp_path: Path, answer_task: Path
) -> None:
    """A step whose command is missing (a Docker image with `python3` and no `python`)
    is why nothing was submitted: the ending says so, with the step's own error, not
    only that the artifact the submit wanted does not exist."""
    task = answer_copy(
        tmp_path / "no_python",
        (ANSWER_RECIPE, 'command = "no-such-python-xyz"'),
        source=answer_task,
    )
    proc = mlra_cli(
        ["run", str(task), "--model", "baseline", "--no-tui", "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path,
        timeout=120,
    )
    (run_dir,) = (tmp_path / "runs").iterdir()
    finished, _, result = _ending(run_dir)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert finished.reason == "no_submission" and result["score"] is None
    assert finished.message == (
        "the recipe's step 1 failed (exit 127: no-such-python-xyz: command not found), "
        "so nothing was submitted"
    )
    assert "no score (the recipe's step 1 failed (exit 127" in proc.stdout


async def test_an_agent_that_returns_has_not_submitted() -> None:
    class Quits:
        async def run(self) -> None:
            return None

    ending = await run_agent(Quits())
    assert ending.reason == "no_submission" and not ending.evaluate
    assert ending.finished_message == "the agent stopped without calling submit"


def test_an_old_log_with_an_old_reason_still_reads(tmp_path: Path) -> None:
    line = (
        '{"v":1,"seq":1,"ts":1.0,"t":0.0,"type":"run_finished","status":"error",'
        '"reason":"error","message":"model provider failed: 500"}'
    )
    event = ev.parse_event(line.encode())
    assert isinstance(event, ev.RunFinished) and event.reason == "error"
