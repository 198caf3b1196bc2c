"""Every tool call of a run has an id of its own, whatever the model server sent.

Some OpenAI-compatible servers send no call ids, and some send the same one every time
("0"). Such an id was `call_0` in every answer, and the run's log, the user's decisions at
breakpoints and the console's panes all go by call id: after the user edited the first
`call_0` at its breakpoint, every later `call_0` ran with the edited arguments. Recorded
over the scripted model server through the real OpenAI SDK, resumed in-process, replayed
through the real command line.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.providers.base import Message
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.run.resume import load_run, resume_controller
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from mlra.tools.registry import ToolSpec
from tests.conftest import ANSWER_TASK, SECRET_ENV, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

ASKED = {"command": "echo 41 > answer.txt"}
EDITED = {"command": "echo 42 > answer.txt"}
NOTED = {"command": "echo 41 > note.txt"}
SERVERS = {"no ids": "", "the same id": "0"}
"""What a server sends as each call's id: nothing, or "0" every time."""


def _sent_with(given: str, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**t, "tool_calls": [{**c, "id": given} for c in t["tool_calls"]]} for t in turns]


def _script(given: str) -> dict[str, Any]:
    """The worker writes the answer (the user edits it), then a note (run as asked)."""
    worker = [
        turn("Write the answer.", call("bash", **ASKED)),
        turn("Note it.", call("bash", **NOTED)),
        turn("", call("report", summary="answer.txt holds the answer")),
    ]
    return {
        "supervisor": _sent_with(given, supervisor_answering()),
        "worker": _sent_with(given, worker),
    }


def _decide(controller: RunController) -> list[ev.ApprovalRequested]:
    """The user edits the call that writes 41 into answer.txt, and approves the rest."""
    loop = asyncio.get_running_loop()
    asked: list[ev.ApprovalRequested] = []

    def decide(event: ev.Event) -> None:
        if isinstance(event, ev.ApprovalRequested):
            asked.append(event)
            if event.arguments == ASKED:
                loop.call_soon(controller.edit, event.call_id, EDITED)
            else:
                loop.call_soon(controller.approve, event.call_id)

    controller.subscribe(decide)
    return asked


async def _record(runs: Path, server: ScriptedModelServer) -> RunController:
    provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
    config = RunConfig(
        task="answer",
        model="openai/test",
        runs_dir=runs,
        run_id="r",
        isolation="none",
        breakpoints=["bash:echo"],
    )
    controller = RunController(config, load_task(ANSWER_TASK), provider)
    controller.prepare()
    asked = _decide(controller)
    result = await controller.run(agent_for)
    assert result.status == "finished", result
    assert [e.arguments for e in asked] == [ASKED, NOTED]
    assert asked[0].call_id != asked[1].call_id
    return controller


def _bash_calls(events: list[ev.Event]) -> list[ev.ToolCall]:
    return [e for e in events if isinstance(e, ev.ToolCall) and e.tool == "bash"]


def _assert_ids_unique(events: list[ev.Event]) -> None:
    called = [e.call_id for e in events if isinstance(e, ev.ToolCall)]
    assert len(called) == len(set(called)), called
    answered = [c["id"] for e in events if isinstance(e, ev.ModelCall) for c in e.tool_calls]
    assert len(answered) == len(set(answered)), answered
    assert "call_0" not in answered and "" not in answered


def _assert_history_pairs(server: ScriptedModelServer) -> set[str]:
    """Each request's tool results answer the calls of the assistant message before
    them, by id, as strict servers require; the ids sent back, all requests together."""
    sent: set[str] = set()
    for request in server.requests_for(api="openai"):
        asked: list[str] = []
        for message in request.body["messages"]:
            if message["role"] == "assistant":
                assert not asked, request.body["messages"]  # every call answered
                asked = [c["id"] for c in message.get("tool_calls") or []]
                assert len(asked) == len(set(asked)), asked
                sent.update(asked)
            elif message["role"] == "tool":
                assert message["tool_call_id"] == asked.pop(0), request.body["messages"]
    return sent


def _assert_ran_as_the_user_had_it(events: list[ev.Event], workspace: Path) -> None:
    first, second = _bash_calls(events)
    assert (first.arguments, second.arguments) == (ASKED, NOTED)  # as the model asked
    results = {e.call_id: e for e in events if isinstance(e, ev.ToolResult)}
    assert results[first.call_id].output.startswith("[The user edited this call")
    assert results[second.call_id].ok and "edited" not in results[second.call_id].output
    assert (workspace / "answer.txt").read_text().strip() == "42"
    assert (workspace / "note.txt").read_text().strip() == "41"


