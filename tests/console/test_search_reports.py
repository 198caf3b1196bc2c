"""Honest numbers for a search (issue 27): wherever a run's result is shown (`mlra runs`,
the headless transcript and its last line, `mlra replay --no-tui`), a run that searched
over attempts says how many it tried, the best validation, the attempt graded on the
test split (and whether it was submitted) and the validation-to-test gap. Run folders
are written by hand, event by event, as a run writes them; result.json is derived from
their log as a run derives it."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.loop.ending import EndedBy
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog, read_events
from mlra.agent.record.run_result import RunResult, write_result
from mlra.agent.record.state import RunState
from mlra.console.apps.headless_run import final_line
from mlra.console.cli.cli import main
from mlra.console.cli.runs_cli import HEADERS
from mlra.console.text.event_lines import describe_call
from mlra.console.text.headless import JsonDisplay, TranscriptDisplay


@dataclass
class Try:
    """One attempt of a hand-written search: how it started and how it ended."""

    id: str
    status: ev.AttemptStatus
    score: float | None = None
    parent: str | None = None
    operator: ev.AttemptOperator = "draft"
    why: str = ""
    summary: str = ""


THREE = [
    Try("a1", "validated", 0.7, summary="logistic regression"),
    Try("a2", "validated", 0.7812, parent="a1", operator="improve", summary="added features"),
    Try("a3", "buggy", parent="a2", operator="improve", why="train.py raised KeyError 'x'"),
]
"""Three attempts: a draft, its improvement (the best), and a buggy one."""


def search_run(
    runs: Path,
    name: str,
    tries: list[Try] | None = None,
    *,
    submitted: str | None = "a2",
    by: EndedBy = "agent",
    reason: ev.FinishReason = "submitted",
    test_score: float | None = 0.769,
    model: str = "m",
    seed: int | None = None,
    finished: bool = True,
) -> Path:
    """A run folder as a run with `--search` leaves it: each attempt started and ended in
    the log, the graded attempt's submission, its grading and the run's end; result.json
    derived from the log (`finished` False: a run cut off while its attempts ran)."""
    run_dir = runs / name
    log = EventLog(run_dir / EVENTS_FILE)
    state = RunState()
    log.subscribe(state.apply)

    def append(t: float, event: ev.Event) -> None:
        event.t = t
        log.append(event)

    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    config = {"search": "greedy"} | ({"seed": seed} if seed is not None else {})
    append(
        0,
        ev.RunStarted(
            run_id=name,
            task="classify",
            task_title="Classify",
            model=model,
            limits=ev.Limits(time_limit_s=3600),
            sandbox=sandbox,
            config=config,
        ),
    )
    t = 0.0
    for i, a in enumerate(THREE if tries is None else tries):
        t += 10
        append(
            t,
            ev.AttemptStarted(
                attempt=a.id,
                parent=a.parent,
                operator=a.operator,
                instructions=f"try idea {i + 1}",
                folder=f"attempts/{a.id}",
                time_limit_s=300,
            ),
        )
        if a.status == "running":
            continue
        t += 250.4
        kept = f"attempts/{a.id}/kept/answer.csv" if a.score is not None else None
        append(
            t,
            ev.AttemptFinished(
                attempt=a.id,
                parent=a.parent,
                status=a.status,
                score=a.score,
                metric="accuracy" if a.score is not None else "",
                why=a.why,
                summary=a.summary,
                kept=kept,
                duration_s=250.4,
            ),
        )
    if finished:
        t += 5
        if submitted is not None:
            append(
                t,
                ev.Submission(
                    path="answer.csv",
                    by=by,
                    attempt=submitted,
                    frozen=f"attempts/{submitted}/kept/answer.csv",
                    note=f"attempt {submitted}"
                    if by == "agent"
                    else f"the best validated attempt ({submitted}), graded as the run ended "
                    "with nothing submitted",
                ),
            )
            append(t, ev.EvaluationStarted(evaluator="script", artifact="answer.csv"))
            append(
                t + 2,
                ev.EvaluationFinished(
                    ok=test_score is not None,
                    metric="accuracy",
                    score=test_score,
                    error=None if test_score is not None else "no predictions",
                ),
            )
        append(t + 3, ev.RunFinished(status="finished", reason=reason))
    log.close()
    if finished:
        write_result(state, run_dir)
    return run_dir


def plain_run(runs: Path, name: str) -> Path:
    """A run with one line of work: no attempts."""
    from tests.batch.test_experiments_report import experiment_run

    return experiment_run(runs, name, [0.4, 0.6])


def listing(runs: Path, capsys: pytest.CaptureFixture[str]) -> tuple[list[str], dict[str, str]]:
    """`mlra runs` as a pipe reads it: the header's columns and each run's line."""
    assert main(["runs", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr()
    header, *lines = out.out.splitlines()
    return header.split("  "), {line.split()[0]: line for line in lines} | {"": out.err}


# --- result.json --------------------------------------------------------------------


def test_result_json_holds_the_search_numbers(tmp_path: Path) -> None:
    run_dir = search_run(tmp_path, "r")
    a = RunResult.model_validate_json((run_dir / "result.json").read_bytes()).attempts
    assert a is not None
    assert (a.tried, a.validated, a.buggy) == (3, 2, 1)
    assert (a.best, a.best_validation, a.submitted, a.submitted_validation) == (
        "a2",
        0.7812,
        "a2",
        0.7812,
    )
    assert a.test_score == 0.769 and a.validation_to_test_gap == pytest.approx(-0.0122)


# --- mlra runs ----------------------------------------------------------------------


def test_runs_has_a_search_column_for_a_run_that_searched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    search_run(runs, "a-search")
    plain_run(runs, "b-plain")
    headers, lines = listing(runs, capsys)
    names = [h.strip() for h in headers if h.strip()]
    assert names[names.index("exp.") + 1] == "search"
    assert (
        "3 tried (2 validated, 1 buggy), best a2 0.7812, sub a2, gap -0.0122" in lines["a-search"]
    )
    # The test score is the run's score column; the search's best is its validation.
    # The attempts' validations are the run's experiments: best val. is the best attempt's.
    assert lines["a-search"].split()[5:8] == ["0.769", "-", "0.7812"]
    plain = lines["b-plain"].split()
    assert plain[plain.index("0.6") + 2] == "-"  # best val. 0.6, exp. 2, search -
    assert (
        "search: attempts tried and how they ended, the best validation" in lines[""]
    )  # the footnote

    assert main(["runs", "--runs-dir", str(runs), "--json"]) == 0
    rows = {r["id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    searched = rows["a-search"]["attempts"]
    assert searched["tried"] == 3 and searched["best"] == "a2"
    assert searched["submitted"] == "a2" and searched["test_score"] == 0.769
    assert searched["validation_to_test_gap"] == pytest.approx(-0.0122)
    assert rows["a-search"]["graded_unsubmitted"] is False
    assert rows["b-plain"]["attempts"] is None


def test_runs_without_a_search_list_as_they_always_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    plain_run(runs, "b-plain")
    assert main(["runs", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0].split() == " ".join(HEADERS).split()
    assert "search" not in out.out + out.err


def test_runs_says_when_the_best_attempt_was_graded_because_nothing_was_submitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    search_run(runs, "deadline", by="deadline", reason="deadline")
    _, lines = listing(runs, capsys)
    assert "best a2 0.7812, graded best a2, gap -0.0122" in lines["deadline"]
    assert "graded best: nothing was submitted" in lines[""]


def test_runs_says_a_search_that_validated_nothing_and_one_still_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    search_run(
        runs,
        "all-buggy",
        [Try("a1", "buggy", why="no output"), Try("a2", "buggy", why="OOM")],
        submitted=None,
        reason="deadline",
    )
    search_run(
        runs,
        "cut-off",
        [Try("a1", "validated", 0.5), Try("a2", "running", parent="a1")],
        finished=False,
    )
    _, lines = listing(runs, capsys)
    assert "2 tried (2 buggy), none validated, none submitted" in lines["all-buggy"]
    # Cut off with an attempt in flight: nothing submitted yet is not a verdict.
    assert "interrupted" in lines["cut-off"]
    assert "2 tried (1 validated, 1 running), best a1 0.5" in lines["cut-off"]
    assert "none submitted" not in lines["cut-off"]


def test_an_edited_search_in_result_json_is_caught_and_the_log_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """result.json's `attempts` is checked against the log like the rest of its outcome:
    a better best validation written into it is a result≠log, and the row says the log's."""
    runs = tmp_path / "runs"
    run_dir = search_run(runs, "edited")
    result = json.loads((run_dir / "result.json").read_text())
    result["attempts"]["best_validation"] = 0.99
    result["attempts"]["validation_to_test_gap"] = 0.0
    (run_dir / "result.json").write_text(json.dumps(result))
    _, lines = listing(runs, capsys)
    assert "result≠log" in lines["edited"]
    assert "best a2 0.7812" in lines["edited"] and "gap -0.0122" in lines["edited"]
    assert "result.json says attempts" in lines[""]


