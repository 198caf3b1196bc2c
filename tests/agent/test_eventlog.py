"""The event log: one flushed line per event, typed round trips, torn tails."""

from __future__ import annotations

import json
import os
import typing
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record import eventlog
from mlra.agent.record.eventlog import EventLog, LogDamage, UnwritableEvent, read_events


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
        ev.TimeWarning(left_s=60.0, limit_s=600.0),
        ev.TimeLimitRaised(
            limit_s=578.0,
            was_s=289.0,
            why="attempt a4 started with a larger share",
            commands={"c7": 560.5},
        ),
        ev.Metrics(
            source="job:j1",
            job="j1",
            points=[ev.MetricPoint(name="loss", value=2.5, step=10, wall=3.25)],
        ),
        ev.PlanUpdated(steps=[ev.PlanStep(id="1", title="a")]),
        ev.SupervisorMessage(text="plan"),
        ev.SubtaskStarted(subtask=1, instructions="do"),
        ev.SubtaskFinished(subtask=1, report="done"),
        ev.WorkerAlone(reason="supervisor_idle", supervisor_turns=4, message="the worker takes it"),
        ev.Review(subtask=1, after_steps=3),
        ev.StepStarted(agent="worker", step=1, turn=1),
        ev.TextDelta(agent="worker", turn=1, text="th"),
        ev.WorkerThought(text="thinking"),
        ev.ToolCall(call_id="c", agent="worker", tool="bash", arguments={"command": "ls"}),
        ev.ApprovalRequested(call_id="c", tool="bash"),
        ev.ToolStarted(call_id="c"),
        ev.ToolOutput(call_id="c", text="out"),
        ev.ToolResult(call_id="c", tool="bash", agent="worker", ok=True, output="out"),
        ev.ModelCall(agent="worker", model="m"),
        ev.ModelError(agent="worker", model="m", error="boom"),
        ev.ModelRetry(agent="worker", model="m", attempt=1, max_retries=2, status=429),
        ev.ModelAnswering(agent="worker", turn=1, first_token_s=2.5),
        ev.ContextWindowLearned(agent="worker", context_window=8192, assumed=32_768),
        ev.HistorySummarized(agent="worker", summary="s", first_turn=1, last_turn=2),
        ev.ResourceSample(cpu_percent=1, ram_used_mb=1, ram_total_mb=2, disk_workspace_mb=0),
        ev.Control(action="pause"),
        ev.Submission(path="x"),
        ev.EvaluationStarted(evaluator="script", artifact="x"),
        ev.EvaluationProgress(line="Scoring: 50%|#  | 1/2", what="Scoring", done=1, total=2),
        ev.EvaluationFinished(ok=True, metric="m", score=1.0),
        ev.WorkspaceSnapshot(step=1, changed=[ev.FileChange(path="a", size=1, sha256="x")]),
        ev.RunResumed(),
        ev.RunForked(run_id="b", source_run="a", source_dir="runs/a", at_step=3, model="baseline"),
        ev.JobStarted(job="job-1", name="train", command="python train.py", log="jobs/job-1.log"),
        ev.JobEnded(job="job-1", end="stopped", reason="the time limit was reached"),
        ev.AttemptStarted(attempt="a1", operator="draft", instructions="x", folder="attempts/a1"),
        ev.AttemptFinished(attempt="a1", status="validated", score=0.7, metric="acc"),
        ev.Validation(artifact="submission", ok=True, metric="accuracy", score=0.8),
        ev.ExperimentNote(hypothesis="a larger learning rate helps", change="lr 1e-3"),
        ev.Experiment(number=1, hypothesis="a larger learning rate helps", validation_seq=3),
        ev.UnknownEvent(original_type="from_a_newer_mlra", fields={"x": 1}),
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


# --- integrity: a log no one can quietly rewrite ---------------------------------------


