"""A pause while the model writes: the server goes on (a pause stops the run clock, not
the server), so the call's wall time holds the pause. Its line says the time by the
run clock, as the status line counted it, and the pause apart ("answered in 0.1s
(plus 1.0s paused)"), where a 1-second answer paused for 80 s read "answered in 81.0s"
beside a status line that had said "generating… 1s". Its prompt-reading time and
tokens/s stay the server's own, in wall time: the server read and wrote through the
pause (over the unpaused time alone, 46 tokens written across a pause read
"92000 tok/s", and a prompt read through the pause "0.0s").

A real run in-process (the controller paused as the console's Space pauses it) with
the real OpenAI SDK against the scripted model server, which holds the answer after
its first piece until the test lets it go; then `--model replay:RUN` of its log.
"""

from __future__ import annotations

import asyncio
import io
import re
import time
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop import clock as clock_module
from mlra.agent.loop.clock import PausedSpan, RunClock
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.text.headless import TranscriptDisplay
from mlra.console.text.model_lines import model_call_line
from mlra.tasks.spec import load_task
from tests.conftest import ANSWER_TASK, mlra_cli
from tests.console.test_console_controls import Watch, is_
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

AWAY_S = 1.0
"""How long the person leaves the run paused while its model writes (the time the
answer's line must say apart)."""
SLACK_S = 0.15
"""How far the call's figures may stand from the run clock's stamps on its events (taken
a few statements apart)."""
LAG_S = 2.0
"""How much later than the server wrote it the test may see an answer's end (a loaded
machine): the wall time it wrote is within the time the test saw it write and this."""
THOUGHT = "Let me write the answer to the file.\n" * 3


def _script(hold: str) -> dict[str, object]:
    """The worker's answer held (`hold`: after its first piece, or before it) until the
    test lets it go."""
    written = turn(THOUGHT, call("bash", command="echo 42 > answer.txt"))
    return {
        "supervisor": supervisor_answering(),
        "worker": [{hold: "away", **written}, turn("", call("report", summary="done"))],
    }


async def _record(
    runs: Path, server: ScriptedModelServer, begun: type[ev.Event] = ev.ModelAnswering
) -> tuple[RunController, float]:
    """The run, paused once its worker's model call has `begun` (to write its answer, or
    at all); the answer ends during the pause (the server goes on), and the run is
    resumed. With the wall seconds the test saw from `begun` to the call's end."""
    provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
    config = RunConfig(
        task="answer",
        model="openai/test",
        base_url=server.url_for("openai"),  # a local server's: its calls' lines are printed
        runs_dir=runs,
        run_id="paused",
        isolation="none",
    )
    controller = RunController(config, load_task(ANSWER_TASK), provider)
    controller.prepare()
    watch = Watch(controller)
    running = asyncio.ensure_future(controller.run(agent_for))
    await watch.wait(is_(begun, agent="worker"), timeout=60)
    seen = time.monotonic()
    controller.pause()
    await watch.wait(is_(ev.Control, action="pause"))
    await asyncio.sleep(AWAY_S)  # the person away: time the answer's figures leave out
    server.release("away")
    await watch.wait(is_(ev.ModelCall, agent="worker"))
    seen = time.monotonic() - seen
    assert controller.state.paused, "the answer came while the run was paused"
    controller.resume()
    await asyncio.wait_for(running, 120)
    return controller, seen


def _headless(events: list[ev.Event]) -> str:
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False, heartbeat_s=None)
    for event in events:
        display.on_event(event)
    return out.getvalue()


