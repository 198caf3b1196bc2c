"""`--model replay:RUN` runs each call as the recorded run ran it: a call the user
edited at a breakpoint runs with the user's arguments, one the user rejected is
rejected with the recorded message, and the replay says it did so. Replaying the
call as the model asked for it made every edited run diverge at the next model call.

The recording is made in-process (the user's decisions given as its approval
requests come), over the scripted model server through the real OpenAI SDK; the
replay runs through the real command line.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.providers import resolve_model
from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.run_lookup import find_run
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.conftest import ANSWER_TASK, SECRET_ENV, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

ASKED = {"command": "echo 41 > answer.txt"}
EDITED = {"command": "echo 42 > answer.txt"}
REJECTED = {"command": "echo 40 > answer.txt"}
WHY = "keep the answer you have"


async def _record(runs: Path) -> Path:
    """A finished run whose user edited its first `echo` and rejected its second."""
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("Write the answer.", call("bash", **ASKED)),
            turn("Write it again.", call("bash", **REJECTED)),
            turn("Read it back.", call("bash", command="cat answer.txt")),
            turn("", call("report", summary="answer.txt holds the answer")),
        ],
    }
    with ScriptedModelServer(script, turn_by_history=True) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer",
            model="openai/test",
            runs_dir=runs,
            run_id="recorded",
            isolation="none",
            breakpoints=["bash:echo"],
        )
        controller = RunController(config, load_task(ANSWER_TASK), provider)
        controller.prepare()
        loop = asyncio.get_running_loop()

        def decide(event: ev.Event) -> None:
            if isinstance(event, ev.ApprovalRequested):
                if event.arguments == ASKED:
                    loop.call_soon(controller.edit, event.call_id, EDITED)
                else:
                    loop.call_soon(controller.reject, event.call_id, WHY)

        controller.subscribe(decide)
        result = await controller.run(agent_for)
    assert result.status == "finished", result
    return controller.run_dir


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return asyncio.run(_record(tmp_path_factory.mktemp("decided") / "runs"))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env["OPENAI_API_KEY"] = "sk-test-not-a-secret"
    return env


def _replay(tmp: Path, recorded: Path, *extra: str) -> tuple[Any, Path]:
    proc = mlra_cli(
        [
            "run",
            str(ANSWER_TASK),
            "--model",
            f"replay:{recorded}",
            "--no-tui",
            "--runs-dir",
            str(tmp / "replays"),
            "--run-id",
            "the-replay",
            "--isolation",
            "none",
            *extra,
        ],
        cwd=tmp,
        env=_env(),
    )
    return proc, tmp / "replays" / "the-replay"


def test_a_replay_runs_the_users_edit_and_rejection_as_recorded(
    tmp_path: Path, recorded: Path
) -> None:
    proc, again = _replay(tmp_path, recorded)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said
    assert "replay_diverged" not in said and "diverged" not in said, said
    events = read_events(again / "events.jsonl")
    end = events[-1]
    assert isinstance(end, ev.RunFinished) and end.reason == "submitted", end
    # The edit ran, not what the model asked; the rejected call did not run.
    assert (again / "workspace" / "answer.txt").read_text().strip() == "42"
    results = {e.call_id: e for e in events if isinstance(e, ev.ToolResult)}
    then = {
        e.call_id: e for e in read_events(recorded / "events.jsonl") if isinstance(e, ev.ToolResult)
    }
    calls = [e for e in events if isinstance(e, ev.ToolCall) and e.tool == "bash"]
    edited, rejected = calls[0].call_id, calls[1].call_id
    assert results[edited].output.startswith("[The user edited this call before it ran")
    assert (
        results[rejected].output == then[rejected].output == f"The user rejected this call: {WHY}"
    )
    assert not results[rejected].ok
    # The replay's log says it applied the recorded decisions, and its transcript shows it.
    replayed = [e for e in events if isinstance(e, ev.Control) and e.source == "replay"]
    assert [(e.action, e.call_id) for e in replayed] == [("edit", edited), ("reject", rejected)]
    assert replayed[0].arguments == EDITED
    assert f"replayed the user's edit of call {edited}" in said, said
    assert json.dumps(EDITED["command"])[1:-1] in said
    assert f"replayed the user's rejection of call {rejected}: {WHY}" in said, said


def test_a_decision_goes_to_the_one_call_it_decided(tmp_path: Path) -> None:
    """A server that sends no call ids has `call_0` in every answer: the recorded edit of
    step 2's `call_0` went to step 1's too (and every later one), and the replay
    diverged. It goes to the call asked as it was decided, once."""
    edit = ev.Control(action="edit", call_id="call_0", arguments=EDITED)
    events: list[ev.Event] = [
        ev.ToolCall(call_id="call_0", agent="worker", tool="bash", arguments={"command": "ls"}),
        ev.ToolCall(call_id="call_0", agent="worker", tool="bash", arguments=ASKED),
        edit,
        ev.ToolCall(call_id="call_0", agent="worker", tool="bash", arguments=ASKED),
    ]
    provider = ReplayProvider(tmp_path, events)

    def asked(arguments: dict[str, Any]) -> ToolCallRequest:
        return ToolCallRequest(id="call_0", name="bash", arguments=arguments)

    assert provider.recorded_decision(asked({"command": "ls"})) is None
    assert provider.recorded_decision(asked(ASKED)) == edit
    assert provider.recorded_decision(asked(ASKED)) is None  # the third call: no edit


def test_a_replay_of_an_ids_start_records_its_recording_in_full(
    tmp_path: Path, recorded: Path
) -> None:
    """`--model replay:20261201` records the recording's folder, not the start typed: a
    later resume looked the start up again, and the replay's own id shared it."""
    start = recorded.name[:5]
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / recorded.name).symlink_to(recorded)
    proc, again = _replay(tmp_path, Path(start))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    started = read_events(again / "events.jsonl")[0]
    assert isinstance(started, ev.RunStarted)
    assert started.model == f"replay:runs/{recorded.name}"


