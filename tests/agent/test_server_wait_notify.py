"""`--notify` on a run that waits for its model server (issue 40).

A user who walked away hears once that the run waits (why, and how long it may wait),
and once that it ended: the server came back, or the wait gave up (said by the pause or
the end that follows), never once per retry. Whole runs over the scripted server on
loopback, which refuses connections for a while and then comes back, with a real
`cmd:` destination that appends the JSON it reads to a file.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.notify.triggers import Triggers
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

WORKER = [
    turn("", call("bash", command="echo 42 > answer.txt")),
    turn("", call("report", summary="answer.txt holds 42")),
]


def held_worker(gate: Path) -> list[dict[str, Any]]:
    """The worker, its first command held until the test opens `gate`: the server is
    taken away while the worker still has a model call to make, however slowly the
    test sees the log."""
    wait = f"while [ ! -e {gate} ]; do sleep 0.02; done; echo 42 > answer.txt"
    return [turn("", call("bash", command=wait)), WORKER[1]]


def _controller(
    tmp_path: Path,
    task: Path,
    server: ScriptedModelServer,
    heard: Path,
    max_retries: int = 0,
    **settings: Any,
) -> tuple[RunController, OpenAIProvider]:
    provider = OpenAIProvider(
        "scripted", api_key=None, base_url=server.url_for("openai"), max_retries=max_retries
    )
    config = RunConfig(
        task="answer",
        model="openai/scripted",
        runs_dir=tmp_path / "runs",
        isolation="none",
        context_window=32_768,
        context_window_from="setting",
        review_every=1000,
        notify=[f"cmd:cat >> {heard}"],
        **settings,
    )
    return RunController(config, load_task(task), provider), provider


def _events(controller: RunController) -> list[ev.Event]:
    path = controller.run_dir / "events.jsonl"
    return read_events(path) if path.exists() else []


async def _until(controller: RunController, found: Any) -> None:
    """Wait until the run's log holds an event `found` accepts (the log, not the clock)."""
    for _ in range(600):
        if any(found(e) for e in _events(controller)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the event never came")


def _heard(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_a_wait_for_the_server_is_told_once_and_its_end_once(
    tmp_path: Path, answer_task: Path
) -> None:
    heard, gate = tmp_path / "heard.jsonl", tmp_path / "gate"
    script = {"supervisor": supervisor_answering(), "worker": held_worker(gate)}
    server = ScriptedModelServer(script, turn_by_history=True).start()
    try:
        controller, provider = _controller(tmp_path, answer_task, server, heard)
        running = asyncio.create_task(controller.run(agent_for))
        await _until(controller, lambda e: isinstance(e, ev.ModelCall))
        server.stop()  # its address now refuses connections ...
        gate.touch()
        # ... for two waits at least, then it comes back.
        await _until(
            controller,
            lambda e: (
                isinstance(e, ev.ModelRetry) and e.cause == "not_answering" and e.attempt >= 2
            ),
        )
        server.start()
        result = await asyncio.wait_for(running, 60)
        await provider.aclose()
    finally:
        server.stop()
    assert result.reason == "submitted"
    waits = [e for e in _events(controller) if isinstance(e, ev.ModelRetry) and e.cause]
    assert len(waits) >= 2 and all(e.wait_limit_s == 300.0 for e in waits)
    notes = _heard(heard)
    assert [n["kind"] for n in notes] == ["server_wait", "server_back", "finished"]
    waiting, back = notes[0], notes[1]
    assert "went away; the run waits for it" in waiting["title"]
    assert "waiting up to 5m00s for it to come back" in waiting["message"]
    assert "the server is not answering" in waiting["message"] or (
        "lost mid-answer" in waiting["message"]
    )
    assert back["title"] == "mlra: the model server is back; the run goes on"
    assert f"({len(waits)} tries)" in back["message"]


async def test_a_server_loading_its_model_is_waited_for_and_its_return_told(
    tmp_path: Path, answer_task: Path
) -> None:
    """A restarted llama-server answers HTTP 503 "Loading model" until its model is in:
    the SDK's own retries of it fail within seconds, then the run waits (it once paused
    and told the user the server "did not come back")."""
    heard, gate = tmp_path / "heard.jsonl", tmp_path / "gate"
    script = {"supervisor": supervisor_answering(), "worker": held_worker(gate)}
    server = ScriptedModelServer(script, turn_by_history=True).start()
    try:
        controller, provider = _controller(tmp_path, answer_task, server, heard, max_retries=1)
        running = asyncio.create_task(controller.run(agent_for))
        await _until(controller, lambda e: isinstance(e, ev.ModelCall))
        server.loading_model = True  # restarted, loading its model
        gate.touch()
        await _until(
            controller,
            lambda e: (
                isinstance(e, ev.ModelRetry) and e.cause == "loading_model" and e.attempt >= 2
            ),
        )
        server.loading_model = False  # loaded
        result = await asyncio.wait_for(running, 60)
        await provider.aclose()
    finally:
        server.stop()
    assert result.reason == "submitted"
    events = _events(controller)
    assert not any(isinstance(e, ev.ModelError) for e in events)
    sdk = [e for e in events if isinstance(e, ev.ModelRetry) and e.cause is None]
    assert sdk and all(e.status == 503 for e in sdk)  # the SDK's own retries came first
    notes = _heard(heard)
    assert [n["kind"] for n in notes] == ["server_wait", "server_back", "finished"]
    assert (
        "(answer): openai/scripted: the server is still loading its model; waiting up to "
        "5m00s" in notes[0]["message"]
    )
    assert notes[1]["title"] == "mlra: the model server is back; the run goes on"
    assert notes[2]["title"] == "mlra: run finished, exact_match = 1"


async def test_a_wait_that_gives_up_is_told_by_the_end(tmp_path: Path, answer_task: Path) -> None:
    heard = tmp_path / "heard.jsonl"
    server = ScriptedModelServer({}).start()
    server.stop()
    controller, provider = _controller(tmp_path, answer_task, server, heard, server_wait_s=1.5)
    result = await controller.run(agent_for)
    await provider.aclose()
    assert result.reason == "provider_error"
    (gave_up,) = [e for e in _events(controller) if isinstance(e, ev.ModelError)]
    assert gave_up.server_waited_s == pytest.approx(1.5, abs=0.3)
    notes = _heard(heard)
    assert [n["kind"] for n in notes] == ["server_wait", "finished"]
    assert "waiting up to 2s for it to come back" in notes[0]["message"]
    assert notes[1]["title"] == "mlra: run error: the model server did not come back"


async def test_a_server_back_with_an_error_is_not_said_to_have_stayed_away(
    tmp_path: Path, answer_task: Path
) -> None:
    """The server comes back and answers with an error: the pause says the provider
    failed, with its error naming the model once; and the next outage, after the user
    resumes, waits from the start again (retry 1, 1 s), with the whole limit."""
    heard = tmp_path / "heard.jsonl"
    script = {
        "supervisor": [
            {"drop": True},
            {"status": 500, "message": "model crashed"},
            {"drop": True},
            *supervisor_answering(),
        ],
        "worker": WORKER,
    }
    with ScriptedModelServer(script) as server:
        controller, provider = _controller(
            tmp_path,
            answer_task,
            server,
            heard,
            server_wait_s=1.5,
            on_provider_failure="pause",
        )

        def resume_after_pause(event: ev.Event) -> None:
            if (
                isinstance(event, ev.Control)
                and event.action == "pause"
                and event.source == "system"
            ):
                asyncio.get_running_loop().call_soon(controller.resume)

        controller.subscribe(resume_after_pause)
        result = await controller.run(agent_for)
        await provider.aclose()
    assert result.reason == "submitted"
    events = _events(controller)
    # (the dropped answers are cut-off calls, counted, not errors)
    (error,) = [e for e in events if isinstance(e, ev.ModelError) and e.cut_off is None]
    assert error.server_waited_s is None
    waits = [(e.attempt, e.wait_s) for e in events if isinstance(e, ev.ModelRetry) and e.cause]
    assert waits == [(1, 1.0), (1, 1.0)]  # not (2, 0.5): what was left of the first
    notes = _heard(heard)
    assert [n["kind"] for n in notes] == [
        "server_wait",
        "provider_paused",
        "server_wait",
        "server_back",
        "finished",
    ]
    paused = notes[1]
    assert paused["title"] == "mlra: the model provider failed; the run is paused"
    assert "(answer): openai/scripted: HTTP 500 server_error: model crashed" in paused["message"]
    assert paused["message"].count("scripted") == 1  # the model named once, not twice


def test_a_paused_run_says_its_server_did_not_come_back() -> None:
    """The console pauses where a headless run ends: the pause's notification says the
    wait gave up, and a later wait (after the user resumes) is told again."""
    triggers = Triggers("r1", Path("/runs/r1"))

    def wait(attempt: int) -> ev.ModelRetry:
        return ev.ModelRetry(
            agent="worker",
            model="openai/x",
            attempt=attempt,
            cause="connection_lost",
            wait_s=1.0,
            wait_limit_s=60.0,
        )

    first = triggers.notification(wait(1))
    assert first is not None and first.kind == "server_wait"
    assert "the connection was lost mid-answer; waiting up to 1m00s" in first.message
    assert triggers.notification(wait(2)) is None  # not on every retry
    gone = ev.ModelError(
        agent="worker", model="openai/x", error="x: lost", fatal=False, server_waited_s=60.0
    )
    assert triggers.notification(gone) is None
    paused = triggers.notification(ev.Control(action="pause", source="system"))
    assert paused is not None and paused.kind == "provider_paused"
    assert paused.title == "mlra: the model server did not come back; the run is paused"
    assert triggers.notification(ev.Control(action="resume")) is None
    again = triggers.notification(wait(1))
    assert again is not None and again.kind == "server_wait"
    back = triggers.notification(ev.ModelCall(agent="worker", model="openai/x"))
    assert back is not None and back.kind == "server_back" and "(1 try)" in back.message
    # A provider failure with no wait before it is told as ever.
    failed = ev.ModelError(agent="worker", model="openai/x", error="HTTP 503", fatal=False)
    triggers.notification(failed)
    other = triggers.notification(ev.Control(action="pause", source="system"))
    assert other is not None and other.title == "mlra: the model provider failed; the run is paused"


async def test_a_search_s_attempt_waiting_for_the_server_is_told_once_naming_it(
    tmp_path: Path, answer_task: Path
) -> None:
    """`--search greedy`: every model call is an attempt's, in the attempt's own log, yet
    the run's `--notify` tells that the attempt waits, and that the server is back."""
    heard, gate = tmp_path / "heard.jsonl", tmp_path / "gate"
    server = ScriptedModelServer({"worker": held_worker(gate)}, turn_by_history=True).start()
    try:
        controller, provider = _controller(
            tmp_path, answer_task, server, heard, search="greedy", attempts=1
        )
        attempt_log = controller.run_dir / "attempts" / "a1" / "events.jsonl"

        async def until(found: Any) -> None:
            for _ in range(600):
                if attempt_log.exists() and any(found(e) for e in read_events(attempt_log)):
                    return
                await asyncio.sleep(0.05)
            raise AssertionError("the attempt's event never came")

        running = asyncio.create_task(controller.run(agent_for))
        await until(lambda e: isinstance(e, ev.ModelCall))
        server.stop()
        gate.touch()
        await until(lambda e: isinstance(e, ev.ModelRetry) and e.cause and e.attempt >= 2)
        server.start()
        result = await asyncio.wait_for(running, 60)
        await provider.aclose()
    finally:
        server.stop()
    assert result.reason == "submitted"
    assert not any(isinstance(e, ev.ModelRetry) for e in _events(controller))  # a1's, not its
    notes = _heard(heard)
    kinds = [n["kind"] for n in notes]
    assert kinds == ["server_wait", "server_back", "best_validation", "finished"]
    waiting, back = notes[0], notes[1]
    assert waiting["attempt"] == back["attempt"] == "a1"
    assert ", attempt a1: openai/scripted: " in waiting["message"]
    said = waiting["message"]
    assert "waiting up to 5m00s for it to come back, the attempt's clock paused" in said
    assert ", attempt a1: openai/scripted answered again after " in back["message"]


def test_attempts_waiting_through_one_outage_are_told_once() -> None:
    """Attempts running at once each wait for the same server: one notification that
    it went away, one that it is back; an attempt whose wait gave up does not end the
    outage (the next one's wait is not told again)."""
    triggers = Triggers("r1", Path("/runs/r1"))

    def wait(attempt: int) -> ev.ModelRetry:
        return ev.ModelRetry(
            agent="worker", model="openai/x", attempt=attempt, cause="not_answering", wait_s=1.0
        )

    told = [
        triggers.attempt_notification("a1", wait(1)),
        triggers.attempt_notification("a2", wait(1)),
        triggers.attempt_notification("a1", wait(2)),
        triggers.attempt_notification(
            "a1", ev.ModelError(agent="worker", model="openai/x", error="x", server_waited_s=9.0)
        ),
        triggers.attempt_notification("a3", wait(1)),
        triggers.attempt_notification("a2", ev.ModelCall(agent="worker", model="openai/x")),
        triggers.attempt_notification("a3", ev.ModelCall(agent="worker", model="openai/x")),
    ]
    kinds = [(n.kind, n.attempt) if n else None for n in told]
    assert kinds == [("server_wait", "a1"), None, None, None, None, ("server_back", "a2"), None]
    back = told[5]
    assert back is not None and "(4 tries)" in back.message
