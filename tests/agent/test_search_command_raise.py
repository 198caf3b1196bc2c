"""A command running in an attempt when a later start raises the attempt's time limit
(agent/loop/attempt_time.py) runs on to the new limit: its time-out had been the time
its run had left when it started, so it was killed at the limit the attempt began with,
though the attempt now had more. A scripted search on the small `answer` task, two
attempts at a time; real processes, real grading."""

from __future__ import annotations

import io
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.text.event_lines import time_limit_raised_line
from mlra.console.text.headless import TranscriptDisplay
from tests.agent.raised_search import LIMIT_S, raising_script, run_scripted

SLEEP_S = 21
"""a2's command sleeps this long once a3 has started: past the 20 s a2 began with."""


def _script() -> dict[str, object]:
    """a2's one command marks that it has begun, waits for a3 to start (which raises a2)
    and sleeps past a2's first limit; a1's waits for a2's to begin, so a1 ends, and a3
    starts, while a2's command runs. Each then writes the answer."""
    me = "a=$(basename $(dirname $PWD))"
    a1 = "until [ -e ../../a2/workspace/begun ]; do sleep 0.1; done"
    a2 = f"touch begun; until [ -e ../../a3 ]; do sleep 0.1; done; sleep {SLEEP_S}"
    return raising_script(f"{me}; case $a in a1) {a1};; a2) {a2};; esac; echo 42 > answer.txt")


async def test_a_command_running_when_its_attempt_is_raised_runs_past_the_old_limit(
    tmp_path: Path, answer_task: Path
) -> None:
    result, controller = await run_scripted(tmp_path, answer_task, _script())
    assert result.reason == "submitted" and result.score == 1.0, result.message
    events = read_events(controller.run_dir / "events.jsonl")
    started = {e.attempt: e for e in events if isinstance(e, ev.AttemptStarted)}
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    first, raised = started["a2"].time_limit_s, started["a3"].raised["a2"]
    assert first <= LIMIT_S / 2 < raised

    # Its command ran past the limit a2 began with, to its end, and a2 validated.
    a2 = read_events(controller.run_dir / "attempts" / "a2" / "events.jsonl")
    bash = next(e for e in a2 if isinstance(e, ev.ToolCall) and e.tool == "bash")
    done = next(e for e in a2 if isinstance(e, ev.ToolResult) and e.call_id == bash.call_id)
    assert done.exit_code == 0 and not done.timed_out, done.output
    assert done.t > first
    assert finished["a2"].status == "validated", finished["a2"].why

    # Its log says its limit was raised, and the running command's time-out with it.
    told = next(e for e in a2 if isinstance(e, ev.TimeLimitRaised))
    assert (told.was_s, told.limit_s) == (first, raised)
    assert told.why == "attempt a3 started with a larger share"
    assert list(told.commands) == [bash.call_id]
    assert bash.t < told.t < done.t
    assert told.commands[bash.call_id] > done.t - bash.t
    # And its transcript (the replay's, headless) says so, in one line.
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    for event in a2:
        display.on_event(event)
    said = next(line for line in out.getvalue().splitlines() if "time limit raised" in line)
    assert said.endswith(time_limit_raised_line(told))
    assert "(attempt a3 started with a larger share)" in said
    assert f"time-out of running call {bash.call_id} raised with it, to" in said