def test_a_folder_that_is_no_run_is_named_as_it_is(tmp_path: Path) -> None:
    """`runs/S/attempts/a1` with no log opened `a10`, the one id that starts `a1`."""
    (tmp_path / "a1").mkdir()
    (tmp_path / "a10").mkdir()
    (tmp_path / "a10" / "events.jsonl").write_text("")
    assert find_run(str(tmp_path / "a1"), tmp_path) == tmp_path / "a1"


def _kill_after_first_echo(tmp: Path, again: Path) -> list[ev.Event]:
    """The replay `again` as if killed right after its first `echo`'s result, resumed:
    the resumed run's log."""
    log = again / "events.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    events = read_events(log)
    first = next(e for e in events if isinstance(e, ev.ToolResult) and e.tool == "bash")
    log.write_bytes(b"".join(lines[: events.index(first) + 1]))
    (again / "result.json").unlink(missing_ok=True)
    resumed = mlra_cli(["resume", str(again), "--no-tui"], cwd=tmp, env=_env())
    said = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, said
    assert "diverged" not in said, said
    events = read_events(log)
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    return events


def test_a_resumed_replay_goes_on_with_the_recording_where_it_stopped(
    tmp_path: Path, recorded: Path
) -> None:
    """Its catch-up answered the model calls from the replay's own log, and the recording
    was played from its first call again where the run went live: the worker's next
    request was compared with the supervisor's first, and diverged."""
    proc, again = _replay(tmp_path, recorded)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    whole = read_events(again / "events.jsonl")
    events = _kill_after_first_echo(tmp_path, again)
    assert (again / "workspace" / "answer.txt").read_text().strip() == "42"
    then = read_events(recorded / "events.jsonl")
    # The same outputs, each command's own run time aside ("0.0 s" in one, "0.1 s" in
    # the other on a loaded machine: two real runs of it).
    assert [_untimed(e.output) for e in events if isinstance(e, ev.ToolResult)] == [
        _untimed(e.output) for e in whole if isinstance(e, ev.ToolResult)
    ]
    assert len([e for e in events if isinstance(e, ev.ModelCall)]) == len(
        [e for e in then if isinstance(e, ev.ModelCall)]
    )


async def _record_without_ids(runs: Path) -> Path:
    """A finished run over a server that sends no call ids whose user rejected the
    worker's first `echo` and approved the same call asked again, as recorded before such
    calls got ids of their own: `call_0` in every answer (`_as_recorded_before`)."""
    no_id = {"name": "bash", "arguments": REJECTED, "id": ""}
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("Write the answer.", no_id),
            turn("Write it again.", no_id),
            turn("", call("report", summary="answer.txt holds the answer")),
        ],
    }
    with ScriptedModelServer(script, turn_by_history=True) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer",
            model="openai/test",
            runs_dir=runs,
            run_id="no-ids",
            isolation="none",
            breakpoints=["bash:echo"],
        )
        controller = RunController(config, load_task(ANSWER_TASK), provider)
        controller.prepare()
        loop = asyncio.get_running_loop()
        asked: list[str] = []

        def decide(event: ev.Event) -> None:
            if isinstance(event, ev.ApprovalRequested):
                asked.append(event.call_id)
                if len(asked) == 1:
                    loop.call_soon(controller.reject, event.call_id, WHY)
                else:
                    loop.call_soon(controller.approve, event.call_id)

        controller.subscribe(decide)
        result = await controller.run(agent_for)
    assert result.status == "finished", result
    assert len(set(asked)) == 2
    _as_recorded_before(controller.run_dir / "events.jsonl", asked)
    return controller.run_dir


def _as_recorded_before(log: Path, ids: list[str]) -> None:
    """The log with each of `ids` written `call_0`, as a run recorded it before calls sent
    with no id got one of their own: such recordings still replay as they did."""
    text = log.read_text()
    for call_id in ids:
        text = text.replace(f'"{call_id}"', '"call_0"')
    log.write_text(text)
    bash = [e.call_id for e in read_events(log) if isinstance(e, ev.ToolCall) and e.tool == "bash"]
    assert bash == ["call_0", "call_0"]


def test_a_resumed_replay_uses_up_the_decisions_its_catch_up_passed(tmp_path: Path) -> None:
    """A replay killed after the call its recording's user rejected, then resumed: the
    catch-up took that call's result from the log and left the rejection unused, so the
    next call, asked the same with the same `call_0` (a server that sends no ids), was
    rejected too, where the recording ran it, and the replay diverged."""
    recorded = asyncio.run(_record_without_ids(tmp_path / "runs"))
    proc, again = _replay(tmp_path, recorded)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = _kill_after_first_echo(tmp_path, again)
    bash = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "bash"]
    assert [e.output.startswith("The user rejected") for e in bash] == [True, False]
    assert bash[1].ok, bash[1].output
    replayed = [e for e in events if isinstance(e, ev.Control) and e.source == "replay"]
    assert [e.action for e in replayed] == ["reject"]


def _untimed(output: str) -> str:
    return re.sub(r"(\[exit code -?\d+), [\d.]+ s\]", r"\1]", output)
