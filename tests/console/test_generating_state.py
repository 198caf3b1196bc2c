"""The console says an agent is generating only while its model call is in flight: a
turn's, a summary's, a retry's, or a turn sent again after a summary; a tool call ends
it, and the baseline agent never shows it."""

from __future__ import annotations

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import RunState, fold
from tests.conftest import BaselineRun


def _worker_turn(step: int, t: float) -> list[ev.Event]:
    call_id = f"c{step}"
    return [
        ev.StepStarted(agent="worker", step=step, turn=step, t=t),
        ev.ModelCall(agent="worker", model="m", turn=step, t=t + 1),
        ev.ToolCall(
            call_id=call_id, agent="worker", tool="bash", arguments={"command": "ls"}, t=t + 1
        ),
        ev.ToolResult(call_id=call_id, agent="worker", tool="bash", ok=True, output="", t=t + 2),
    ]


def test_generating_means_a_model_call_is_in_flight() -> None:
    events = _worker_turn(1, 0.0)
    # A summary comes before the turn it makes room for (agent/loop/model_turn.py: the
    # history is kept within the window, then the step starts and the call goes out).
    events += [
        ev.ModelCall(agent="worker", model="m", purpose="summary", t=4),
        ev.HistorySummarized(agent="worker", summary="s", first_turn=1, last_turn=1, t=4),
        ev.StepStarted(agent="worker", step=2, turn=2, t=5),
    ]
    for n, expected in [(1, "worker"), (2, None), (3, None), (4, None), (5, None), (7, "worker")]:
        assert fold(events[:n]).generating_agent == expected, events[n - 1]
    assert fold(events).generating_since == 5
    # A retry of the summary shows it generating until its answer.
    retrying = [*events[:4], ev.ModelRetry(agent="worker", model="m", attempt=1, t=3.5)]
    assert fold(retrying).generating_agent == "worker"
    assert fold([*retrying, events[4]]).generating_agent is None


def test_a_summary_for_the_turn_in_flight_shows_the_turn_generating_again() -> None:
    """A request the server refused as too long is summarized for and sent again
    (agent/loop/model_turn.py `_retry_shorter`): the summary comes after the step started."""
    events: list[ev.Event] = [
        ev.StepStarted(agent="worker", step=1, turn=1, t=0),
        ev.Notice(level="warning", message="the server refused worker's request as too long", t=1),
        ev.ModelCall(agent="worker", model="m", purpose="summary", t=2),
        ev.HistorySummarized(agent="worker", summary="s", first_turn=1, last_turn=1, t=2),
    ]
    state = fold(events)
    assert state.generating_agent == "worker" and state.generating_since == 2
    done = fold([*events, ev.ModelCall(agent="worker", model="m", turn=1, t=3)])
    assert done.generating_since is None
    # A review's answer (no turn waiting) ends what its retry showed.
    review = [
        ev.ModelRetry(agent="supervisor", model="m", attempt=1, t=4),
        ev.ModelCall(agent="supervisor", model="m", purpose="review", t=5),
    ]
    assert (
        fold(
            [
                *events,
                done_call := ev.ModelCall(agent="worker", model="m", turn=1, t=3),
                *review[:1],
            ]
        ).generating_agent
        == "supervisor"
    )
    assert fold([*events, done_call, *review]).generating_since is None


def test_a_tool_call_ends_the_generating_even_without_its_model_call() -> None:
    started = ev.StepStarted(agent="worker", step=1, turn=1, t=0)
    call = ev.ToolCall(call_id="c", agent="worker", tool="bash", arguments={}, t=1)
    assert fold([started, call]).generating_since is None


def test_the_baseline_never_shows_generating(answer_baseline_run: BaselineRun) -> None:
    events = read_events(answer_baseline_run.run_dir / "events.jsonl")
    assert any(isinstance(e, ev.StepStarted) and e.agent == "baseline" for e in events)
    state = RunState()
    for event in events:  # as the live console and the replay fold it, event by event
        state.apply(event)
        assert state.generating_since is None, event
