"""Outcomes as they happened (issue 25): a worker that never reported is not said to
have reported, an agent repeating itself is told and then stopped, the tool schemas a
model reads hold nothing but the arguments, and a model that never calls the tools it
was sent natively gets them in its prompt. Whole runs go through the real SDK against
the scripted model server; what is checked is what the user and the supervisor read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.loops import Repeats
from mlra.agent.loop.tool_call_fallback import NOTE
from mlra.agent.providers import resolve_model
from mlra.agent.providers.anthropic import AnthropicProvider
from mlra.agent.providers.base import ModelSettings, ToolCallRequest
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.run_result import RunResult
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from mlra.tools.registry import Tool, ToolOutcome
from tests.conftest import mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, turn

ASSIGN = call("assign_subtask", step_id="1", instructions="Write the answer into answer.txt.")


async def _run(
    tmp_path: Path, answer_task: Path, script: dict[str, Any], **settings: Any
) -> tuple[RunResult, list[ev.Event], ScriptedModelServer]:
    with ScriptedModelServer(script) as server:
        mode = settings.get("tool_calls", "auto")
        provider = resolve_model(
            "openai/local",
            base_url=server.url_for("openai"),
            env={},
            settings=ModelSettings(tool_calls=mode),
        )
        config = RunConfig(
            task="answer", model="openai/local", runs_dir=tmp_path, isolation="none", **settings
        )
        controller = RunController(config, load_task(answer_task), provider)
        result = await controller.run(agent_for)
        await provider.aclose()
    return result, read_events(controller.run_dir / "events.jsonl"), server


def _results(events: list[ev.Event], tool: str) -> list[ev.ToolResult]:
    return [e for e in events if isinstance(e, ev.ToolResult) and e.tool == tool]


def _prompts(events: list[ev.Event], agent: ev.AgentRole) -> list[str]:
    return [e.prompt for e in events if isinstance(e, ev.StepStarted) and e.agent == agent]


def _not_graded(events: list[ev.Event]) -> None:
    assert not any(isinstance(e, ev.Submission | ev.EvaluationStarted) for e in events)


# --- a subtask that ended without a report ---------------------------------------------


async def test_a_worker_that_never_called_a_tool_did_not_report(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": [turn("", plan("Answer", "Submit")), turn("", ASSIGN)],
        "supervisor:fallback": turn("Nothing more to do."),
        # A small model claiming what it never did, four times, and never a tool call.
        "worker:fallback": turn("I wrote 42 into answer.txt and checked it. All done."),
    }
    _, events, _ = await _run(tmp_path, answer_task, script)
    (finished,) = [e for e in events if isinstance(e, ev.SubtaskFinished)]
    assert finished.outcome == "no_report" and finished.worker_steps == 4
    assert finished.report.startswith("The worker made no tool call in this subtask")
    (told,) = _results(events, "assign_subtask")
    # The supervisor reads what happened, not a made-up summary passed off as a report.
    assert not told.ok
    assert told.output.startswith("Subtask 1 ended (no report, 4 worker steps).")
    assert "Worker's report" not in told.output
    assert "never called `report`" in told.output
    assert "Its last text (not a report, and nothing in it was checked):\nI wrote 42" in (
        told.output
    )
    assert told.data["outcome"] == "no_report"


async def test_a_worker_that_stopped_calling_tools_says_how_many_it_made(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": [turn("", plan("Answer", "Submit")), turn("", ASSIGN)],
        "supervisor:fallback": turn("Nothing more to do."),
        "worker": [turn("", call("bash", command="echo 42 > answer.txt"))],
        "worker:fallback": turn(""),
    }
    _, events, _ = await _run(tmp_path, answer_task, script)
    (finished,) = [e for e in events if isinstance(e, ev.SubtaskFinished)]
    assert finished.outcome == "no_report" and finished.worker_steps == 5
    assert finished.report == (
        "After 1 tool call, the worker answered 4 times in a row without calling a tool, "
        "and it never called `report`. It wrote no text."
    )


def test_no_report_reads_plainly_in_the_headless_transcript(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": [turn("", plan("Answer", "Submit")), turn("", ASSIGN)],
        "supervisor:fallback": turn("Nothing more to do."),
        "worker:fallback": turn("Done."),
    }
    with ScriptedModelServer(script) as server:
        args = ["run", str(answer_task), "--model", "openai/test-model", "--no-tui"]
        args += ["--base-url", server.url_for("openai"), "--runs-dir", str(tmp_path / "runs")]
        proc = mlra_cli([*args, "--isolation", "none"], cwd=tmp_path, timeout=120)
    out = proc.stdout
    assert "← subtask 1 no report: The worker made no tool call" in out, out
    assert "no_report:" not in out and "(no_report" not in out


# --- the same call again and again -------------------------------------------------------


async def test_a_supervisor_repeating_a_successful_call_is_told_then_ended_stuck(
    tmp_path: Path, answer_task: Path
) -> None:
    # After a subtask: a supervisor that never handed one gives the worker the whole
    # task instead (tests/agent/test_small_models.py).
    script = {
        "supervisor": [turn("", ASSIGN)],
        "supervisor:fallback": turn("Planning.", plan("Answer", "Submit")),
        "worker": [turn("", call("report", summary="done"))],
    }
    result, events, _ = await _run(tmp_path, answer_task, script)
    plans = _results(events, "update_plan")
    assert len(plans) == 6 and all(p.ok for p in plans)
    prompts = _prompts(events, "supervisor")[1:]
    assert not any("[loop]" in p for p in prompts[:3])
    for count, prompt in zip((3, 4, 5), prompts[3:], strict=True):
        assert f"the same update_plan call {count} times in a row" in prompt
        assert "the run ends (as stuck)" in prompt and "If the same call is made 6 times" in prompt
    notices = [e.message for e in events if isinstance(e, ev.Notice) and "update_plan" in e.message]
    assert (
        len(notices) == 1
        and "the supervisor made the same update_plan call 3 times" in (notices[0])
    )
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished)
    assert (finished.status, finished.reason) == ("finished", "stuck")
    assert "the supervisor made the same update_plan call 6 times in a row" in finished.message
    assert "nothing was submitted" in finished.message
    # Ended for going round in circles, like a call failing again and again: not graded.
    assert result.reason == "stuck" and result.score is None
    _not_graded(events)


async def test_a_worker_repeating_a_failing_submit_is_stopped_at_the_bound_set(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": [turn("", plan("Answer", "Submit")), turn("", ASSIGN)],
        "worker": [turn("", call("bash", command="echo 41 > draft.txt"))],
        "worker:fallback": turn("Submitting.", call("submit", path="nowhere.txt")),
    }
    _, events, _ = await _run(tmp_path, answer_task, script, repeats_told_at=2, repeats_end_at=4)
    submits = _results(events, "submit")
    assert len(submits) == 4 and not any(s.ok for s in submits)
    prompts = _prompts(events, "worker")
    assert "the same submit call 2 times in a row, with the same arguments, failing" in prompts[3]
    assert "call `report` to say what blocks you" in prompts[3]
    (subtask,) = [e for e in events if isinstance(e, ev.SubtaskFinished)]
    assert subtask.outcome == "stuck"
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished) and finished.reason == "stuck"
    assert "the worker made the same submit call 4 times in a row (it failed" in finished.message
    started = events[0]
    assert isinstance(started, ev.RunStarted)
    assert (started.config["repeats_told_at"], started.config["repeats_end_at"]) == (2, 4)
    _not_graded(events)


async def test_the_worker_alone_repeating_itself_is_not_told_to_call_report(
    tmp_path: Path, answer_task: Path
) -> None:
    """The worker alone has no `report`. Told to call it after a failing `submit` made
    three times, qwen2.5-coder-0.5b (llama-server) answered `{"name": "report", ...}`
    as text, which nothing ran, shown above its next call as if it were one."""
    script = {"worker:fallback": turn("Submitting.", call("submit", path="nowhere.txt"))}
    _, events, _ = await _run(
        tmp_path, answer_task, script, agent="worker", repeats_told_at=2, repeats_end_at=4
    )
    prompts = _prompts(events, "worker")
    told = [p for p in prompts if "[loop]" in p]
    assert told and all("the same submit call" in p for p in told)
    assert not any("report" in p for p in prompts), told
    assert "or submit what the workspace holds" in told[0]


def _call(name: str, **arguments: Any) -> ToolCallRequest:
    return ToolCallRequest(id="c", name=name, arguments=arguments)


def test_a_repeat_is_the_same_call_with_the_same_result() -> None:
    repeats = Repeats(agent="worker", told_at=3, end_at=6)
    tail = _call("bash", command="tail -1 train.log")
    # A log that grows answers differently each time: waiting, not looping.
    assert repeats.see(tail, ToolOutcome(output="step 1\n[exit code 0, 0.1 s]")) == 1
    assert repeats.see(tail, ToolOutcome(output="step 2\n[exit code 0, 0.1 s]")) == 1
    # How long a command took is no difference.
    assert repeats.see(tail, ToolOutcome(output="step 2\n[exit code 0, 12 s]")) == 2
    assert repeats.see(tail, ToolOutcome(output="step 2\n[exit code 0, 1.5 s]")) == 3
    assert repeats.to_tell and not repeats.stuck
    # Nor is a job polled while it runs: the time it has run is in its state.
    wait = _call("job_wait", job="job-1", timeout=600)
    running = "(no new output)\n[job-1: running for {} s; log jobs/job-1.log]"
    assert repeats.see(wait, ToolOutcome(output=running.format(600))) == 1
    assert repeats.see(wait, ToolOutcome(output=running.format(1200))) == 1
    # Another call in between starts the count afresh; so do other arguments.
    assert repeats.see(_call("bash", command="ls"), ToolOutcome(output="a")) == 1
    assert repeats.see(_call("bash", command="ls -a"), ToolOutcome(output="a")) == 1
    # The same arguments in another order are the same call.
    edit = _call("edit_file", path="a.py", old="x", new="y")
    same = _call("edit_file", new="y", old="x", path="a.py")
    assert repeats.see(edit, ToolOutcome(output="no match", ok=False)) == 1
    assert repeats.see(same, ToolOutcome(output="no match", ok=False)) == 2
    repeats.reset()
    assert repeats.see(same, ToolOutcome(output="no match", ok=False)) == 1


# --- flat tool schemas -----------------------------------------------------------------


def _all_tools() -> list[type[Tool[Any]]]:
    import mlra.agent.agents.supervisor
    import mlra.tools.core
    import mlra.tools.research  # noqa: F401  (every module that defines tools)

    found: list[type[Tool[Any]]] = []
    todo: list[type[Any]] = [Tool]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if "name" in vars(cls) and hasattr(cls, "Args"):
            found.append(cls)
    return found


def _model_names(model: type[BaseModel]) -> set[str]:
    raw = model.model_json_schema()
    return {model.__name__, *raw.get("$defs", {})}


def test_every_tool_schema_is_flat_and_names_no_class() -> None:
    tools = _all_tools()
    names = {t.name for t in tools}
    assert {"update_plan", "assign_subtask", "bash", "submit", "report", "job_wait"} <= names
    nested = 0
    for tool in tools:
        spec = tool.spec()
        text = json.dumps(spec.parameters)
        assert "$defs" not in text and "$ref" not in text, tool.name
        leaked = [n for n in _model_names(tool.Args) if n in text]
        assert not leaked, (tool.name, leaked)
        nested += "$defs" in tool.Args.model_json_schema()
    assert nested  # update_plan's steps, at least: the check saw a nested model
    steps = _all_tools_by_name()["update_plan"].spec().parameters["properties"]["steps"]
    item = steps["items"]
    assert item["type"] == "object" and set(item["required"]) == {"id", "title"}
    assert item["properties"]["status"]["enum"][0] == "pending"
    assert "title" in item["properties"]  # a field named title stays; titles of classes go


def _all_tools_by_name() -> dict[str, type[Tool[Any]]]:
    return {t.name: t for t in _all_tools()}


# --- auto: the tools in the prompt where native ones are never called -------------------


def _text_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


FALLBACK_SCRIPT = {
    "supervisor": [
        "Let me think about the task first.",
        "I should plan.",
        _text_call("update_plan", steps=[{"id": "1", "title": "Answer"}]),
        _text_call("assign_subtask", step_id="1", instructions="Write 42 into answer.txt."),
        _text_call("submit", path="answer.txt"),
    ],
    "worker": [
        _text_call("bash", command="echo 42 > answer.txt"),
        _text_call("report", summary="answer.txt holds 42"),
    ],
}


async def test_auto_describes_the_tools_in_the_prompt_when_none_is_ever_called(
    tmp_path: Path, answer_task: Path
) -> None:
    result, events, server = await _run(tmp_path, answer_task, FALLBACK_SCRIPT)
    assert result.score == 1.0
    sent = [r.body for r in server.requests_for("supervisor")]
    assert all("tools" in body for body in sent[:2])
    assert not any("tools" in body for body in sent[2:])
    assert "## update_plan" in sent[2]["messages"][0]["content"]
    worker = server.requests_for("worker")[0].body
    assert "tools" not in worker and "## report" in worker["messages"][0]["content"]
    notices = [e.message for e in events if isinstance(e, ev.Notice) and "natively" in e.message]
    assert len(notices) == 1
    assert "answered 2 times without calling a tool" in notices[0]
    assert "the tools are now described in the prompt" in notices[0]
    assert NOTE in _prompts(events, "supervisor")[2]


async def test_auto_keeps_native_tools_once_a_call_came(tmp_path: Path, answer_task: Path) -> None:
    script = {
        "supervisor": [
            turn("", plan("Answer", "Submit")),
            turn("Hmm."),
            turn("Let me think."),
            turn("", ASSIGN),
            turn("", call("submit", path="answer.txt")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="done")),
        ],
    }
    result, events, server = await _run(tmp_path, answer_task, script)
    assert result.score == 1.0
    assert all("tools" in r.body for r in server.requests)
    assert not any(isinstance(e, ev.Notice) and "natively" in e.message for e in events)


@pytest.mark.parametrize("mode", ["native", "text"])
async def test_a_chosen_tool_call_mode_is_kept(
    tmp_path: Path, answer_task: Path, mode: str
) -> None:
    script = {"supervisor:fallback": turn("Just thinking.")}
    _, events, server = await _run(tmp_path, answer_task, script, tool_calls=mode)
    carried = {"tools" in r.body for r in server.requests_for("supervisor")}
    assert carried == {mode == "native"}
    assert not any(isinstance(e, ev.Notice) and "natively" in e.message for e in events)


def test_a_resumed_run_and_a_replay_fall_back_where_the_run_did(
    tmp_path: Path, answer_task: Path
) -> None:
    script = json.loads(json.dumps(FALLBACK_SCRIPT))
    script["worker"][0] = _text_call("bash", command="sleep 1; echo 42 > answer.txt")
    runs = tmp_path / "runs"
    run_dir = runs / "fallback-run"
    log = run_dir / "events.jsonl"
    env = {"OPENAI_API_KEY": "sk-test-not-a-secret"}
    with ScriptedModelServer(script, turn_by_history=True) as server:
        args = ["run", str(answer_task), "--model", "openai/local", "--no-tui"]
        args += ["--base-url", server.url_for("openai"), "--runs-dir", str(runs)]
        args += ["--run-id", run_dir.name]
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlra", *args, "--isolation", "none"],
            cwd=tmp_path,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while b"natively" not in _read(log) and time.monotonic() < deadline:
                time.sleep(0.005)  # polling a file another process writes: nothing to await
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait()
        killed = read_events(log)
        assert not any(isinstance(e, ev.RunFinished) for e in killed), "killed too late"
        before = len(server.requests)
        done = mlra_cli(["resume", str(run_dir), "--no-tui"], cwd=tmp_path, env=env)
        after = server.requests[before:]
    assert done.returncode == 0, done.stdout + done.stderr
    # The resumed run went on with the tools in the prompt, as the run had decided.
    assert after and not any("tools" in r.body for r in after)
    events = read_events(log)
    told = [e for e in events if isinstance(e, ev.Notice) and "natively" in e.message]
    assert len(told) == 1
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    # A replay of the run says so too, at the same point, and does not diverge.
    replay = ["run", str(answer_task), "--model", f"replay:{run_dir}", "--no-tui"]
    replay += ["--runs-dir", str(tmp_path / "again"), "--run-id", "replayed"]
    replay += ["--isolation", "none"]
    again = mlra_cli(replay, cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    replayed = read_events(tmp_path / "again" / "replayed" / "events.jsonl")
    assert not any(isinstance(e, ev.ModelError) for e in replayed)
    told = [e for e in replayed if isinstance(e, ev.Notice) and "natively" in e.message]
    assert len(told) == 1
    prompts = [e for e in replayed if isinstance(e, ev.StepStarted) and e.agent == "supervisor"]
    assert NOTE in prompts[2].prompt


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


async def test_only_a_server_named_by_a_base_url_falls_back() -> None:
    """The vendors' own APIs never drop the tools they are sent; native calls stay."""
    hosted = [
        OpenAIProvider("gpt-4o", api_key="sk-test"),
        AnthropicProvider("claude-sonnet-4-6", api_key="sk-test"),
    ]
    local = [
        OpenAIProvider("local", api_key=None, base_url="http://127.0.0.1:9/v1"),
        AnthropicProvider("local", api_key="sk-test", base_url="http://127.0.0.1:9"),
    ]
    chosen = OpenAIProvider(
        "local",
        api_key=None,
        base_url="http://127.0.0.1:9/v1",
        settings=ModelSettings(tool_calls="native"),
    )
    try:
        assert not any(p.describe_tools_in_prompt() for p in [*hosted, chosen])
        assert all(p.describe_tools_in_prompt() for p in local)
        assert not any(p.describe_tools_in_prompt() for p in local)  # once
    finally:
        for provider in [*hosted, *local, chosen]:
            await provider.aclose()