def _log_of(path: Path, n: int) -> list[bytes]:
    log = EventLog(path)
    for i in range(n):
        log.append(ev.Notice(message=f"n{i}"))
    log.close()
    return path.read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize(
    ("edit", "line", "problem"),
    [
        (lambda ls: ls[:2] + ls[3:], 3, "seq 4 where 3 was due: seq 3 is missing"),
        (lambda ls: [*ls[:3], ls[2], *ls[3:]], 4, "seq 3 where 4 was due: a repeated or moved"),
        (lambda ls: [ls[1], ls[0], *ls[2:]], 1, "seq 2 where 1 was due"),
        (lambda ls: [*ls[:2], b'{"v":1,"seq":3,"type":"notice"}\n', *ls[3:]], 3, "not a valid"),
    ],
    ids=["gap", "duplicate", "swapped", "forged"],
)
def test_a_line_removed_repeated_moved_or_forged_is_damage_at_its_line(
    tmp_path: Path, edit: typing.Callable[[list[bytes]], list[bytes]], line: int, problem: str
) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(edit(_log_of(path, 5))))
    with pytest.raises(LogDamage) as raised:
        read_events(path)
    assert (raised.value.path, raised.value.line) == (path, line)
    assert raised.value.problem.startswith(problem)
    assert str(raised.value).startswith(f"{path}:{line}: ")


def test_a_torn_tail_after_whole_lines_is_not_damage(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    lines = _log_of(path, 3)
    path.write_bytes(b"".join(lines) + lines[0][:10])  # the next write, cut short
    assert [e.seq for e in read_events(path, on_torn_tail=lambda _: None)] == [1, 2, 3]


def test_nul_and_undecodable_file_names_keep_the_log_whole_and_round_trip(
    tmp_path: Path,
) -> None:
    name = os.fsdecode(b"caf\xe9-\xff.txt")  # not UTF-8: lone surrogates, as os.listdir gives
    assert "\udce9" in name
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    written = [
        log.append(ev.Notice(message="before")),
        log.append(ev.ToolOutput(call_id="c", text=f"a\x00b {name}\n")),
        log.append(
            ev.ToolCall(call_id="c", agent="worker", tool="bash", arguments={name: [name, "\x00"]})
        ),
        log.append(ev.WorkspaceSnapshot(step=1, changed=[ev.FileChange(path=name, size=1)])),
        log.append(ev.Notice(message="after")),
    ]
    log.close()
    data = path.read_bytes()
    data.decode("utf-8")  # valid UTF-8 throughout, one JSON line per event
    assert all(json.loads(line) for line in data.splitlines())
    back = read_events(path)
    assert back == written and [e.seq for e in back] == [1, 2, 3, 4, 5]
    assert back[1].text == f"a\x00b {name}\n"  # type: ignore[union-attr]
    assert back[3].changed[0].path == name  # type: ignore[union-attr]


def test_an_event_that_cannot_be_written_uses_no_seq_and_leaves_no_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.append(ev.Notice(message="first"))
    bad = ev.ToolCall(call_id="c", agent="worker", tool="bash", arguments={"x": object()})
    with pytest.raises(UnwritableEvent):
        log.append(bad)
    assert bad.seq == 0
    log.append(ev.Notice(message="second"))
    log.close()
    assert [(e.seq, e.type) for e in read_events(path)] == [(1, "notice"), (2, "notice")]


def test_a_write_that_fails_half_way_is_cut_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.append(ev.Notice(message="first"))
    real_write = os.write

    def disk_full(fd: int, data: typing.Any) -> int:
        real_write(fd, bytes(data[:7]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(eventlog.os, "write", disk_full)
    with pytest.raises(OSError):
        log.append(ev.Notice(message="lost"))
    monkeypatch.undo()
    log.append(ev.Notice(message="second"))
    log.close()
    assert [e.message for e in read_events(path)] == ["first", "second"]  # type: ignore[union-attr]
    assert [e.seq for e in read_events(path)] == [1, 2]
