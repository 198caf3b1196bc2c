"""A replay (`--model replay:RUN`) killed or stopped in the middle of a tool call, then
resumed, runs that call again and goes on with its recording. Its catch-up gave the cut
call an "Interrupted" (killed) or "[killed after ...]" (stopped) result, where the
recording had the call's real one, so the next request differed from the recording's
and the resumed replay diverged at once ("replay diverged at model call 2 ... now
'Interrupted: ...'"; cut during `submit`, "diverged after model call 8").

The recording is tests/agent/test_replay_decisions.py's (its user edited the worker's
first `echo` and rejected its second); the replays and resumes run through the real
command line, the stopped replay in-process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.fingerprint import normalize
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import fold
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.agent.test_replay_decisions import _env, _record, _replay
from tests.conftest import ANSWER_TASK, mlra_cli


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return asyncio.run(_record(tmp_path_factory.mktemp("decided") / "runs"))


def _results(events: list[ev.Event]) -> dict[str, str]:
    """Each call's last result, by call id, but for how long it took."""
    return {e.call_id: normalize(e.output) for e in events if isinstance(e, ev.ToolResult)}


def _resume(tmp: Path, again: Path) -> list[ev.Event]:
    """Resume `again` through the command line: it must finish as its recording did."""
    (again / "result.json").unlink(missing_ok=True)
    resumed = mlra_cli(["resume", str(again), "--no-tui"], cwd=tmp, env=_env())
    said = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, said
    assert "diverged" not in said, said
    events = read_events(again / "events.jsonl")
    end = events[-1]
    assert isinstance(end, ev.RunFinished) and end.reason == "submitted", end
    assert (again / "workspace" / "answer.txt").read_text().strip() == "42"
    return events


@pytest.mark.parametrize("tool", ["update_plan", "bash", "submit"])
def test_a_replay_killed_during_a_call_runs_it_again_on_resume(
    tmp_path: Path, recorded: Path, tool: str
) -> None:
    """Killed (its log cut) at the `tool_started` of the supervisor's first call, of the
    worker's `echo` its recording's user edited, and of `submit`."""
    proc, again = _replay(tmp_path, recorded)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = again / "events.jsonl"
    whole = read_events(log)
    asked = next(e for e in whole if isinstance(e, ev.ToolCall) and e.tool == tool)
    cut = next(
        i
        for i, e in enumerate(whole)
        if isinstance(e, ev.ToolStarted) and e.call_id == asked.call_id
    )
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[: cut + 1]))
    events = _resume(tmp_path, again)
    resumed = next(e for e in events if isinstance(e, ev.RunResumed))
    assert resumed.interrupted_calls == [asked.call_id]
    # The cut call ran again, to the result it had: every call's result is the recording's.
    assert _results(events) == _results(whole)
    assert not any(e.error == "interrupted" for e in events if isinstance(e, ev.ToolResult))
    calls = [e for e in events if isinstance(e, ev.ModelCall)]
    assert len(calls) == len([e for e in whole if isinstance(e, ev.ModelCall)])


async def _replay_stopped_in_bash(recorded: Path, runs: Path) -> Path:
    """A replay of `recorded` the user stops as the worker's edited `echo` begins."""
    config = RunConfig(
        task="answer",
        model=f"replay:{recorded}",
        runs_dir=runs,
        run_id="stopped",
        isolation="none",
    )
    controller = RunController(
        config, load_task(ANSWER_TASK), ReplayProvider.from_spec(f"replay:{recorded}")
    )
    loop = asyncio.get_running_loop()
    bash: list[str] = []

    def stop(event: ev.Event) -> None:
        if isinstance(event, ev.ToolCall) and event.tool == "bash":
            bash.append(event.call_id)
        if isinstance(event, ev.ToolStarted) and event.call_id in bash:
            loop.call_soon(controller.request_stop)

    controller.subscribe(stop)
    await controller.run(agent_for)
    return controller.run_dir


def test_a_replay_stopped_during_a_call_runs_it_again_on_resume(
    tmp_path: Path, recorded: Path
) -> None:
    """The user's stop wrote the call's result, "[killed after ...]", and the resumed
    replay went on from it where the recording went on from the call's real result."""
    again = asyncio.run(_replay_stopped_in_bash(recorded, tmp_path / "replays"))
    stopped = read_events(again / "events.jsonl")
    end = stopped[-1]
    assert isinstance(end, ev.RunFinished) and end.reason == "stopped", end
    killed = [e for e in stopped if isinstance(e, ev.ToolResult) and "killed after" in e.output]
    assert [e.tool for e in killed] == ["bash", "assign_subtask"], killed
    events = _resume(tmp_path, again)
    then = read_events(recorded / "events.jsonl")
    bash = [e.output for e in then if isinstance(e, ev.ToolResult) and e.tool == "bash"]
    again_ran = _results(events)[killed[0].call_id]
    assert normalize(again_ran) == normalize(bash[0])  # the same, but for its duration
    # While it runs again, the console shows it running (its first result had ended it).
    cut_id = killed[0].call_id
    begun = [
        i for i, e in enumerate(events) if isinstance(e, ev.ToolStarted) and e.call_id == cut_id
    ]
    assert len(begun) == 2, begun
    state = fold(events[: begun[1] + 1])
    assert cut_id in state.running and cut_id in state.begun


@pytest.mark.parametrize("after", [ev.Control, ev.ToolStarted])
def test_a_resumed_replay_logs_each_replayed_decision_once(
    tmp_path: Path, recorded: Path, after: type[ev.Event]
) -> None:
    """Killed after its `control` applying the recording's edit of the worker's `echo`,
    before or after the call began: the call runs again on resume, and its edit was
    logged a second time."""
    proc, again = _replay(tmp_path, recorded)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = again / "events.jsonl"
    whole = read_events(log)
    edit = next(e for e in whole if isinstance(e, ev.Control) and e.source == ev.REPLAYED)
    cut = next(
        i
        for i, e in enumerate(whole)
        if isinstance(e, after) and getattr(e, "call_id", None) == edit.call_id
    )
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[: cut + 1]))
    events = _resume(tmp_path, again)
    replayed = [e for e in events if isinstance(e, ev.Control) and e.source == ev.REPLAYED]
    then = [e for e in whole if isinstance(e, ev.Control) and e.source == ev.REPLAYED]
    assert [(e.action, e.call_id) for e in replayed] == [(e.action, e.call_id) for e in then]
    assert _results(events) == _results(whole)
