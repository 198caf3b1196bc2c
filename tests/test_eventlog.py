"""The event log: one flushed line per event, typed round trips, torn tails."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from mlra.agent import events as ev
from mlra.agent.eventlog import EventLog, LogDamage, read_events


def _samples() -> list[ev.Event]:
    """One instance of every event type, so a new type without a sample fails the test."""
    return [
        ev.RunStarted(
            run_id="r",
            task="t",
            task_title="T",
            model="baseline",
            limits=ev.Limits(time_limit_s=60),
            sandbox=ev.SandboxInfo(
                kind="local", isolation="none", network=False, workdir="/w", workspace="/w"
            ),
        ),
        ev.RunFinished(status="finished", reason="submitted"),
        ev.Notice(message="hello"),
        ev.PlanUpdated(steps=[ev.PlanStep(id="1", title="a")]),
        ev.SupervisorMessage(text="plan"),
        ev.SubtaskStarted(subtask=1, instructions="do"),
        ev.SubtaskFinished(subtask=1, report="done"),
        ev.Review(subtask=1, after_steps=3),
        ev.StepStarted(agent="worker", step=1, turn=1),
        ev.TextDelta(agent="worker", turn=1, text="th"),
        ev.WorkerThought(text="thinking"),
        ev.ToolCall(call_id="c", agent="worker", tool="bash", arguments={"command": "ls"}),
        ev.ApprovalRequested(call_id="c", tool="bash"),
        ev.ToolOutput(call_id="c", text="out"),
        ev.ToolResult(call_id="c", tool="bash", agent="worker", ok=True, output="out"),
        ev.ModelCall(agent="worker", model="m"),
        ev.ModelError(agent="worker", model="m", error="boom"),
        ev.HistorySummarized(agent="worker", summary="s", first_turn=1, last_turn=2),
        ev.ResourceSample(cpu_percent=1, ram_used_mb=1, ram_total_mb=2, disk_workspace_mb=0),
        ev.Control(action="pause"),
        ev.Submission(path="x"),
        ev.EvaluationStarted(evaluator="script", artifact="x"),
        ev.EvaluationFinished(ok=True, metric="m", score=1.0),
        ev.WorkspaceSnapshot(step=1, changed=[ev.FileChange(path="a", size=1, sha256="x")]),
        ev.RunResumed(),
        ev.RunForked(run_id="b", source_run="a", source_dir="runs/a", at_step=3, model="baseline"),
    ]


def test_every_event_type_has_a_sample_and_round_trips(tmp_path: Path) -> None:
    union = typing.get_args(typing.get_args(ev.Event)[0])
    assert {type(e) for e in _samples()} == set(union)
    log = EventLog(tmp_path / "events.jsonl")
    written = [log.append(e) for e in _samples()]
    log.close()
    back = read_events(tmp_path / "events.jsonl")
    assert back == written
    assert [e.seq for e in back] == list(range(1, len(written) + 1))
    assert all(
        json.loads(line)["v"] == ev.SCHEMA_VERSION
        for line in (tmp_path / "events.jsonl").read_text().splitlines()
    )


def test_each_event_is_on_disk_before_append_returns(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.append(ev.Notice(message="first"))
    # Read through a separate handle while the log is still open: nothing is buffered.
    assert json.loads(path.read_text().splitlines()[-1])["message"] == "first"
    log.append(ev.Notice(message="second"))
    assert len(path.read_text().splitlines()) == 2
    log.close()


def test_subscribers_see_stamped_events(tmp_path: Path) -> None:
    seen: list[ev.Event] = []
    log = EventLog(tmp_path / "events.jsonl")
    log.subscribe(seen.append)
    log.append(ev.Notice(message="x"))
    assert seen[0].seq == 1 and seen[0].ts > 0
    log.close()


def test_a_torn_last_line_is_dropped_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.append(ev.Notice(message="kept"))
    log.close()
    with open(path, "a") as f:
        f.write('{"type": "notice", "mess')
    notes: list[str] = []
    events = read_events(path, on_torn_tail=notes.append)
    assert [e.message for e in events] == ["kept"]  # type: ignore[union-attr]
    assert notes and "half-written" in notes[0]


def test_damage_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"type": "nonsense"}\n' + ev.Notice(message="x").model_dump_json() + "\n")
    with pytest.raises(LogDamage, match=":1:"):
        read_events(path)
