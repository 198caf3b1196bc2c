"""The control endpoint of a live run (agent/control/control_server.py), spoken to as `mlra ctl`
and `mlra attach` speak to it, from the run's own event loop.

A real run (real sandbox, the scripted model server) is held at a breakpoint while the
test opens connections to its socket; each step waits on the run's events or on the
server's replies, never on the clock.
"""

from __future__ import annotations

import asyncio
import json
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.control import control_server
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.control_socket import CtlRequest, encode, is_live, short_address, socket_path
from mlra.tasks.spec import load_task
from mlra.tools.sandbox import bwrap as bw
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

pytestmark = pytest.mark.skipif(bw.find_bwrap() is None, reason="needs bubblewrap")


def _script() -> dict[str, Any]:
    return {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }


def _controller(server: ScriptedModelServer, task: Path, runs: Path) -> RunController:
    provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
    config = RunConfig(
        task="answer", model="openai/test", runs_dir=runs, run_id="c", breakpoints=["bash"]
    )
    controller = RunController(config, load_task(task), provider)
    controller.prepare()
    return controller


class Client:
    """One connection to the run's socket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, run_dir: Path) -> Client:
        with short_address(run_dir) as address:
            reader, writer = await asyncio.open_unix_connection(address)
        return cls(reader, writer)

    async def send(self, message: BaseModel | bytes) -> None:
        self.writer.write(message if isinstance(message, bytes) else encode(message))
        await self.writer.drain()

    async def line(self) -> dict[str, Any] | None:
        data = await asyncio.wait_for(self.reader.readline(), 30)
        return json.loads(data) if data else None

    async def ask(self, message: BaseModel | bytes) -> dict[str, Any]:
        await self.send(message)
        reply = await self.line()
        assert reply is not None, "the server closed the connection"
        return reply

    async def said(self, message: BaseModel | bytes) -> tuple[bool, str]:
        reply = await self.ask(message)
        return reply["ok"], reply["message"]

    async def reply_among_events(
        self, message: BaseModel, events: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The reply to `message` on a watching connection; the events streamed before it
        go to `events`."""
        await self.send(message)
        while (reply := await self.line()) is not None:
            if "event" not in reply:
                return reply
            events.append(reply)
        raise AssertionError("the server closed the connection")

    async def rest(self) -> list[dict[str, Any]]:
        """Every line until the server closes the connection."""
        lines = []
        while (reply := await self.line()) is not None:
            lines.append(reply)
        return lines

    def close(self) -> None:
        self.writer.close()


def _waiting(controller: RunController) -> asyncio.Event:
    asked = asyncio.Event()
    controller.subscribe(lambda e: asked.set() if isinstance(e, ev.ApprovalRequested) else None)
    return asked


