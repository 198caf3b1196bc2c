"""Whole runs through the real command line, the real SDKs and a scripted model
server on loopback: the log, the result, dispatch by name, error observations,
secrets kept out, the deadline (in-process, its clock counted from the command it
cuts) and the budgets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.conftest import clock_from, mlra_cli, processes_running
from tests.fakes.model_server import Api, ScriptedModelServer
from tests.scripts import answering_script, call, plan, supervisor_answering, turn

CANARY = {"ANTHROPIC_API_KEY": "sk-ant-canary-7f3a9", "OPENAI_API_KEY": "sk-canary-openai-51c2"}


def _run(
    tmp_path: Path, task: Path, server: ScriptedModelServer, api: Api, *extra: str
) -> tuple[int, str, str, Path]:
    proc = mlra_cli(
        [
            "run",
            str(task),
            "--model",
            f"{api}/test-model",
            "--base-url",
            server.url_for(api),
            "--no-tui",
            "--runs-dir",
            str(tmp_path / "runs"),
            *extra,
        ],
        cwd=tmp_path,
        env=CANARY,
        timeout=120,
    )
    run_dirs = sorted((tmp_path / "runs").iterdir()) if (tmp_path / "runs").exists() else []
    assert len(run_dirs) == 1, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr, run_dirs[0]


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_scripted_run_end_to_end(tmp_path: Path, answer_task: Path, api: Api) -> None:
    with ScriptedModelServer(answering_script()) as server:
        code, out, err, run_dir = _run(tmp_path, answer_task, server, api)
        worker_requests = server.requests_for("worker")
    assert code == 0, err
    last = out.strip().splitlines()[-1]
    assert "score exact_match = 1" in last and str(run_dir.name) in last

    events = read_events(run_dir / "events.jsonl")
    assert isinstance(events[0], ev.RunStarted) and events[0].model == f"{api}/test-model"
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    plans = [e for e in events if isinstance(e, ev.PlanUpdated)]
    assert plans[0].steps[0].title == "Answer the question"
    assert any(s.status == "in_progress" for p in plans for s in p.steps)
    assert any(isinstance(e, ev.TextDelta) for e in events)  # thoughts streamed as written
    assert any(isinstance(e, ev.WorkerThought) and e.text == "Write the answer." for e in events)

    calls = [e for e in events if isinstance(e, ev.ToolCall)]
    result_of = {e.call_id: e for e in events if isinstance(e, ev.ToolResult)}
    assert set(result_of) == {c.call_id for c in calls}  # every call got its result
    by_tool = {c.tool: result_of[c.call_id] for c in calls}
    broken = next(c for c in calls if c.raw_arguments is not None)
    broken_result = result_of[broken.call_id]
    assert not broken_result.ok and "not valid JSON" in broken_result.output
    assert (
        not by_tool["teleport"].ok
        and "there is no tool named 'teleport'" in by_tool["teleport"].output
    )
    # Dispatch by name: list_files with a `command` argument is refused, not run as a shell command.
    assert (
        not by_tool["list_files"].ok
        and "unknown argument 'command'" in by_tool["list_files"].output
    )
    assert not (run_dir / "workspace" / "pwned.txt").exists()
    assert by_tool["submit"].ok

    # The model saw every error as an observation and the run went on.
    sent = json.dumps([r.body for r in worker_requests])
    assert "not valid JSON" in sent and "no tool named" in sent and "unknown argument" in sent

    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "finished" and result["reason"] == "submitted"
    assert (
        result["score"] == 1.0 and result["normalized_score"] == 1.0 and result["success"] is True
    )
    assert result["metric"] == "exact_match" and result["baseline_score"] == 0.0
    assert result["steps"] == 6 and result["tokens"] > 0 and result["tool_calls"] >= 9
    assert run_dir.stat().st_mode & 0o777 == 0o700  # no other user reaches the workspace
    # Confined by default (the bundled bubblewrap where no system one is installed).
    assert result["isolation"] == "bwrap" and "UNISOLATED" not in out

    # The API key the mlra process holds is nowhere the agent or the log can see.
    env_result = next(
        r for r in events if isinstance(r, ev.ToolResult) and r.tool == "bash" and r.ok
    )
    assert "HOME=" in env_result.output
    for secret in CANARY.values():
        assert secret not in env_result.output
        assert secret not in (run_dir / "events.jsonl").read_text()
        for path in run_dir.rglob("*"):
            if path.is_file():
                assert secret not in path.read_text(errors="replace"), path


def test_a_score_earned_unconfined_says_so(tmp_path: Path, answer_task: Path) -> None:
    """Only an explicit `--isolation none` runs an LLM agent unconfined, and its
    score is marked wherever it is shown."""
    with ScriptedModelServer(answering_script()) as server:
        code, out, err, run_dir = _run(
            tmp_path, answer_task, server, "openai", "--isolation", "none"
        )
    assert code == 0, err
    assert "score: exact_match = 1 " in out and "· UNISOLATED" in out
    events = read_events(run_dir / "events.jsonl")
    finished = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert finished.agent_isolation == "none"
    assert json.loads((run_dir / "result.json").read_text())["isolation"] == "none"


async def test_the_deadline_kills_a_running_command_and_still_evaluates(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("Answer first.", call("bash", command="echo 42 > answer.txt")),
            turn("Now wait a long time.", call("bash", command="sleep 117.25", timeout=300)),
        ],
    }
    # In-process, the 4 s counted from the sleep's start, however long the steps before
    # it took on a busy machine (through the command line they could use up the limit).
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test-model", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer", model="openai/test-model", runs_dir=tmp_path / "runs", time_limit_s=4.0
        )
        controller = RunController(config, load_task(answer_task), provider)
        clock_from(controller, lambda e: isinstance(e, ev.ToolCall) and "sleep" in str(e.arguments))
        result = await controller.run(agent_for)
        await provider.aclose()
    run_dir = controller.run_dir
    # What the command line's exit status 0 says: finished, with a score.
    assert result.status == "finished" and result.score is not None, result.message
    events = read_events(run_dir / "events.jsonl")
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished) and finished.reason == "deadline"
    assert 4 <= finished.t < 10
    sleep_call = next(
        e for e in events if isinstance(e, ev.ToolCall) and "sleep" in str(e.arguments)
    )
    killed = next(
        e for e in events if isinstance(e, ev.ToolResult) and e.call_id == sleep_call.call_id
    )
    # Its time-out is clamped to the deadline, or the deadline cancels it: killed either way.
    assert not killed.ok and (killed.timed_out or "run ended" in killed.output)
    assert not processes_running("117.25")
    evaluation = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert evaluation.score == 1.0
    assert json.loads((run_dir / "result.json").read_text())["reason"] == "deadline"


def test_step_budget_ends_the_run_and_evaluates_what_is_there(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [turn("", call("bash", command="echo 42 > answer.txt"))]
        + [turn("", call("bash", command="ls"))] * 10,
    }
    with ScriptedModelServer(script) as server:
        code, _, err, run_dir = _run(tmp_path, answer_task, server, "anthropic", "--max-steps", "3")
    assert code == 0, err
    result = json.loads((run_dir / "result.json").read_text())
    assert result["reason"] == "budget" and result["steps"] == 3 and result["score"] == 1.0
    assert "step budget used up (3 of 3 steps)" in result["message"]


def test_a_provider_that_keeps_failing_ends_the_run_with_error(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {"supervisor": [{"status": 500, "times": 50}]}
    with ScriptedModelServer(script) as server:
        code, out, _err, run_dir = _run(tmp_path, answer_task, server, "openai")
    assert code == 1
    events = read_events(run_dir / "events.jsonl")
    errors = [e for e in events if isinstance(e, ev.ModelError)]
    assert errors and errors[0].fatal and "500" in errors[0].error
    assert isinstance(events[-1], ev.RunFinished) and events[-1].status == "error"
    assert events[-1].reason == "provider_error"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "error" and "model provider failed" in result["message"]
    assert result["reason"] == "provider_error"
    assert "model provider failed" in out.strip().splitlines()[-1]


def test_long_output_is_cut_head_and_tail_before_the_model_sees_it(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("python", code="print('HEAD'); print('x' * 20000); print('TAIL')")),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="done")),
        ],
    }
    with ScriptedModelServer(script) as server:
        code, _, err, run_dir = _run(
            tmp_path, answer_task, server, "openai", "--observation-limit", "2000"
        )
        sent = json.dumps(server.requests_for("worker")[1].body)
    assert code == 0, err
    result = next(
        e
        for e in read_events(run_dir / "events.jsonl")
        if isinstance(e, ev.ToolResult) and e.tool == "python"
    )
    assert result.truncated and len(result.output) < 2300
    assert "HEAD" in sent and "TAIL" in sent and "cut from the middle" in sent


def test_json_mode_prints_the_events(tmp_path: Path, answer_task: Path) -> None:
    proc = mlra_cli(
        [
            "run",
            str(answer_task),
            "--model",
            "baseline",
            "--json",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    events = [ev.parse_event(line) for line in lines[:-1]]
    assert isinstance(events[0], ev.RunStarted) and isinstance(events[-1], ev.RunFinished)
    summary = json.loads(lines[-1])
    assert summary["score"] == 1.0 and Path(summary["run_dir"]).is_dir()


def test_a_stuck_supervisor_plan_step_unknown_is_an_error_observation(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": [
            turn("", plan("Answer")),
            turn("", call("assign_subtask", step_id="nope", instructions="x")),
            turn("", call("submit")),
        ],
    }
    with ScriptedModelServer(script) as server:
        code, _, _err, run_dir = _run(tmp_path, answer_task, server, "openai")
        sent = json.dumps(server.requests_for("supervisor")[-1].body)
    assert "no plan step has id 'nope'" in sent
    events = read_events(run_dir / "events.jsonl")
    assert not any(isinstance(e, ev.SubtaskStarted) for e in events)
    # Submitting with no answer written is an error observation, not a submission; the
    # supervisor then stops calling tools, and the run says that nothing was submitted.
    submit = next(e for e in events if isinstance(e, ev.ToolResult) and e.tool == "submit")
    assert not submit.ok and "does not exist" in submit.output
    assert not any(isinstance(e, ev.Submission | ev.EvaluationFinished) for e in events)
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished) and finished.reason == "no_tool_calls"
    assert code == 1