# --- the headless transcript and its last line ----------------------------------------


def test_replay_no_tui_tells_each_attempt_and_the_graded_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = search_run(tmp_path, "r")
    assert main(["replay", str(run_dir), "--no-tui"]) == 0
    lines = capsys.readouterr().out.splitlines()
    told = [line.split("] ", 1)[1] for line in lines if "attempt a" in line]
    assert told[:6] == [
        "attempt a1 started: draft from the starter (5m00s budget): try idea 1",
        "attempt a1 validated: accuracy 0.7 after 4m10s — logistic regression",
        "attempt a2 started: improve from a1 (5m00s budget): try idea 2",
        "attempt a2 validated: accuracy 0.7812 after 4m10s — added features",
        "attempt a3 started: improve from a2 (5m00s budget): try idea 3",
        "attempt a3 buggy: train.py raised KeyError 'x' after 4m10s",
    ]
    assert told[6] == "submitted attempt a2's answer.csv — attempt a2"
    score = next(line for line in lines if "score: " in line)
    assert score.endswith("score: accuracy = 0.769 (attempt a2; validation 0.7812, gap -0.0122)")


def test_the_score_line_says_the_best_attempt_was_graded_when_nothing_was_submitted(
    tmp_path: Path,
) -> None:
    run_dir = search_run(tmp_path, "r", by="deadline", reason="deadline")
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    for event in read_events(run_dir / EVENTS_FILE):
        display.on_event(event)
    text = out.getvalue()
    assert "deadline: grading attempt a2's answer.csv — the best validated attempt (a2)" in text
    assert (
        "score: accuracy = 0.769 (attempt a2, the best validated: nothing was submitted; "
        "validation 0.7812, gap -0.0122)"
    ) in text