async def test_watch_hold_and_controls(tmp_path: Path, answer_task: Path) -> None:
    with ScriptedModelServer(_script()) as server:
        controller = _controller(server, answer_task, tmp_path)
        run_dir = controller.run_dir
        stale = socket.socket(socket.AF_UNIX)  # a killed run's socket, left behind
        with short_address(run_dir) as address:
            stale.bind(address)
        stale.close()
        (run_dir / ".control-old").mkdir(mode=0o700)  # a run killed mid-bind left this
        asked = _waiting(controller)
        running = asyncio.create_task(controller.run(agent_for))
        await asyncio.wait_for(asked.wait(), 60)
        assert controller.control_server is not None
        assert stat.S_IMODE(socket_path(run_dir).stat().st_mode) == 0o600
        assert await asyncio.to_thread(is_live, run_dir)  # the stale one was replaced

        first = await Client.open(run_dir)
        bad = await first.ask(b"not json\n")
        assert not bad["ok"] and bad["message"].startswith("refused: not a request")
        unknown = await first.ask(b'{"op": "fly"}\n')
        assert not unknown["ok"] and "refused: not a request" in unknown["message"]
        status = (await first.ask(CtlRequest(op="status", client="attach")))["status"]
        assert status["state"] == "waiting" and status["pending"][0]["tool"] == "bash"
        assert status.get("holder") is None and status["watchers"] == 0

        # An attached console acts only while it holds the controls, one at a time.
        approve = CtlRequest(op="approve", client="attach")
        assert await first.said(approve) == (
            False,
            "watching: nobody holds the controls (hold them first)",
        )
        controller.control_server.holder = "console"  # a console running the run here
        held = await first.said(CtlRequest(op="hold", client="attach", text="alice"))
        assert held == (False, "watching: console holds the controls")
        controller.control_server.holder = None
        assert (await first.ask(CtlRequest(op="hold", client="attach", text="alice")))["ok"]
        second = await Client.open(run_dir)
        assert await second.said(approve) == (False, "watching: alice holds the controls")
        assert await first.said(CtlRequest(op="release", client="attach")) == (
            True,
            "controls released",
        )
        assert (await first.ask(CtlRequest(op="hold", client="attach", text="alice")))["ok"]
        first.close()  # the holder goes: the controls are free again
        async with asyncio.timeout(30):
            while controller.control_server.holder is not None:  # noqa: ASYNC110 (its state)
                await asyncio.sleep(0.01)
        assert (await second.ask(CtlRequest(op="hold", client="attach", text="bob")))["ok"]

        # Watchers: every event once, in order, then the end.
        await second.send(CtlRequest(op="watch"))
        third = await Client.open(run_dir)
        await third.send(CtlRequest(op="watch", from_seq=3))
        watched_from_3: list[dict[str, Any]] = []
        status = (await third.reply_among_events(CtlRequest(op="status"), watched_from_3))["status"]
        assert status["holder"] == "bob" and status["watchers"] == 2

        # A one-off command of the folder's owner acts whoever holds the controls.
        ctl = await Client.open(run_dir)
        call_id = status["pending"][0]["call_id"]
        assert await ctl.said(CtlRequest(op="approve")) == (True, f"approved {call_id}")
        ctl.close()
        await running

        watched = await second.rest()
        watched_from_3 += await third.rest()

    log = read_events(run_dir / "events.jsonl")
    seqs = [e.seq for e in log]
    assert [r["event"]["seq"] for r in watched if "event" in r] == seqs
    assert [r["event"]["seq"] for r in watched_from_3 if "event" in r] == [s for s in seqs if s > 3]
    for lines in (watched, watched_from_3):
        assert lines[-1]["ended"] is True and lines[-1]["message"].startswith("the run ended")
        assert [r for r in lines if "event" in r][-1]["event"]["type"] == "run_finished"
    approved = next(e for e in log if isinstance(e, ev.Control) and e.action == "approve")
    assert approved.source == "ctl"
    assert not socket_path(run_dir).exists()
    assert [p.name for p in run_dir.iterdir() if p.name.startswith(".control")] == []


async def test_a_watcher_too_far_behind_is_dropped_and_the_run_goes_on(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control_server, "WATCH_QUEUE", 3)
    with ScriptedModelServer(_script()) as server:
        controller = _controller(server, answer_task, tmp_path)
        asked = _waiting(controller)
        running = asyncio.create_task(controller.run(agent_for))
        await asyncio.wait_for(asked.wait(), 60)
        assert controller.log is not None
        slow = await Client.open(controller.run_dir)
        await slow.send(CtlRequest(op="watch", from_seq=controller.log.last_seq))
        assert (await slow.ask(CtlRequest(op="status")))["status"]["watchers"] == 1
        for n in range(10):  # appended in one go: the watcher cannot keep up
            controller.append(ev.Notice(message=f"burst {n}"))
        lines = await slow.rest()
        assert lines[-1]["ok"] is False
        assert lines[-1]["message"].startswith("dropped: this watcher fell 3 events behind")
        assert len(lines) <= 4
        assert controller.approve(controller.controls.pending_calls()[0])
        result = await running
    assert result.status == "finished" and result.score == 1.0


def test_a_run_being_graded_refuses_what_would_change_nothing() -> None:
    """Once the agent has stopped and the evaluator runs to its end, `mlra ctl pause`
    (or step, inject, stop...) would be recorded and change nothing, as the console's
    keys would: each is refused in one line; status and quit still answer."""
    from types import SimpleNamespace

    from mlra.agent.control.control_ops import Refused, act
    from mlra.agent.loop.controls import Controls
    from mlra.agent.record.state import RunState

    state = RunState()
    state.evaluating = True
    run: Any = SimpleNamespace(state=state, controls=Controls(), run_id="r1")
    for op in ("pause", "resume", "step", "inject", "approve", "stop", "breakpoints"):
        with pytest.raises(Refused, match=f"being graded: {op} does not apply") as refused:
            act(run, CtlRequest(op=op, text="hello"))
        # ctl's own command, not the console's key: it said "quit ends it ungraded".
        assert str(refused.value).endswith("(mlra ctl r1 quit ends it ungraded)")