async def test_a_pause_while_the_model_writes_is_said_apart_from_its_answer_time(
    tmp_path: Path,
) -> None:
    with ScriptedModelServer(_script("hold_writing")) as server:
        controller, seen = await _record(tmp_path / "runs", server)
    events = read_events(controller.run_dir / "events.jsonl")
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    step = next(e for e in events if isinstance(e, ev.StepStarted) and e.agent == "worker")
    answering = next(e for e in events if isinstance(e, ev.ModelAnswering) and e.agent == "worker")
    answered = next(e for e in events if isinstance(e, ev.ModelCall) and e.agent == "worker")

    # The pause is recorded, and the rest of the call's time is the run clock's.
    assert AWAY_S <= answered.paused_s <= answered.latency_s, answered
    by_clock = answered.t - step.t  # the status line's "generating… " time at its end
    assert answered.latency_s - answered.paused_s <= by_clock + SLACK_S, (answered, by_clock)
    assert answered.latency_s - answered.paused_s < AWAY_S
    assert answered.first_token_s is not None
    assert answered.first_token_s <= answering.t - step.t + SLACK_S

    # What the person reads: the answer's time and its pause apart, its speed the
    # server's: over the wall time it wrote, the pause in it (it wrote on through it).
    text = _headless(events)
    line = next(x for x in text.splitlines() if "worker answered in" in x)
    took = answered.latency_s - answered.paused_s
    assert f"worker answered in {took:.1f}s (plus {answered.paused_s:.1f}s paused): " in line
    rate = re.search(r"at ([\d.]+) tok/s", line)
    assert rate is not None, line  # it wrote for the pause at least: a rate to tell
    # It held its answer from its first piece until the test let it go, after the pause.
    fastest = answered.output_tokens / AWAY_S
    slowest = answered.output_tokens / (seen + LAG_S)
    assert slowest <= float(rate.group(1)) <= fastest * 1.05 + 0.5, (line, seen)

    # A replay of the run records the call's pause as the run did.
    args = ["run", str(ANSWER_TASK), "--model", f"replay:{controller.run_dir}", "--no-tui"]
    args += ["--runs-dir", str(tmp_path / "replays"), "--run-id", "again", "--isolation", "none"]
    proc = await asyncio.to_thread(mlra_cli, args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    again = read_events(tmp_path / "replays" / "again" / "events.jsonl")
    replayed = next(e for e in again if isinstance(e, ev.ModelCall) and e.agent == "worker")
    assert (replayed.latency_s, replayed.paused_s) == (answered.latency_s, answered.paused_s)
    assert replayed.first_token_s == answered.first_token_s
    assert line.endswith(model_call_line(replayed))  # the replay says what the run said


async def test_a_pause_while_the_server_reads_the_prompt_stays_in_its_reading_time(
    tmp_path: Path,
) -> None:
    """The call's line says the pause apart from its time, and the prompt's reading the
    server's own, in wall time (it read through the pause), where it read "0.0s"."""
    with ScriptedModelServer(_script("hold")) as server:
        controller, _ = await _record(tmp_path / "runs", server, ev.StepStarted)
    events = read_events(controller.run_dir / "events.jsonl")
    answering = next(e for e in events if isinstance(e, ev.ModelAnswering) and e.agent == "worker")
    answered = next(e for e in events if isinstance(e, ev.ModelCall) and e.agent == "worker")
    assert AWAY_S <= answered.paused_s <= answered.latency_s, answered
    # The server answered only once let go, after the pause: its reading held the pause.
    assert answering.first_token_s >= AWAY_S - SLACK_S, answering
    assert answered.first_token_s is not None, answered
    assert answered.first_token_s >= AWAY_S - SLACK_S, answered
    line = model_call_line(answered)
    read = f"prompt read in {answered.first_token_s:.1f}s"
    assert f"(plus {answered.paused_s:.1f}s paused): {read}, " in line, line
    assert answered.latency_s - answered.paused_s < AWAY_S, line


class _Wall:
    """The clock module's `time.monotonic`, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def _clock(monkeypatch: pytest.MonkeyPatch) -> tuple[RunClock, _Wall]:
    wall = _Wall()
    monkeypatch.setattr(clock_module, "time", wall)
    clock = RunClock(3600.0)
    clock.start()
    wall.now += 5.0
    return clock, wall


def test_a_call_asked_while_paused_counts_the_pause_it_began_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A summary asked while the run is paused, a call asked again after the wait for a
    server while the person paused: the run resumed part-way through the call, and the
    pause before that is the call's (its line read "answered in 3.0s", no pause said,
    where the status line had counted 1 s)."""
    clock, wall = _clock(monkeypatch)
    clock.pause()
    span = PausedSpan(clock)
    wall.now += 2.0  # paused, the server answering
    clock.resume()
    wall.now += 1.0
    assert span.paused_s() == pytest.approx(2.0)
    called = ev.ModelCall(agent="worker", model="m", latency_s=3.0, paused_s=span.paused_s())
    assert "answered in 1.0s (plus 2.0s paused)" in model_call_line(called)


def test_a_pause_after_the_call_s_time_was_taken_is_not_the_call_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The provider asks its server more after it took the call's time (its window read
    again): a pause then is no part of the call's `latency_s`, nor of its pause."""
    clock, wall = _clock(monkeypatch)
    span = PausedSpan(clock)
    wall.now += 1.0
    clock.pause()
    wall.now += 1.0
    clock.resume()
    wall.now += 1.0  # its time taken here: 3 s, 1 s of them paused
    clock.pause()
    wall.now += 4.0  # paused while its window is read again
    assert span.paused_s(3.0) == pytest.approx(1.0)
    clock.resume()
    wall.now += 1.0
    assert span.paused_s(3.0) == pytest.approx(1.0)
    assert span.paused_s() == pytest.approx(5.0)


def test_a_run_that_never_started_its_clock_counts_no_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wall = _Wall()
    monkeypatch.setattr(clock_module, "time", wall)
    span = PausedSpan(RunClock(3600.0))
    wall.now += 2.0
    assert span.paused_s() == 0.0
