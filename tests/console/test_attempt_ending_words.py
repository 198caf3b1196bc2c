"""An attempt's own run ends as "submitted" in its log (agent/loop/ending.py), and its
transcript said `finished (submitted)`, as if each attempt had been handed in, where
only the one the search picks is. Its last line now says the attempt ended, in the
headless transcript and the console's pane alike; a run's own still says submitted."""

from __future__ import annotations

import io
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.record.eventlog import read_events
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.text.headless import TranscriptDisplay
from tests.agent.cut_attempts import writes_then_works_on
from tests.agent.test_search import greedy_search


def _headless(events: list[ev.Event]) -> str:
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    for event in events:
        display.on_event(event)
    return out.getvalue()


def _pane(events: list[ev.Event]) -> list[str]:
    pane = TranscriptPane()
    for event in events:
        pane.feed(event)
    return [entry.render_entry().plain for entry in pane._entries]


async def test_an_attempts_last_line_says_it_ended_and_the_runs_that_it_submitted(
    tmp_path: Path, answer_task: Path
) -> None:
    task = writes_then_works_on(answer_task, tmp_path, '[{ n = "42", s = "0" }]')
    controller = greedy_search(task, tmp_path, 1)
    result = await controller.run(agent_for)
    assert result.reason == "submitted", result
    attempt = read_events(controller.run_dir / "attempts" / "a1" / "events.jsonl")
    run = read_events(controller.run_dir / "events.jsonl")
    assert isinstance(attempt[-1], ev.RunFinished) and attempt[-1].reason == "submitted"

    said = _headless(attempt)
    assert "■ finished (attempt ended) after" in said and "(submitted)" not in said, said
    assert "■ finished (submitted) after" in _headless(run)
    assert any("run finished (attempt ended):" in line for line in _pane(attempt))
    assert any("run finished (submitted):" in line for line in _pane(run))
