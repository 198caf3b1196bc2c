"""The supervisor's `attempt_start` (tools/attempts.py) takes what its worker uses: a
recipe's variant is the baseline search's alone. A scripted supervisor and worker on the
small `answer` task, real grading."""

from __future__ import annotations

from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.text.attempt_lines import attempt_started_line
from tests.agent.test_search import _scripted_search
from tests.scripts import call, turn


async def test_a_supervisors_variant_is_refused_not_shown_and_ignored(
    tmp_path: Path, answer_task: Path
) -> None:
    """A supervisor's `variant` was taken, shown in place of its instructions
    (`attempt a1 started: chosen ... n=42`), and never reached the worker, a model that
    reads instructions and runs no recipe. It is refused in one line, as is the
    recipe's `variant` operator; the attempt the supervisor then starts shows what its
    worker was told."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42", variant={"n": "42"})),
            turn("", call("attempt_start", instructions="Write 42", operator="variant")),
            turn("", call("attempt_start", instructions="Write 42 into answer.txt")),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="wrote 42")),
        ],
    }
    controller, result, _ = await _scripted_search(
        tmp_path / "runs", answer_task, script, search="llm", attempts=2
    )
    events = read_events(controller.run_dir / "events.jsonl")
    starts = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "attempt_start"]
    assert [s.ok for s in starts] == [False, False, True]
    assert "variant" in (starts[0].error or "") + starts[0].output
    assert "operator" in (starts[1].error or "") + starts[1].output
    started = [e for e in events if isinstance(e, ev.AttemptStarted)]
    assert [(s.attempt, s.operator, s.variant) for s in started] == [("a1", "chosen", {})]
    assert "Write 42 into answer.txt" in attempt_started_line(started[0])
    assert result.score == 1.0
