"""What the model and the log are told about a tool call is what happened to it.

An edit at a breakpoint reaches the model (the call as it ran, with a note), and a
fork rebuilds the very same history from the log; a call the run's end kills says
how long it ran (pauses excluded) and what it printed; output past the log's
stream cap goes on to the live console without growing the log.

Runs are in-process controllers over the scripted model server on loopback,
through the real OpenAI SDK.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop import tool_step
from mlra.agent.providers import resolve_model
from mlra.agent.record.recording import KILLED_BY_RUN_END
from mlra.agent.run.controller import RunController
from mlra.agent.run.resume import fork_run, load_run, resume_controller
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

ASKED = {"command": "echo 42 > answer.txt"}
EDITED = {"command": "echo 41 > answer.txt"}


def _controller(
    server: ScriptedModelServer, task: Path, runs: Path, run_id: str, **config: Any
) -> RunController:
    provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
    cfg = RunConfig(
        task="answer",
        model="openai/test",
        runs_dir=runs,
        run_id=run_id,
        isolation="none",
        **config,
    )
    controller = RunController(cfg, load_task(task), provider)
    controller.prepare()
    return controller


def _on(controller: RunController, kind: type, act: Callable[[Any], None]) -> None:
    """Act on each event of a kind once the event is written (not inside the log's fan-out)."""
    loop = asyncio.get_running_loop()

    def seen(event: ev.Event) -> None:
        if isinstance(event, kind):
            loop.call_soon(act, event)

    controller.subscribe(seen)


def _assistant_call(body: dict[str, Any], call_id: str) -> dict[str, Any]:
    for message in body["messages"]:
        for c in message.get("tool_calls") or []:
            if c["id"] == call_id:
                return c["function"]
    raise AssertionError(f"no call {call_id} in the request")


def _tool_message(body: dict[str, Any], call_id: str) -> str:
    for message in body["messages"]:
        if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
            return str(message["content"])
    raise AssertionError(f"no result of {call_id} in the request")


async def test_an_edited_call_reaches_the_model_as_it_ran_and_a_fork_rebuilds_it(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("bash", **ASKED)),
            turn("Read it back.", call("bash", command="cat answer.txt")),
            turn("", call("report", summary="done")),
        ],
    }
    with ScriptedModelServer(script, turn_by_history=True) as server:
        controller = _controller(
            server, answer_task, tmp_path, "edited", breakpoints=["bash:echo 42"]
        )

        def edit(event: ev.ApprovalRequested) -> None:
            controller.edit(event.call_id, EDITED)

        _on(controller, ev.ApprovalRequested, edit)
        result = await controller.run(agent_for)
        assert result.status == "finished"
        events = controller.state  # the run's own fold
        assert events.edited_calls
        (call_id,) = events.edited_calls
        sent = server.requests_for("worker")[1].body
        assert _assistant_call(sent, call_id)["arguments"] == '{"command": "echo 41 > answer.txt"}'
        told = _tool_message(sent, call_id)
        assert told.startswith("[The user edited this call before it ran")
        assert "echo 42 > answer.txt" in told  # what the model had asked for
        assert (controller.workspace / "answer.txt").read_text().strip() == "41"

        # A fork from the next step catches up through the edited call from the log:
        # the model is asked with the same history.
        forked = fork_run(
            load_run(controller.run_dir),
            controller.task,
            at_step=2,
            run_dir=tmp_path / "fork",
            model="openai/test",
        )
        before = len(server.requests_for("worker"))
        fork = resume_controller(forked, controller.task, controller.provider)
        await fork.run(agent_for)
        again = server.requests_for("worker")[before].body
    assert _assistant_call(again, call_id) == _assistant_call(sent, call_id)
    assert _tool_message(again, call_id) == told


async def test_a_call_the_run_ends_under_says_how_long_it_ran_without_the_pause(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn(
                "",
                call(
                    "python",
                    code="import time\nprint('begun', flush=True)\ntime.sleep(120)\n",
                ),
            )
        ],
    }
    with ScriptedModelServer(script) as server:
        controller = _controller(server, answer_task, tmp_path, "killed")

        async def pause_then_stop(_: ev.ToolOutput) -> None:
            controller.pause()
            await asyncio.sleep(0.6)  # paused time the duration must leave out
            controller.resume()
            controller.request_stop()

        started: list[asyncio.Task[None]] = []

        def once(event: ev.ToolOutput) -> None:
            if not started:
                started.append(asyncio.ensure_future(pause_then_stop(event)))

        _on(controller, ev.ToolOutput, once)
        await controller.run(agent_for)
    events = list(_read(controller))
    call_event = next(e for e in events if isinstance(e, ev.ToolCall) and e.tool == "python")
    killed = next(
        e for e in events if isinstance(e, ev.ToolResult) and e.call_id == call_event.call_id
    )
    assert killed.error == KILLED_BY_RUN_END and not killed.ok
    wall = killed.ts - call_event.ts
    assert 0 < killed.duration_s <= wall - 0.5
    assert "begun" in killed.output
    assert f"[killed after {killed.duration_s:.1f} s: the run ended (it was stopped)" in (
        killed.output
    )


async def test_output_past_the_stream_cap_reaches_the_console_but_not_the_log(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tool_step, "STREAM_CAP_CHARS", 20_000)
    code = "for i in range(6000):\n    print(f'line {i:05d}', flush=(i % 100 == 0))\n"
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("python", code=code)),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="done")),
        ],
    }
    with ScriptedModelServer(script) as server:
        controller = _controller(server, answer_task, tmp_path, "long")
        unlogged: list[ev.ToolOutput] = []
        controller.tool_step.watch_output(unlogged.append)
        await controller.run(agent_for)
    events = list(_read(controller))
    logged = "".join(e.text for e in events if isinstance(e, ev.ToolOutput))
    assert len(logged) == 20_000 + len(tool_step.STREAM_CAP_NOTE)
    assert "the log keeps no more of this output as it streams" in logged
    assert unlogged and all(e.seq == 0 for e in unlogged)
    assert "line 05999" in "".join(e.text for e in unlogged)
    result = next(e for e in events if isinstance(e, ev.ToolResult) and e.tool == "python")
    assert result.ok and "line 05999" in result.output  # the result holds the end


def _read(controller: RunController) -> list[ev.Event]:
    from mlra.agent.record.eventlog import read_events

    return read_events(controller.run_dir / "events.jsonl")
