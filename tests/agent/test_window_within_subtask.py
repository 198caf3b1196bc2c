"""A long subtask of short steps stays inside a small window: older turns are summarized in
the middle of the subtask (not only between subtasks), one summary at a time, with the
subtask's instructions and the latest calls whole; the supervisor's history likewise. A
window too small for an agent's own first request is refused before the run starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.agents.window_floor import first_requests, smallest_window
from mlra.agent.loop.history import AgentHistory
from mlra.agent.providers import ModelSettings, resolve_model
from mlra.agent.providers.base import ModelResponse, ToolCallRequest
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.conftest import mlra_cli
from tests.fakes.model_server import RecordedRequest, ScriptedModelServer
from tests.scripts import call, plan, turn

WINDOW = 8192
SUMMARY = "SUMMARY: the worker listed logs and saw their lines; nothing failed. " * 6
"""About what a real summarizer writes (~100 words), so summaries piling up would show."""
INSTRUCTIONS = "Look at the logs one by one, then write 42 into answer.txt and report."


def _log_command(n: int) -> str:
    """A command whose output is 60 short lines, each naming its step (so a cut shows)."""
    return f"seq -f 'step {n} line %g' 60"


def _one_long_subtask(steps: int) -> dict[str, Any]:
    """A plan, one subtask of `steps` log listings then the answer, and its submission."""
    worker = [turn(f"look {n}", call("bash", command=_log_command(n))) for n in range(steps)]
    worker += [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    script = {
        "supervisor": [
            turn("", plan("Answer the question", "Submit")),
            turn("", call("assign_subtask", step_id="1", instructions=INSTRUCTIONS)),
            turn("", call("submit", path="answer.txt", note="the answer")),
        ],
        "worker": worker,
        "summarizer:fallback": SUMMARY,
    }
    return script


async def _run(
    tmp_path: Path, task: Path, script: dict[str, Any], *, window: int = WINDOW, **settings: Any
) -> tuple[RunController, Any, list[RecordedRequest], list[RecordedRequest]]:
    # The server refuses, as vLLM does, a request whose prompt and answer budget pass the
    # window: a request mlra let outgrow the window would show as a refusal.
    with ScriptedModelServer(script, context_limit=window) as server:
        provider = resolve_model(
            "openai/test",
            base_url=server.url_for("openai"),
            env={},
            settings=ModelSettings(context_window=window),
        )
        config = RunConfig(
            task="answer",
            model="openai/test",
            runs_dir=tmp_path,
            isolation="none",
            context_window=window,
            context_window_from="setting",
            max_output_tokens=provider.max_output_tokens,
            review_every=1000,
            **settings,
        )
        controller = RunController(config, load_task(task), provider)
        result = await controller.run(agent_for)
        await provider.aclose()
        return (
            controller,
            result,
            server.requests_for("worker"),
            server.requests_for("supervisor"),
        )


def _fits(request: RecordedRequest, window: int = WINDOW) -> bool:
    """The request and its answer budget inside the window, as the server counts."""
    body = request.body
    wanted = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
    return len(json.dumps(body)) // 4 + wanted <= window


def _refusals(events: list[ev.Event]) -> list[str]:
    return [e.message for e in events if isinstance(e, ev.Notice) and "refused" in e.message]


async def test_a_long_subtask_of_short_steps_is_summarized_within_it(
    tmp_path: Path, answer_task: Path
) -> None:
    steps = 48
    script = _one_long_subtask(steps)
    controller, result, worker_requests, _ = await _run(
        tmp_path, answer_task, script, subtask_max_steps=steps + 10
    )

    assert result.score == 1.0
    events = read_events(controller.run_dir / "events.jsonl")
    assert not _refusals(events)
    assert all(_fits(r) for r in worker_requests)
    # Summaries happen inside the one subtask, now and then, not at every step.
    kinds = [type(e) for e in events]
    started, finished = kinds.index(ev.SubtaskStarted), kinds.index(ev.SubtaskFinished)
    summaries = [e for e in events if isinstance(e, ev.HistorySummarized)]
    assert summaries and all(e.agent == "worker" for e in summaries)
    assert all(started < events.index(e) < finished for e in summaries)
    assert 2 <= len(summaries) <= steps // 3
    assert [s.first_turn for s in summaries[1:]] == [s.last_turn + 1 for s in summaries[:-1]]

    last = json.dumps(worker_requests[-1].body)
    assert json.dumps(f"[subtask 1] {INSTRUCTIONS}")[1:-1] in last  # whole
    assert "Read question.txt in the workspace" in last  # the pinned task
    assert last.count("[Summary of earlier steps]") == 1  # one summary, not a pile
    assert "step 0 line" not in last  # the oldest steps are summarized away
    # The latest calls, and what they printed, are whole.
    assert "echo 42 > answer.txt" in last
    assert _log_command(steps - 1) in last
    assert all(f"step {steps - 1} line {i}\\n" in last for i in range(1, 61))


async def test_the_supervisors_long_history_is_summarized_too(
    tmp_path: Path, answer_task: Path
) -> None:
    revisions = 40
    supervisor = [
        turn(
            f"Revision {n} of the plan.",
            plan(*(f"Step {k} of plan {n}, said at some length to fill it" for k in range(6))),
        )
        for n in range(revisions)
    ]
    supervisor += [
        turn("", call("assign_subtask", step_id="1", instructions=INSTRUCTIONS)),
        turn("", call("submit", path="answer.txt", note="the answer")),
    ]
    script = {
        "supervisor": supervisor,
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
        "summarizer:fallback": SUMMARY,
    }
    controller, result, _, supervisor_requests = await _run(tmp_path, answer_task, script)

    assert result.score == 1.0
    events = read_events(controller.run_dir / "events.jsonl")
    assert not _refusals(events)
    assert all(_fits(r) for r in supervisor_requests)
    summaries = [e for e in events if isinstance(e, ev.HistorySummarized)]
    assert summaries and all(e.agent == "supervisor" for e in summaries)
    last = json.dumps(supervisor_requests[-1].body)
    assert "Read question.txt in the workspace" in last
    assert last.count("[Summary of earlier steps]") == 1
    assert "plan 0," not in last
    assert f"Step 5 of plan {revisions - 1}," in last  # the latest call, whole


# --- a window too small for the agents' own first request -------------------------------


def test_a_window_too_small_for_the_workers_first_request_is_refused(
    tmp_path: Path, answer_task: Path
) -> None:
    runs = tmp_path / "runs"
    least = _least_window(answer_task, runs)
    # A server that is there (one nothing answers at is refused first, in its own line:
    # tests/console/test_unreachable_server.py); it is asked for no model call.
    with ScriptedModelServer({}) as server:
        done = mlra_cli(
            [
                "run",
                str(answer_task),
                "--model",
                "openai/test",
                "--base-url",
                server.url_for("openai"),
                "--context-window",
                "4096",
                "--no-tui",
                "--runs-dir",
                str(runs),
            ],
            cwd=tmp_path,
        )
        asked = [r.path for r in server.requests]
    assert not any("completions" in p for p in asked)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("mlra: --context-window 4096 is too small for the worker's own")
    assert "tool definitions take about" in line
    assert f"the smallest window that works is {least:,} tokens" in line
    assert not runs.exists() or not any(runs.iterdir())  # nothing started


def test_a_window_read_from_the_server_is_refused_the_same_way(
    tmp_path: Path, answer_task: Path
) -> None:
    with ScriptedModelServer({}, n_ctx=4096) as server:
        done = mlra_cli(
            [
                "run",
                str(answer_task),
                "--model",
                "openai/test",
                "--base-url",
                server.url_for("openai"),
                "--no-tui",
                "--runs-dir",
                str(tmp_path / "runs"),
            ],
            cwd=tmp_path,
        )
        asked = [r.path for r in server.requests]
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "the server's context window (4,096 tokens) is too small" in line
    assert f"is {_least_window(answer_task, tmp_path / 'runs'):,} tokens" in line
    assert not any("completions" in p for p in asked)  # no model call was made


def test_the_floor_is_measured_from_the_tools_the_agents_have(answer_task: Path) -> None:
    task = load_task(answer_task)
    full = RunConfig(task="answer", model="openai/test")
    bare = RunConfig(task="answer", model="openai/test", research_tools=[])
    (worker,) = [r for r in first_requests(full, task) if r.agent == "worker"]
    (fewer,) = [r for r in first_requests(bare, task) if r.agent == "worker"]
    assert fewer.tools == worker.tools - 3  # no arXiv search, arXiv read, GitHub clone
    assert fewer.tokens < worker.tokens
    assert smallest_window(fewer.tokens, 0.8) < smallest_window(worker.tokens, 0.8)


async def test_a_run_at_the_smallest_window_goes_to_its_end(
    tmp_path: Path, answer_task: Path
) -> None:
    least = _least_window(answer_task, tmp_path)
    script = _one_long_subtask(6)
    controller, result, worker_requests, _ = await _run(tmp_path, answer_task, script, window=least)
    assert result.score == 1.0
    events = read_events(controller.run_dir / "events.jsonl")
    assert not _refusals(events)
    assert all(_fits(r, least) for r in worker_requests)


def _least_window(task: Path, runs_dir: Path = Path("runs")) -> int:
    """The floor as the refusal states it, for the answer task with the default tools (the
    workspace's path, in the worker's prompt, counts too)."""
    spec = load_task(task)
    config = RunConfig(task="answer", model="openai/test", runs_dir=runs_dir)
    largest = max(r.tokens for r in first_requests(config, spec))
    return smallest_window(largest, config.context_fraction)


# --- the history's own rules ---------------------------------------------------------------


def _turns(h: AgentHistory, numbers: range) -> None:
    for n in numbers:
        h.add_user(f"status {n}")
        h.add_assistant(
            ModelResponse(
                text=f"thought {n}",
                tool_calls=[ToolCallRequest(id=f"c{n}", name="bash", arguments={"n": n})],
            )
        )
        h.add_tool_result(f"c{n}", "bash", f"output {n}", is_error=False)


def test_one_summary_at_a_time_and_the_current_subtask_stays_whole() -> None:
    h = AgentHistory(system="system")
    h.pin("the task")
    h.pin_subtask("[subtask 1] first")
    _turns(h, range(1, 5))
    h.pin_subtask("[subtask 2] second")
    _turns(h, range(5, 11))

    cut = h.summarizable(keep_recent_turns=2)
    assert cut is not None and cut[2:] == (1, 8)
    assert "[subtask 2]" not in h.render(cut[0], cut[1])  # it stays, so it is not summarized
    h.replace_with_summary(cut[0], cut[1], "S1")
    contents = [m.content for m in h.messages]
    assert contents[:3] == ["the task", "[subtask 2] second", "[Summary of earlier steps]\nS1"]
    assert contents[3] == "status 9"  # the first turn kept keeps the prompt that asked for it
    assert "[subtask 1] first" not in contents  # an earlier subtask's instructions are history

    _turns(h, range(11, 13))
    cut = h.summarizable(keep_recent_turns=1)
    assert cut is not None and cut[2:] == (9, 11)
    rendered = h.render(cut[0], cut[1])
    assert "summary of the steps before these:\n[Summary of earlier steps]\nS1" in rendered
    h.replace_with_summary(cut[0], cut[1], "S2 (with S1)")
    contents = [m.content for m in h.messages]
    assert contents[:3] == [
        "the task",
        "[subtask 2] second",
        "[Summary of earlier steps]\nS2 (with S1)",
    ]
    assert sum(c.startswith("[Summary of earlier steps]") for c in contents) == 1
    assert contents[3:] == ["status 12", "thought 12", "output 12"]
    called: set[str] = set()
    for m in h.messages:
        called |= {c.id for c in m.tool_calls}
        assert m.role != "tool" or m.tool_call_id in called
