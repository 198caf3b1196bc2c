"""A validation grading in an attempt when a later start raises the attempt's time limit
(agent/loop/attempt_time.py) runs on to the new limit: its time-out had been the time its
attempt had left when it began, so the evaluator was killed at the limit the attempt
began with ("evaluation timed out"), and the attempt, with time to spare, ended
unvalidated. Its time-out is now the run's time left (agent/agents/closing_validation.py
`attempt_validator`), which no raise moves. A scripted search on the small `answer`
task, two attempts at a time, whose validation grader takes its time for a2; real
processes, real grading."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.conftest import answer_copy
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

LIMIT_S = 40.0
"""a1 and a2 start with 18 s each (4 s kept at the end); a3, started as a1 ends, gets
all that is left."""
SLEEP_S = 19
"""a2's grader sleeps this long once a3 has started: past the 18 s a2 began with."""

SLOW_CHECK = f"""
import runpy, sys, time
from pathlib import Path

parts = Path(sys.argv[1]).parts  # .../attempts/aN/validations/1/artifact...
attempt = Path(*parts[: len(parts) - parts[::-1].index("attempts") + 1])
if attempt.name == "a2":
    (attempt / "grading").touch()
    while not (attempt.parent / "a3").exists():
        time.sleep(0.1)
    time.sleep({SLEEP_S})
runpy.run_path(str(Path(sys.argv[2]) / "hidden" / "check.py"), run_name="__main__")
"""


def _slow_grading_task(answer_task: Path, tmp_path: Path) -> Path:
    """The answer task whose validation grader, for a2, says it began, waits for a3 to
    start and sleeps past a2's first limit before it scores as the task's own does."""
    return answer_copy(
        tmp_path / "answer",
        (
            'settings = { script = "hidden/check.py", args',
            'settings = { script = "hidden/slow_check.py", args',
        ),
        files={"hidden/slow_check.py": SLOW_CHECK},
        source=answer_task,
    )


def _script() -> dict[str, object]:
    """Each worker writes the answer and reports, and its attempt is validated as it
    ends; a1's waits for a2's grading to begin, so a1 ends, and a3 starts, while a2's
    validation grades."""
    me = "a=$(basename $(dirname $PWD))"
    a1 = "until [ -e ../../a2/grading ]; do sleep 0.1; done"
    command = f"{me}; case $a in a1) {a1};; esac; echo 42 > answer.txt"
    return {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42 into answer.txt")),
            turn("", call("attempt_start", instructions="Write 42 into answer.txt")),
            turn("", call("attempt_wait", attempt="a1", timeout=600)),
            turn("", call("attempt_start", instructions="Write 42 into answer.txt")),
            turn("", call("attempt_wait", attempt="a2", timeout=600)),
            turn("", call("attempt_wait", attempt="a3", timeout=600)),
            turn("", call("submit", attempt="a2")),
        ],
        "worker": [
            turn("", call("bash", command=command, timeout=600)),
            turn("", call("report", summary="wrote 42")),
        ],
    }


async def test_a_validation_grading_when_its_attempt_is_raised_runs_past_the_old_limit(
    tmp_path: Path, answer_task: Path
) -> None:
    config = RunConfig(
        task="answer",
        model="openai/test",
        runs_dir=tmp_path / "runs",
        isolation="none",
        search="llm",
        attempts=3,
        attempts_parallel=2,
        time_limit_s=LIMIT_S,
        attempt_min_s=5.0,
    )
    task = load_task(_slow_grading_task(answer_task, tmp_path))
    with ScriptedModelServer(_script(), turn_by_history=True) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        controller = RunController(config, task, provider)
        result = await asyncio.wait_for(controller.run(agent_for), 120)
        await provider.aclose()
    assert result.reason == "submitted" and result.score == 1.0, result.message
    events = read_events(controller.run_dir / "events.jsonl")
    started = {e.attempt: e for e in events if isinstance(e, ev.AttemptStarted)}
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    first, raised = started["a2"].time_limit_s, started["a3"].raised["a2"]
    assert first <= LIMIT_S / 2 < raised

    # Its validation graded past the limit a2 began with, to its end, and scored.
    a2 = read_events(controller.run_dir / "attempts" / "a2" / "events.jsonl")
    (validate,) = [e for e in a2 if isinstance(e, ev.ToolCall) and e.tool == "validate"]
    (validation,) = [e for e in a2 if isinstance(e, ev.Validation)]
    assert validation.ok and validation.score == 0.5, validation.error
    assert validation.t > first and validation.duration_s >= SLEEP_S
    assert (finished["a2"].status, finished["a2"].score) == ("validated", 0.5)

    # Its log says its limit was raised; the grading's time-out had nothing to move: it
    # is the run's time left, not a2's (agent/agents/closing_validation.py).
    told = next(e for e in a2 if isinstance(e, ev.TimeLimitRaised))
    assert (told.was_s, told.limit_s) == (first, raised)
    assert validate.t < told.t < validation.t
    assert told.commands == {}
