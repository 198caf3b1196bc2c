"""A Ray run on a node without the batch folder shows its numbers in the batch's progress
while it runs, as a local run does: its event logs reach the driver as they grow
(executors/live_log.py). Before, its line said "running" and nothing more (no clock, no
step, no cost) until its folder came back at its end.

Here the node's side (`LogTail` on a live run folder) and the driver's (`write_piece`
into the copy, read by `run_status`, shown by `PlainProgress`) meet without Ray; a run
on a real local Ray is in test_batch_ray.py."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.batch.executors.live_log import LogTail, copy_folder, write_piece
from mlra.batch.progress import PlainProgress
from mlra.batch.runner import Progress
from mlra.batch.state import run_status
from tests.console.test_heartbeats import _training_run

SANDBOX = ev.SandboxInfo(
    kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
)


def _started(log: EventLog, run_id: str) -> None:
    log.append(ev.RunStarted(run_id=run_id, task="t", task_title="T", model="openai/m",
                             limits=ev.Limits(time_limit_s=600), sandbox=SANDBOX))  # fmt: skip
    log.append(ev.ModelCall(agent="worker", model="openai/m", cost_usd=0.25, t=4.0))


def _sync(tail: LogTail, copy: Path) -> None:
    for piece in tail.poll():
        assert write_piece(copy, piece)


def _line(out: Path, run_id: str, copy: Path) -> str:
    """The batch's 30-second line for the run, as a user reads it."""
    text = io.StringIO()
    display = PlainProgress(text, every_s=30)
    p = Progress(total=1)
    p.statuses[run_id] = run_status(out, run_id, copy=copy)
    p.active.add(run_id)
    p.started_at = time.monotonic() - 31
    display(p)
    return text.getvalue().strip()


def test_a_run_on_a_node_without_the_batch_folder_shows_its_numbers_while_it_runs(
    tmp_path: Path,
) -> None:
    out, node = tmp_path / "b", tmp_path / "node-scratch"
    run_id = "t__openai-m__s1-0123456789abcdef"
    log = EventLog(node / "runs" / run_id / EVENTS_FILE)  # held open: the run runs, there
    _started(log, run_id)
    for event in _training_run(90):
        if event.t <= 65:
            log.append(event)
    tail, copy = LogTail(node / "runs" / run_id), copy_folder(out / ".incoming" / "t0", "a1")
    _sync(tail, copy)
    assert not (out / "runs" / run_id).exists()  # its folder comes back at its end
    line = _line(out, run_id, copy)
    assert re.fullmatch(
        r"\[0/1 done · 1 running · 0 queued · 0 failed · 31s · \$0\.25\] "
        rf"{run_id} running 1m05s · step 366/600 loss 3\.48 · ETA \d+s",
        line,
    ), line

    # It goes on: the next poll sends only what the log gained, and the line follows.
    for event in _training_run(90):
        if 65 < event.t <= 85:
            log.append(event)
    _sync(tail, copy)
    assert (copy / EVENTS_FILE).read_bytes() == (node / "runs" / run_id / EVENTS_FILE).read_bytes()
    assert " running 1m25s · step 500/600 loss 2.55 · ETA 10s" in _line(out, run_id, copy)
    log.close()


def test_a_searching_runs_attempts_on_such_a_node_are_shown_too(tmp_path: Path) -> None:
    out, node = tmp_path / "b", tmp_path / "node-scratch"
    run_id = "t__openai-m__s1-0123456789abcdef"
    run_dir = node / "runs" / run_id
    log = EventLog(run_dir / EVENTS_FILE)
    _started(log, run_id)
    log.append(ev.AttemptStarted(attempt="a1", folder="attempts/a1", t=10.0))
    log.append(ev.ToolCall(call_id="w1", agent="supervisor", tool="attempt_wait", t=10.0))
    a1 = EventLog(run_dir / "attempts" / "a1" / EVENTS_FILE)
    for event in _training_run(90):
        if event.t <= 35:
            a1.append(event)
    copy = copy_folder(out / ".incoming" / "t0", "a1")
    _sync(LogTail(run_dir), copy)
    line = _line(out, run_id, copy)
    assert line.endswith(f"{run_id} running 10s · a1 35s · step 166/600 loss 4.86 · ETA 1m00s")
    a1.close()
    log.close()


def test_only_whole_lines_travel_and_a_log_written_anew_is_sent_again(tmp_path: Path) -> None:
    """A line being written may yet be cut away (a full disk): it is sent once whole. A log
    found shorter than what was sent is sent again from its start, not appended to."""
    run_dir, copy = tmp_path / "node" / "r1", tmp_path / "copy"
    run_dir.mkdir(parents=True)
    path = run_dir / EVENTS_FILE
    path.write_bytes(b'{"a":1}\n{"b":')
    tail = LogTail(run_dir)
    _sync(tail, copy)
    assert (copy / EVENTS_FILE).read_bytes() == b'{"a":1}\n'
    path.write_bytes(b'{"a":1}\n{"b":2}\n')
    _sync(tail, copy)
    assert (copy / EVENTS_FILE).read_bytes() == b'{"a":1}\n{"b":2}\n'
    path.write_bytes(b'{"c":3}\n')
    _sync(tail, copy)
    assert (copy / EVENTS_FILE).read_bytes() == b'{"c":3}\n'
    # A piece naming anything but a run's event logs is refused.
    assert not write_piece(copy, ("../../elsewhere/events.jsonl", 0, b"x"))
    assert not write_piece(copy, ("attempts/../events.jsonl", 0, b"x"))
    assert not write_piece(copy, ("workspace/notes.txt", 0, b"x"))
    assert sorted(p.name for p in copy.rglob("*")) == [EVENTS_FILE]