def test_a_variant_attempt_and_a_stopped_one_read_plainly() -> None:
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    display.on_event(
        ev.AttemptStarted(
            attempt="a4",
            operator="variant",
            variant={"seed": "2", "lr": "3e-4"},
            instructions="run the recipe with seed=2 lr=3e-4",
            folder="attempts/a4",
        )
    )
    display.on_event(
        ev.AttemptFinished(
            attempt="a4",
            status="stopped",
            score=0.61,
            metric="accuracy",
            why="the deadline",
            duration_s=42,
        )
    )
    assert out.getvalue().splitlines() == [
        "[0s] attempt a4 started: variant seed=2 lr=3e-4 from the starter",
        "[0s] attempt a4 stopped: accuracy 0.61 (the deadline) after 42s",
    ]


def test_the_last_line_of_a_headless_run_gives_the_search(tmp_path: Path) -> None:
    run_dir = search_run(tmp_path, "r")
    result = RunResult.model_validate_json((run_dir / "result.json").read_bytes())
    line = final_line(run_dir, result)
    assert (
        "score accuracy = 0.769 · isolation bwrap · attempts 3 tried (2 validated, 1 buggy), "
        "best validation 0.7812 (a2), "
        "graded a2, validation-to-test gap -0.0122 · run dir"
    ) in line

    deadline = search_run(tmp_path, "d", by="deadline", reason="deadline")
    result = RunResult.model_validate_json((deadline / "result.json").read_bytes())
    assert "graded a2 (nothing was submitted)," in final_line(deadline, result)

    plain = plain_run(tmp_path, "p")
    result = RunResult.model_validate_json((plain / "result.json").read_bytes())
    assert "attempt" not in final_line(plain, result)


