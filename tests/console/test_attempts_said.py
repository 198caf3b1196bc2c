"""What a search's attempts said, shown from the run (issue 40): each attempt is a run with
a log of its own, and its model calls' speed and its notices (the text-tool-call
fallback, a learned window, a wait for the server) are read there by the run's headless
transcript and console, prefixed with the attempt's id, never copied into the run's log.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import encode_event, read_events
from mlra.console.apps.app import MlraApp
from mlra.console.cli.cli import main
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.panes.transcript_entries import NoteEntry
from mlra.console.text import attempt_logs
from mlra.console.text.headless import TranscriptDisplay
from tests.console.console_fixtures import EPOCH
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

UNISOLATED = "isolation 'none' was asked for"


def _attempt_log(run_dir: Path) -> None:
    """a1's own log: a notice the run gave already, a call whose counts the server did
    not send, a learned window, a wait for the server, the fallback notice, and output
    the run does not show."""
    said: list[ev.Event] = [
        ev.Notice(level="warning", message=UNISOLATED, t=1.0, ts=EPOCH + 2),
        ev.ModelCall(agent="worker", model="m", output_tokens=120, latency_s=7.0,
                     first_token_s=3.0, tokens_estimated=True, t=5.0, ts=EPOCH + 5),
        ev.ToolOutput(call_id="c1", text="step 1/9\n", t=6.0, ts=EPOCH + 6),
        ev.ContextWindowLearned(agent="worker", context_window=9000, assumed=32_768,
                                t=7.0, ts=EPOCH + 7),
        ev.ModelRetry(agent="worker", model="m", attempt=1, max_retries=8, cause="not_answering",
                      wait_s=2.0, t=8.0, ts=EPOCH + 8),
        ev.Notice(level="warning", message="the tools are now described in the prompt",
                  t=9.0, ts=EPOCH + 9),
        ev.ModelCall(agent="worker", model="m", output_tokens=40, latency_s=2.0,
                     t=30.0, ts=EPOCH + 30),
    ]  # fmt: skip
    for seq, event in enumerate(said, 1):
        event.seq = seq
    log = run_dir / "attempts" / "a1" / "events.jsonl"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"".join(encode_event(e) for e in said))


def _run_log() -> list[ev.Event]:
    events: list[ev.Event] = [
        ev.Notice(level="warning", message=UNISOLATED, t=0.0),
        ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=1.0),
        *[ev.ResourceSample(cpu_percent=0, ram_used_mb=1, ram_total_mb=2, disk_workspace_mb=0,
                            t=float(s)) for s in range(2, 20)],
        ev.AttemptFinished(attempt="a1", status="validated", score=0.5, metric="acc",
                           duration_s=40, t=41.0),
    ]  # fmt: skip
    for seq, event in enumerate(events, 1):
        event.seq, event.ts = seq, EPOCH + event.t
    return events


def test_the_headless_transcript_shows_each_attempt_s_calls_and_notices(tmp_path: Path) -> None:
    _attempt_log(tmp_path)
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False, heartbeat_s=None)
    display.attempts_in(tmp_path)
    display.time_calls(True)  # a model on the user's own server
    for event in _run_log():
        display.on_event(event)
    lines = out.getvalue().splitlines()
    assert lines == [
        "[0s] ! isolation 'none' was asked for",  # the run's own, not said again from a1
        "[1s] attempt a1 started: draft from the starter",
        # Each at the run's clock when the run read it (it reads its attempts each second).
        "[5s] a1 · worker answered in 7.0s: prompt read in 3.0s, ~120 tokens at ~30 tok/s",
        "[7s] a1 · the model's window is taken as 9,000 tokens from the server's answer "
        "(was 32,768); pass --context-window 9000 to start from it",
        "[8s] a1 · worker model retry 1/8 after the server is not answering; waiting 2s, "
        "clock paused",
        "[9s] a1 · ! the tools are now described in the prompt",
        # Written after the run's last sample: read to its end before the attempt's end.
        "[41s] a1 · worker answered in 2.0s: 40 tokens at 20 tok/s",
        "[41s] attempt a1 validated: acc 0.5 after 40s",
    ]


def test_a_remote_model_s_calls_are_not_timed_but_notices_still_show(tmp_path: Path) -> None:
    _attempt_log(tmp_path)
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False, heartbeat_s=None)
    display.attempts_in(tmp_path)
    for event in _run_log():
        display.on_event(event)
    shown = out.getvalue()
    assert "answered in" not in shown
    assert "a1 · ! the tools are now described in the prompt" in shown


async def test_the_console_s_transcript_shows_the_attempts_notices(tmp_path: Path) -> None:
    _attempt_log(tmp_path)
    app = MlraApp(events=_run_log(), run_dir=tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        notes = [str(e.line) for e in app.query_one(TranscriptPane).query(NoteEntry)]
    said = [line for line in notes if " a1 · " in line]
    assert any("a1 · ! the tools are now described in the prompt" in line for line in said)
    assert any("a1 · the model's window is taken as 9,000 tokens" in line for line in said)
    assert not any("answered in" in line for line in said)  # a vendor's model: not timed
    assert notes.index(said[-1]) < next(i for i, n in enumerate(notes) if "validated" in n)


def test_a_greedy_search_s_headless_output_shows_its_attempts_model(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Against the fake server as a local one that drops native tools and sends no
    counts: the attempt's worker answers twice in prose, falls back to tools in the
    prompt, then answers. The run's own output shows the attempt's calls (estimated,
    marked ~) and its fallback notice; its log holds none of them."""
    worker = [
        {"text": "I will think about it.", "no_usage": True},
        {"text": "Still thinking.", "no_usage": True},
        {**turn("", call("bash", command="echo 42 > answer.txt")), "no_usage": True},
        {**turn("", call("report", summary="answer.txt holds 42")), "no_usage": True},
    ]
    with ScriptedModelServer({"worker": worker}) as server:
        code = main(
            [
                "run", str(answer_task), "--model", "openai/scripted",
                "--base-url", server.url_for("openai"), "--runs-dir", str(tmp_path),
                "--run-id", "r", "--isolation", "none", "--search", "greedy",
                "--attempts", "1", "--no-tui",
            ]
        )  # fmt: skip
    shown = capsys.readouterr().out
    lines = shown.splitlines()
    run_dir = tmp_path / "r"
    own = read_events(run_dir / "events.jsonl")
    attempt = read_events(run_dir / "attempts" / "a1" / "events.jsonl")
    assert code == 0, shown
    fallback = [e for e in attempt if isinstance(e, ev.Notice) and "natively" in e.message]
    assert len(fallback) == 1
    assert not any(isinstance(e, ev.Notice) and "natively" in e.message for e in own)
    calls = [line for line in lines if " a1 · worker answered in " in line]
    assert len(calls) == sum(isinstance(e, ev.ModelCall) for e in attempt) >= 4
    assert all("~" in line and "tok/s" in line for line in calls)
    told = [line for line in lines if " a1 · ! the model answered 2 times" in line]
    assert len(told) == 1
    finished = next(i for i, line in enumerate(lines) if "attempt a1 validated" in line)
    assert lines.index(told[0]) < finished and lines.index(calls[-1]) < finished


