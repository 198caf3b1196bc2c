"""The experiments table (issue 16): the worker's `note` tool, the `experiment` row
written after each validation, the table folded from a log, the supervisor reading
it at reviews and after subtasks, and the status note's time warnings."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.fingerprint import normalize
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import fold
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.agent.setup.prompts import WORKER_SYSTEM, status_note
from mlra.tasks.spec import load_task
from mlra.tools.core import core_tools
from mlra.tools.notes import Note
from mlra.tools.registry import ToolContext, ToolRegistry
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

# --- the note tool ----------------------------------------------------------------------


async def _dispatch(arguments: dict[str, object]) -> tuple[list[ev.ExperimentNote], str, bool]:
    notes: list[ev.ExperimentNote] = []
    registry = ToolRegistry([Note(notes.append)])
    sandbox = LocalSandbox(Path("."), SandboxSpec(), isolation_mode="none")  # never started
    ctx = ToolContext(sandbox=sandbox, agent="worker", call_id="c1")
    outcome = await registry.dispatch("note", arguments, ctx)
    return notes, outcome.output, outcome.ok


async def test_note_records_the_hypothesis_change_and_job() -> None:
    notes, output, ok = await _dispatch(
        {"hypothesis": " 4 layers beat 2 ", "change": "n_layer=4 in train.py", "job": "job-1"}
    )
    assert ok and "Noted" in output
    assert [(n.hypothesis, n.change, n.job, n.call_id) for n in notes] == [
        ("4 layers beat 2", "n_layer=4 in train.py", "job-1", "c1")
    ]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, "hypothesis: Field required"),
        ({"hypothesis": "   "}, "say what you expect"),
        ({"hypothesis": "x", "change": 3}, "change: Input should be a valid string"),
        ({"hypothesis": "x", "score": 0.9}, "unknown argument 'score'"),
        ({"hypothesis": "x" * 2001}, "at most 2000 characters"),
    ],
)
async def test_bad_note_arguments_are_an_error_observation(
    arguments: dict[str, object], problem: str
) -> None:
    notes, output, ok = await _dispatch(arguments)
    assert not ok and notes == []
    assert output.startswith("Error: invalid arguments for note:") and problem in output


def test_the_worker_has_the_note_tool_and_is_told_to_use_it() -> None:
    names = [t.name for t in core_tools(on_note=lambda n: None)]
    assert "note" in names and "note" not in [t.name for t in core_tools()]
    assert "`note`" in WORKER_SYSTEM
    assert "valid artifact" in WORKER_SYSTEM and "checkpoints" in WORKER_SYSTEM


# --- rows folded from a log -------------------------------------------------------------


def _log(higher_is_better: bool = True) -> list[ev.Event]:
    """A log with notes, a job, and validations (one failed), as the controller writes it."""
    events: list[ev.Event] = []

    def add(t: float, event: ev.Event) -> None:
        event.seq, event.t = len(events) + 1, t
        events.append(event)

    def validation(t: float, score: float | None, ok: bool = True) -> None:
        validated = ev.Validation(
            artifact="submission",
            ok=ok,
            metric="loss",
            higher_is_better=higher_is_better,
            score=score,
            error=None if ok else "no model file",
        )
        add(t, validated)
        state = fold(events)  # what the controller's state holds as it writes the row
        add(t, state.experiments.next_row(validated))

    add(1, ev.ExperimentNote(hypothesis="baseline as it is", change="nothing"))
    validation(10, 3.0)
    add(11, ev.ExperimentNote(hypothesis="wider model", change="d_model 256"))
    add(12, ev.JobStarted(job="job-1", command="python train.py", log="jobs/job-1.log"))
    validation(20, 2.5)
    add(21, ev.ExperimentNote(hypothesis="broken idea", change="rm model.pt", job="job-9"))
    validation(22, None, ok=False)
    validation(30, 2.8)  # validated again with no new note
    validation(40, 2.9)
    return events


def test_rows_pair_notes_with_validations_and_mark_the_best_lower_is_better() -> None:
    table = fold(_log(higher_is_better=False)).experiments
    rows = [(r.number, r.hypothesis, r.change, r.job, r.score, r.best) for r in table.rows]
    assert rows[:4] == [
        (1, "baseline as it is", "nothing", None, 3.0, True),
        (2, "wider model", "d_model 256", "job-1", 2.5, True),
        (3, "broken idea", "rm model.pt", "job-9", None, False),
        (4, "broken idea", "rm model.pt", "job-9", 2.8, False),  # the failed one's retry
    ]
    assert table.rows[4].hypothesis == "" and not table.rows[4].best  # no note left
    assert table.best is table.rows[1] and table.metric == "loss"
    text = table.render()
    assert "loss, lower is better" in text
    assert "*#2 2.5 (20s into the run) | hypothesis: wider model" in text
    assert "failed (no model file)" in text


def test_a_deterministic_rerun_leaves_the_tables_times_out() -> None:
    """`--model replay:RUN` compares what the supervisor is sent: when each experiment
    validated differs between two runs that behave the same."""
    table = fold(_log()).experiments
    later = fold([e.model_copy(update={"t": e.t + 3700}) for e in _log()]).experiments
    assert table.render() != later.render() and "1h02m into the run" in later.render()
    assert normalize(table.render()) == normalize(later.render())


def test_the_best_follows_the_metrics_direction() -> None:
    table = fold(_log(higher_is_better=True)).experiments
    assert [r.best for r in table.rows] == [True, False, False, False, False]
    assert table.best is table.rows[0]


# --- a scripted run -----------------------------------------------------------------


async def test_the_supervisor_reads_the_experiments_table(
    tmp_path: Path, answer_task: Path
) -> None:
    """Notes from the worker, validations written into the run (as `validate` will),
    the rows after them, and the table in the review and after the subtask."""
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("note", hypothesis="echo gives the answer", change="answer.txt")),
            turn("", call("bash", command="echo 41 > answer.txt")),
            turn("", call("note", hypothesis="42 is the answer", change="answer 42")),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("bash", command="ls")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
        "reviewer": ["continue"],
    }
    scores = {"echo 41 > answer.txt": 0.0, "echo 42 > answer.txt": 1.0}
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        cfg = RunConfig(
            task="answer",
            model="openai/test",
            runs_dir=tmp_path,
            isolation="none",
            review_every=5,
        )
        controller = RunController(cfg, load_task(answer_task), provider)
        calls: dict[str, str] = {}

        def validate_after_commands(event: ev.Event) -> None:
            if isinstance(event, ev.ToolCall) and event.tool == "bash":
                calls[event.call_id] = str((event.arguments or {}).get("command"))
            if isinstance(event, ev.ToolResult) and calls.get(event.call_id) in scores:
                validation = ev.Validation(
                    artifact="answer.txt",
                    ok=True,
                    metric="accuracy",
                    score=scores[calls[event.call_id]],
                )
                asyncio.get_running_loop().call_soon(controller.append, validation)

        controller.subscribe(validate_after_commands)
        await controller.run(agent_for)
        await provider.aclose()

    events = read_events(controller.run_dir / "events.jsonl")
    notes = [e for e in events if isinstance(e, ev.ExperimentNote)]
    assert [n.hypothesis for n in notes] == ["echo gives the answer", "42 is the answer"]
    # Each validation is followed at once by its row.
    pairs = [(a, b) for a, b in itertools.pairwise(events) if isinstance(a, ev.Validation)]
    assert len(pairs) == 2 and all(isinstance(b, ev.Experiment) for _, b in pairs)
    rows = [b for _, b in pairs if isinstance(b, ev.Experiment)]
    assert [(r.number, r.hypothesis, r.score, r.best) for r in rows] == [
        (1, "echo gives the answer", 0.0, True),
        (2, "42 is the answer", 1.0, True),
    ]
    assert [r.validation_seq for r in rows] == [a.seq for a, _ in pairs]
    assert fold(events).experiments.rows == rows

    review = json.dumps(server.requests_for("reviewer")[0].body)
    assert "Experiments (2; accuracy, higher is better" in review
    assert "*#2 1 (" in review and "42 is the answer" in review
    after_subtask = json.dumps(server.requests_for("supervisor")[2].body)
    assert (
        "Experiments (2; accuracy" in after_subtask
        and "do not repeat a tried change" in after_subtask
    )
    first = json.dumps(server.requests_for("supervisor")[0].body)
    assert "Experiments (" not in first


# --- time warnings ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elapsed", "warning"),
    [
        (49.0, None),
        (50.0, "half the time is used"),
        (74.9, "half the time is used"),
        (75.0, "75% of the time is used"),
        (90.0, "90% of the time is used"),
        (100.0, "90% of the time is used"),
    ],
)
def test_the_status_note_warns_at_50_75_and_90_percent(elapsed: float, warning: str | None) -> None:
    note = status_note(
        elapsed_s=elapsed,
        limit_s=100.0,
        steps=3,
        max_steps=None,
        cost_usd=0.0,
        max_cost_usd=None,
        tokens=0,
        max_tokens=None,
    )
    if warning is None:
        assert "time is used" not in note
    else:
        assert warning in note and note.count("time is used") == 1


async def test_a_validate_call_gets_its_row(tmp_path: Path, answer_task: Path) -> None:
    """The real `validate` tool: its `validation` event is followed by the row pairing it
    with the worker's note; a refused call (the task allows one an hour) makes none."""
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("note", hypothesis="the answer is 42", change="answer.txt")),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("validate", path="answer.txt")),
            turn("", call("validate", path="answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        cfg = RunConfig(task="answer", model="openai/test", runs_dir=tmp_path, isolation="none")
        controller = RunController(cfg, load_task(answer_task), provider)
        await controller.run(agent_for)
        await provider.aclose()
    events = read_events(controller.run_dir / "events.jsonl")
    validations = [e for e in events if isinstance(e, ev.Validation)]
    rows = [e for e in events if isinstance(e, ev.Experiment)]
    assert len(validations) == 1 and len(rows) == 1
    assert events[events.index(validations[0]) + 1] == rows[0]
    row = rows[0]
    assert (row.number, row.hypothesis, row.change, row.best) == (
        1,
        "the answer is 42",
        "answer.txt",
        True,
    )
    assert row.score == validations[0].score and row.validation_seq == validations[0].seq
    after_subtask = json.dumps(server.requests_for("supervisor")[2].body)
    assert "Experiments (1; " in after_subtask and "the answer is 42" in after_subtask
