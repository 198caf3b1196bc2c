"""A run whose commands print a lot keeps its log within its size budget (`--log-budget`,
agent/record/log_budget.py): the log stays valid and bound to result.json, the run ends
and is graded as it would have, the model reads what the log holds, a replay of it
goes through, and the run says once, in the transcript and in `mlra runs`, that its log
was shortened. A run whose log still reaches the budget ends there and is graded.

Runs are in-process controllers over the scripted model server on loopback, through
the real OpenAI SDK; the budgets are tiny so the tests stay quick.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.fingerprint import normalize
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.providers import resolve_model
from mlra.agent.providers.base import ModelProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.log_budget import MB, SHORT_RESULT_CHARS
from mlra.agent.run.controller import RunController
from mlra.agent.run.resume import fork_run, load_run, resume_controller
from mlra.agent.setup.config import RunConfig
from mlra.batch.report_rows import collect, summarize
from mlra.batch.report_tables import markdown
from mlra.console.cli.cli import main
from mlra.console.text.headless import TranscriptDisplay
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

PRINTS = (
    "import sys\nfor i in range(1500):\n    sys.stdout.write(f'{i:05d} {N} ' + 'x' * 56 + '\\n')\n"
)
"""About 100 KB of output, a little different each time (the same call with the same
result again and again would end the run as stuck)."""
BUDGET_MB = 0.5
MARGIN = 16 * 1024
"""What the ending may write past the budget: a few small events."""


def _controller(
    provider: ModelProvider, task: Path, runs: Path, run_id: str, **config: Any
) -> RunController:
    cfg = RunConfig(
        task="answer", model=provider.name, runs_dir=runs, run_id=run_id, isolation="none",
        **config,
    )  # fmt: skip
    controller = RunController(cfg, load_task(task), provider)
    controller.prepare()
    return controller


def _script(prints: int, *, answer_first: bool = False) -> dict[str, Any]:
    printing = [
        turn(f"Print {i}.", call("python", code=PRINTS.replace("{N}", f"{i:02d}")))
        for i in range(prints)
    ]
    answer = [turn("Answer.", call("bash", command="echo 42 > answer.txt"))]
    worker = (answer + printing) if answer_first else (printing + answer)
    return {
        "supervisor": supervisor_answering(),
        "worker": [*worker, turn("", call("report", summary="answer.txt holds 42"))],
    }


async def test_a_chatty_run_stays_within_its_log_budget_and_is_graded_and_replayed(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    with ScriptedModelServer(_script(12)) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        controller = _controller(provider, answer_task, runs, "chatty", log_budget_mb=BUDGET_MB)
        out = io.StringIO()
        controller.subscribe(TranscriptDisplay(out, rich=False, heartbeat_s=None).on_event)
        result = await controller.run(agent_for)
        sent = [m for r in server.requests for m in r.body.get("messages", [])]
    log = controller.run_dir / "events.jsonl"
    data = log.read_bytes()
    assert len(data) <= BUDGET_MB * MB + MARGIN
    events = read_events(log)  # valid: every line an event, seq 1, 2, 3...
    assert [e.seq for e in events] == list(range(1, len(events) + 1))

    # Ended and graded as it would have been.
    assert (result.status, result.reason, result.score) == ("finished", "submitted", 1.0)
    stored = json.loads((controller.run_dir / "result.json").read_text())
    assert stored["log_sha256"] == hashlib.sha256(data).hexdigest()
    assert stored["log_shortened"] and "size budget" in stored["log_shortened"]

    # Said once, before the first shortened result.
    notices = [e for e in events if isinstance(e, ev.Notice) and e.kind == "log_budget"]
    assert len(notices) == 1
    printing = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "python"]
    cut = [e for e in printing if e.log_budget_chars is not None]
    assert printing[0].log_budget_chars is None and len(cut) >= 4
    assert all(e.seq > notices[0].seq for e in cut)
    assert all(e.log_budget_chars == SHORT_RESULT_CHARS for e in cut)
    assert all("near its size budget" in e.output and len(e.output) < 2500 for e in cut)
    assert cut[0].unlogged_chars > 0  # streamed until the log reached the point
    assert all(e.unlogged_chars > 90_000 for e in cut[1:])  # nothing of these
    streams = [e for e in events if isinstance(e, ev.ToolOutput)]
    assert sum("near its size budget" in e.text for e in streams) <= 1  # not one a call
    assert sum(e.unlogged_chars for e in printing) > 10 * 90_000 - BUDGET_MB * MB
    # The model read what the log holds.
    for result_event in cut:
        assert result_event.output in [m.get("content") for m in sent if m.get("role") == "tool"]
    shown = out.getvalue()
    assert shown.count("passed 75% of its size budget (0.5 MB, --log-budget)") == 1

    # `mlra runs` says so, in a footnote and in --json.
    assert main(["runs", "--runs-dir", str(runs)]) == 0
    printed = capsys.readouterr()
    assert "chatty: its log neared its size budget" in printed.out + printed.err
    assert main(["runs", "--runs-dir", str(runs), "--json"]) == 0
    (row,) = map(json.loads, capsys.readouterr().out.splitlines())
    assert row["log_shortened"] is True
    # A report over the runs folder says so, once.
    rows = collect(runs)
    report = markdown(summarize(rows), rows)
    assert report.count("Log shortened: chatty: the run's log neared its size budget") == 1

    # A replay of it goes through: it cuts the results its recording cut, however
    # long its own log has grown by then.
    replay = _controller(
        ReplayProvider.from_spec(f"replay:{controller.run_dir}"), answer_task,
        tmp_path / "replays", "again", log_budget_mb=BUDGET_MB,
    )  # fmt: skip
    again = await replay.run(agent_for)
    assert (again.status, again.reason, again.score) == ("finished", "submitted", 1.0)
    replayed = read_events(replay.run_dir / "events.jsonl")
    again_printing = [e for e in replayed if isinstance(e, ev.ToolResult) and e.tool == "python"]
    assert [normalize(e.output) for e in again_printing] == [normalize(e.output) for e in printing]
    assert [e.log_budget_chars for e in again_printing] == [e.log_budget_chars for e in printing]
    assert (replay.run_dir / "events.jsonl").stat().st_size <= BUDGET_MB * MB + MARGIN


async def test_a_fork_of_a_shortened_run_goes_on_shortened_without_a_second_notice(
    tmp_path: Path, answer_task: Path
) -> None:
    script = _script(8, answer_first=True)
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        source = _controller(provider, answer_task, tmp_path, "src", log_budget_mb=BUDGET_MB)
        await source.run(agent_for)
        recorded = read_events(source.run_dir / "events.jsonl")
        last = max(e.step for e in recorded if isinstance(e, ev.StepStarted))
        forked = fork_run(
            load_run(source.run_dir), source.task, at_step=last - 1,
            run_dir=tmp_path / "fork", model="openai/test",
        )  # fmt: skip
        # Its history is rebuilt from the cut results; its next command is cut too.
        server.add("worker", turn("Once more.", call("python", code=PRINTS.replace("{N}", "99"))))
        server.add("worker", turn("", call("report", summary="answer.txt holds 42")))
        server.add("supervisor", *supervisor_answering()[2:])
        fork = resume_controller(forked, source.task, provider)
        result = await fork.run(agent_for)
    assert (result.reason, result.score) == ("submitted", 1.0)
    events = read_events(tmp_path / "fork" / "events.jsonl")
    assert sum(isinstance(e, ev.Notice) and e.kind == "log_budget" for e in events) == 1
    once_more = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "python"][-1]
    assert once_more.log_budget_chars == SHORT_RESULT_CHARS


async def test_a_log_that_reaches_its_budget_ends_the_run_which_is_graded_and_resumed(
    tmp_path: Path, answer_task: Path
) -> None:
    with ScriptedModelServer(_script(30, answer_first=True)) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        controller = _controller(provider, answer_task, tmp_path, "full", log_budget_mb=0.1)
        result = await controller.run(agent_for)
        log = controller.run_dir / "events.jsonl"
        assert log.stat().st_size <= 0.1 * MB + MARGIN
        events = read_events(log)
        (finished,) = [e for e in events if isinstance(e, ev.RunFinished)]
        assert finished.reason == "budget" and "log budget used up" in finished.message
        # The workspace is graded, as at any budget's end.
        assert result.score == 1.0 and any(isinstance(e, ev.EvaluationFinished) for e in events)

        # Resumed under a larger budget, it goes on where it ended, and submits.
        resumed = resume_controller(
            load_run(controller.run_dir), controller.task, provider,
            overrides={"log_budget_mb": 1.0},
        )  # fmt: skip
        again = await resumed.run(agent_for)
    assert (again.reason, again.score) == ("submitted", 1.0)
    assert log.stat().st_size <= 1.0 * MB + MARGIN
    events = read_events(log)
    (went_on,) = [e for e in events if isinstance(e, ev.RunResumed)]
    assert went_on.settings == {"log_budget_mb": 1.0, "start_paused": False}
    # Said again at the larger budget's point, once.
    told = [e.message for e in events if isinstance(e, ev.Notice) and e.kind == "log_budget"]
    assert len(told) == 2 and "(1.0 MB, --log-budget)" in told[1]