def test_a_submit_of_an_attempt_reads_as_one() -> None:
    assert describe_call("submit", {"attempt": "a2", "note": "the best"}) == "submit attempt a2"
    assert describe_call("submit", {}) == "submit (default artifact)"


def test_an_attempt_start_without_an_operator_reads_as_the_operator_it_gets() -> None:
    """The tool takes a left-out operator as "chosen": the call read "attempt_start draft"
    and the attempt it started "chosen"."""
    assert describe_call("attempt_start", {"instructions": "try it"}) == (
        "attempt_start chosen: try it"
    )
    assert describe_call("attempt_start", {"instructions": "x", "operator": "debug"}) == (
        "attempt_start debug: x"
    )


def test_json_lines_carry_the_attempt_events_as_logged(tmp_path: Path) -> None:
    out = io.StringIO()
    display = JsonDisplay(out)
    display.on_event(ev.AttemptStarted(attempt="a1", folder="attempts/a1", operator="draft"))
    display.on_event(ev.AttemptFinished(attempt="a1", status="buggy", why="no output"))
    first, second = map(json.loads, out.getvalue().splitlines())
    assert (first["type"], first["attempt"], first["operator"]) == (
        "attempt_started",
        "a1",
        "draft",
    )
    assert (second["type"], second["status"], second["why"]) == (
        "attempt_finished",
        "buggy",
        "no output",
    )


def test_the_headless_wait_shows_the_leading_attempt_however_many_were_tried() -> None:
    """attempt_wait answers with the table, best first: the transcript showed its last
    four lines, so from five attempts on the leader (and what ended) were cut off."""
    from mlra.agent.record.attempt_tree import AttemptTree

    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    tree = AttemptTree()
    scores = [0.9, 0.1, 0.2, 0.3, 0.4, 0.5]
    for i, score in enumerate(scores, 1):
        events: list[ev.Event] = [
            ev.AttemptStarted(attempt=f"a{i}", operator="draft", folder=f"attempts/a{i}"),
            ev.ToolCall(call_id=f"w{i}", agent="baseline", tool="attempt_wait", arguments={}),
            ev.AttemptFinished(
                attempt=f"a{i}", status="validated", score=score, metric="acc", summary=f"idea {i}"
            ),
        ]
        for event in events:
            tree.apply(event)
            display.on_event(event)
        display.on_event(
            ev.ToolResult(
                call_id=f"w{i}",
                tool="attempt_wait",
                agent="baseline",
                ok=True,
                output=f"Ended: a{i}.\n" + tree.render(0.0),
            )
        )
    last_wait = out.getvalue().split("attempt a6 validated")[1].splitlines()
    assert last_wait[2] == "    │ Ended: a6."
    assert last_wait[4].startswith("    │ - a1 (best) [0.9] draft"), last_wait
    assert last_wait[-1] == "    │ … 3 more"


def test_a_resumed_or_forked_searchs_score_line_gives_the_validation_earned_before(
    tmp_path: Path,
) -> None:
    """A resumed (or forked) run's transcript shows only its new events: the graded
    attempt had validated before, so its score line said "(attempt a2)" alone while the
    last line gave its validation and gap."""
    run_dir = search_run(tmp_path, "r")
    events = read_events(run_dir / EVENTS_FILE)
    cut = next(i for i, e in enumerate(events) if isinstance(e, ev.Submission))
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    display.attempts_in(run_dir, events[:cut])
    for event in events[cut:]:
        display.on_event(event)
    assert "(attempt a2; validation 0.7812, gap -0.0122)" in out.getvalue()