@pytest.mark.parametrize("given", SERVERS.values(), ids=SERVERS.keys())
async def test_an_edit_goes_to_the_one_call_the_user_edited(tmp_path: Path, given: str) -> None:
    with ScriptedModelServer(_script(given)) as server:
        controller = await _record(tmp_path / "runs", server)
    events = read_events(controller.run_dir / "events.jsonl")
    _assert_ran_as_the_user_had_it(events, controller.workspace)
    _assert_ids_unique(events)
    logged = {e.call_id for e in events if isinstance(e, ev.ToolCall)}
    assert _assert_history_pairs(server) <= logged


def _cut_after_first_echo(run_dir: Path) -> list[ev.Event]:
    """The run's log as if it had been killed right after its first `echo`'s result."""
    log = run_dir / "events.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    events = read_events(log)
    first = next(e for e in events if isinstance(e, ev.ToolResult) and e.tool == "bash")
    kept = events.index(first) + 1
    log.write_bytes(b"".join(lines[:kept]))
    (run_dir / "result.json").unlink(missing_ok=True)
    return events[:kept]


@pytest.mark.parametrize("given", SERVERS.values(), ids=SERVERS.keys())
async def test_a_resumed_run_catches_up_by_its_logged_ids(tmp_path: Path, given: str) -> None:
    """The catch-up answers with the ids as logged (the first call's edit is found by
    its id), and the calls asked live after it get ids of their own: the resumed run
    ran the note as the model asked, not as the edit of the first `call_0`."""
    with ScriptedModelServer(_script(given), turn_by_history=True) as server:
        controller = await _record(tmp_path / "runs", server)
    run_dir = controller.run_dir
    before = _cut_after_first_echo(run_dir)
    (first,) = _bash_calls(before)
    with ScriptedModelServer(_script(given), turn_by_history=True) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        resumed = resume_controller(load_run(run_dir), load_task(ANSWER_TASK), provider)
        asked = _decide(resumed)
        result = await resumed.run(agent_for)
    assert result.reason == "submitted", result
    assert [e.arguments for e in asked] == [NOTED]  # the first was decided in the log
    events = read_events(run_dir / "events.jsonl")
    assert any(isinstance(e, ev.RunResumed) for e in events)
    assert _bash_calls(events)[0] == first
    _assert_ran_as_the_user_had_it(events, resumed.workspace)
    _assert_ids_unique(events)
    sent = _assert_history_pairs(server)
    assert first.call_id in sent  # the history from the log, sent with its logged ids
    assert sent <= {e.call_id for e in events if isinstance(e, ev.ToolCall)}


def test_a_replay_keeps_the_recorded_ids_and_does_not_diverge(tmp_path: Path) -> None:
    with ScriptedModelServer(_script("")) as server:
        recorded = asyncio.run(_record(tmp_path / "runs", server)).run_dir
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    args = ["run", str(ANSWER_TASK), "--model", f"replay:{recorded}", "--no-tui"]
    args += ["--runs-dir", str(tmp_path / "replays"), "--run-id", "again", "--isolation", "none"]
    proc = mlra_cli(args, cwd=tmp_path, env=env)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said
    assert "diverged" not in said, said
    again = tmp_path / "replays" / "again"
    events = read_events(again / "events.jsonl")
    end = events[-1]
    assert isinstance(end, ev.RunFinished) and end.reason == "submitted", end
    _assert_ran_as_the_user_had_it(events, again / "workspace")
    then = read_events(recorded / "events.jsonl")
    assert [e.call_id for e in events if isinstance(e, ev.ToolCall)] == [
        e.call_id for e in then if isinstance(e, ev.ToolCall)
    ]
    replayed = [e for e in events if isinstance(e, ev.Control) and e.source == "replay"]
    assert [(e.action, e.call_id) for e in replayed] == [("edit", _bash_calls(then)[0].call_id)]


BASH = ToolSpec(
    name="bash",
    description="Run a shell command.",
    parameters={"type": "object", "properties": {"command": {"type": "string"}}},
)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_calls_sent_without_ids_get_ids_of_their_own(stream: bool) -> None:
    """Two answers of two calls each, none with an id: four ids, none `call_N`."""
    ls = {"name": "bash", "arguments": {"command": "ls"}, "id": ""}
    answer = {"tool_calls": [ls, ls]}
    refused = {"status": 400, "message": "Your organization must be verified to stream."}
    with ScriptedModelServer({"worker": [answer] if stream else [refused, answer]}) as server:
        server.add("worker", answer)
        provider = OpenAIProvider("gpt-4o", api_key="sk-test", base_url=server.url_for("openai"))
        try:
            ids = [
                c.id
                for _ in range(2)
                for c in (
                    await provider.generate(
                        system="You are the worker.",
                        messages=[Message(role="user", content="go")],
                        tools=[BASH],
                    )
                ).tool_calls
            ]
        finally:
            await provider.aclose()
    assert [r.stream for r in server.requests][-2:] == [stream, stream]
    assert len(set(ids)) == 4 and all(i.startswith("call_") and len(i) > 10 for i in ids), ids