def test_a_resumed_run_follows_its_running_attempts_from_where_their_logs_end(
    tmp_path: Path,
) -> None:
    """`mlra resume --no-tui`: the printer never sees the past `attempt_started`; the
    attempt it took up is followed on, and what it said before is not said again."""
    _attempt_log(tmp_path)
    past, after = _run_log()[:3], _run_log()[3:]
    log = tmp_path / "attempts" / "a1" / "events.jsonl"
    later = ev.Notice(level="warning", message="said after the resume", seq=8, t=31.0)
    later.ts = EPOCH + 31
    with log.open("ab") as f:
        out = io.StringIO()
        display = TranscriptDisplay(out, rich=False, heartbeat_s=None)
        display.attempts_in(tmp_path, past)
        f.write(encode_event(later))
    for event in after:
        display.on_event(event)
    said = [line for line in out.getvalue().splitlines() if "a1 · " in line]
    assert said == ["[41s] a1 · ! said after the resume"]


def test_an_attempt_log_longer_than_a_read_is_shown_whole_and_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay or a resume reads each attempt's log a chunk at a time, never the whole
    file at once on the thread that draws the console: an attempt whose log is many
    chunks long (one of its lines longer than a chunk) still shows every call, in
    order, by the attempt's end."""
    monkeypatch.setattr(attempt_logs, "READ_BYTES", 4096)
    said: list[ev.Event] = []
    for i in range(40):
        t = 2.0 + i / 4
        said.append(ev.ModelCall(agent="worker", model="m", output_tokens=100 + i, latency_s=1.0))
        said.append(ev.ToolOutput(call_id=f"c{i}", text="x" * 600 + "\n"))
        for event in said[-2:]:
            event.t, event.ts = t, EPOCH + t
    said.insert(41, ev.Notice(level="info", message="long " + "y" * 9000, t=7.0, ts=EPOCH + 7))
    for seq, event in enumerate(said, 1):
        event.seq = seq
    log = tmp_path / "attempts" / "a1" / "events.jsonl"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"".join(encode_event(e) for e in said))
    assert log.stat().st_size > 6 * 4096

    first = attempt_logs.GrowingLog(log, attempt_logs.NEWS)
    read = first.read()
    assert 0 < len(read) < 41 and first.offset <= 4096 + 700  # one chunk, whole lines
    assert log.read_bytes()[first.offset - 1 : first.offset] == b"\n"

    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False, heartbeat_s=None)
    display.attempts_in(tmp_path)
    display.time_calls(True)
    for event in _run_log():
        display.on_event(event)
    lines = [line for line in out.getvalue().splitlines() if " a1 · " in line]
    tokens = [int(line.split(": ")[1].split()[0]) for line in lines if "answered in" in line]
    assert tokens == list(range(100, 140))
    assert sum("! long yyy" in line for line in lines) == 1
    assert lines.index(next(line for line in lines if "! long" in line)) == 21  # after 120
