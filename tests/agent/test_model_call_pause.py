"""A pause while the model writes: the server goes on (a pause stops the run clock, not
the server), so the call's wall time holds the pause. Its line says the time by the
run clock, as the status line counted it, and the pause apart ("answered in 0.1s
(plus 1.0s paused)"); its speed is over the time it wrote, the pause left out. Before,
a 1-second answer paused for 80 s read "answered in 81.0s" beside a status line that
had said "generating… 1s", and its tokens/s were over the 81 s.

A real run in-process (the controller paused as the console's Space pauses it) with
the real OpenAI SDK against the scripted model server, which holds the answer after
its first piece until the test lets it go; then `--model replay:RUN` of its log.
"""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
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
) -> RunController:
    """The run, paused once its worker's model call has `begun` (to write its answer, or
    at all); the answer ends during the pause (the server goes on), and the run is
    resumed."""
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
    controller.pause()
    await watch.wait(is_(ev.Control, action="pause"))
    await asyncio.sleep(AWAY_S)  # the person away: time the answer's figures leave out
    server.release("away")
    await watch.wait(is_(ev.ModelCall, agent="worker"))
    assert controller.state.paused, "the answer came while the run was paused"
    controller.resume()
    await asyncio.wait_for(running, 120)
    return controller


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
        controller = await _record(tmp_path / "runs", server)
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

    # What the person reads: the answer's time and its pause apart, its speed over the
    # time it wrote (by the run clock: the clock stood still while the server wrote on).
    text = _headless(events)
    line = next(x for x in text.splitlines() if "worker answered in" in x)
    took = answered.latency_s - answered.paused_s
    assert f"worker answered in {took:.1f}s (plus {answered.paused_s:.1f}s paused): " in line
    rate = re.search(r"at ([\d.]+) tok/s", line)
    assert rate is not None, line
    wrote = answered.t - answering.t  # the run clock's seconds while it wrote
    assert float(rate.group(1)) >= answered.output_tokens / (wrote + SLACK_S), (line, wrote)

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


async def test_a_pause_while_the_server_reads_the_prompt_is_left_out_of_its_reading_time(
    tmp_path: Path,
) -> None:
    """The status line's "(prompt read in …)" and the call's line: the reading's time by
    the run clock too, where it said the pause as time the server read."""
    with ScriptedModelServer(_script("hold")) as server:
        controller = await _record(tmp_path / "runs", server, ev.StepStarted)
    events = read_events(controller.run_dir / "events.jsonl")
    step = next(e for e in events if isinstance(e, ev.StepStarted) and e.agent == "worker")
    answering = next(e for e in events if isinstance(e, ev.ModelAnswering) and e.agent == "worker")
    answered = next(e for e in events if isinstance(e, ev.ModelCall) and e.agent == "worker")
    assert AWAY_S <= answered.paused_s <= answered.latency_s, answered
    by_clock = answering.t - step.t  # the status line's "reading the prompt… " at its end
    assert answering.first_token_s <= by_clock + SLACK_S, (answering, by_clock)
    assert answered.first_token_s is not None
    assert answered.first_token_s <= by_clock + SLACK_S, (answered, by_clock)
    line = model_call_line(answered)
    assert f"(plus {answered.paused_s:.1f}s paused): prompt read in " in line, line
    assert answered.latency_s - answered.paused_s < AWAY_S, line
