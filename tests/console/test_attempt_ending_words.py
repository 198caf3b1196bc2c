"""An attempt's own run ended "submitted" in its log, and `mlra runs`, its transcript, its
shared page and its export all said so, as if each attempt had been handed in, where only
the one the search picks is. Its log now says "attempt_ended"; a log (and result.json)
written before, which says "submitted", is read the same way everywhere; a run's own
ending still says submitted."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import fold
from mlra.agent.run.resume import ResumeError, load_run, resumable
from mlra.batch.export.source import read_experiment
from mlra.console.cli.cli import main
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


def _as_written_before(attempt: Path) -> None:
    """The attempt's folder as an mlra from before "attempt_ended" left it: its log's
    ending "submitted", its result.json saying so and bound to that log."""
    log = attempt / "events.jsonl"
    data = log.read_bytes()
    assert data.count(b'"reason":"attempt_ended"') == 1
    data = data.replace(b'"reason":"attempt_ended"', b'"reason":"submitted"')
    log.write_bytes(data)
    result = json.loads((attempt / "result.json").read_text())
    assert result["reason"] == "attempt_ended"
    result |= {
        "reason": "submitted",
        "log_sha256": hashlib.sha256(data).hexdigest(),
        "log_size": len(data),
    }
    (attempt / "result.json").write_text(json.dumps(result))


@pytest.mark.parametrize("written", ["now", "before"])
async def test_an_attempt_ends_attempt_ended_wherever_its_ending_is_read(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str], written: str
) -> None:
    task = writes_then_works_on(answer_task, tmp_path, '[{ n = "42", s = "0" }]')
    controller = greedy_search(task, tmp_path, 1)
    result = await controller.run(agent_for)
    assert result.reason == "submitted", result
    attempts = controller.run_dir / "attempts"
    if written == "before":
        _as_written_before(attempts / "a1")
    attempt = read_events(attempts / "a1" / "events.jsonl")
    run = read_events(controller.run_dir / "events.jsonl")
    assert isinstance(attempt[-1], ev.RunFinished)
    assert attempt[-1].reason == ("attempt_ended" if written == "now" else "submitted")
    finished = fold(attempt).finished
    assert finished is not None and finished.reason == "attempt_ended"

    said = _headless(attempt)
    assert "■ finished (attempt ended) after" in said and "(submitted)" not in said, said
    assert "■ finished (submitted) after" in _headless(run)
    assert any("run finished (attempt ended):" in line for line in _pane(attempt))
    assert any("run finished (submitted):" in line for line in _pane(run))

    # `mlra runs` of the attempts: each one's reason, its result.json standing for its log
    assert main(["runs", "--runs-dir", str(attempts), "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["reason"], row["result_mismatch"]) == ("attempt_ended", False), row
    assert main(["runs", "--runs-dir", str(attempts)]) == 0
    table = capsys.readouterr().out
    assert "attempt_ended" in table and "submitted" not in table, table

    # the shared page of the attempt, and the export of the search (the attempt's tags)
    page = tmp_path / "a1.html"
    assert main(["share", str(attempts / "a1"), "-o", str(page)]) == 0
    html = page.read_text()
    assert "(attempt_ended)" in html and "(submitted)" not in html
    exported = {r.name: r for r in read_experiment(controller.run_dir).runs}
    assert exported[controller.run_dir.name].tags["reason"] == "submitted"
    assert exported[f"{controller.run_dir.name}/a1"].tags["reason"] == "attempt_ended"

    capsys.readouterr()
    assert main(["ctl", str(attempts / "a1"), "status"]) == 0
    assert capsys.readouterr().out.strip().endswith("a1 has ended (finished, attempt_ended)")

    # nothing to resume, and said as an attempt's, not as a submission
    with pytest.raises(ResumeError, match="is a search's attempt and it ended"):
        resumable(load_run(attempts / "a1"))
