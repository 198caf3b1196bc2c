"""What the console says is so (issue 15's review): the status line says "generating"
only while a model call is in flight, the keys that matter stay on an 80x24 footer,
the footer offers only what can be done, and the headless transcript names the run
it shows and every event a person should see."""

from __future__ import annotations

import io
from pathlib import Path

from rich.text import Text
from textual.widgets import Footer, Static, TextArea
from textual.widgets._footer import FooterKey

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import RunState, fold
from mlra.agent.run.resume import fork_run, load_run
from mlra.console.apps.app import MlraApp
from mlra.console.panes.plan import step_mark
from mlra.console.panes.status import StatusBar, score_texts
from mlra.console.screens.screens import EditArgsScreen, PromptScreen
from mlra.console.text.event_lines import score_line
from mlra.console.text.headless import TranscriptDisplay
from mlra.tasks.spec import load_task
from tests.conftest import BaselineRun, mlra_cli
from tests.console.console_fixtures import recorded_run
from tests.console.test_console_controls import ANSWER, REPORT, is_, live, worker


def footer_keys(app: MlraApp) -> list[str]:
    """The footer's keys a person can see: shown, and within the screen's width."""
    width = app.size.width
    shown = []
    for key in app.screen.query_one(Footer).query(FooterKey):
        region = key.region
        if key.display and region.width and region.right <= width:
            shown.append(key.key_display or key.key)
    return shown


async def test_footer_keeps_quit_and_help_at_80x24_while_a_call_waits(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.pilot.resize_terminal(80, 24)
        await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.phase == "awaiting_approval")
        await run.pilot.pause()
        keys = footer_keys(run.app)
        print(keys)
        assert "q" in keys and "?" in keys and "a" in keys
        await run.pilot.press("a")
        await run.finished()


async def test_the_edit_dialog_says_how_to_save_and_cancel_at_80x24(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.pilot.resize_terminal(80, 24)
        await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: app.state.pending_approval is not None)
        await run.pilot.press("e")
        await run.shown(lambda app: isinstance(app.screen, EditArgsScreen))
        await run.pilot.pause()
        screen = run.app.screen
        hint = screen.query_one("#edit-error", Static)
        dialog = screen.query_one(".dialog")
        text = screen.query_one("#edit-args", TextArea)
        assert "Ctrl+S" in str(hint.render()) and "Escape" in str(hint.render())
        for widget in (hint, text):
            # Wholly inside the dialog's visible area, and so on the screen.
            assert dialog.content_region.contains_region(widget.region), widget
        assert dialog.region.bottom <= 24
        await run.pilot.press("escape")
        await run.shown(lambda app: not isinstance(app.screen, EditArgsScreen))
        await run.pilot.press("a")
        await run.finished()


async def test_while_evaluating_the_footer_offers_no_steering(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.watch.wait(is_(ev.ApprovalRequested))
        await run.shown(lambda app: "a" in footer_keys(app))
        assert {"space", "n", "i", "s"} <= set(footer_keys(run.app))
        # The run as the console sees it during an evaluation (held at the breakpoint,
        # so the phase stays put), as tests/console/test_console_status.py does.
        run.controller.emit(ev.EvaluationStarted(evaluator="answer", artifact="answer.txt"))
        await run.shown(lambda app: app.state.phase == "evaluating")
        await run.pilot.pause()
        keys = set(footer_keys(run.app))
        assert not keys & {"space", "n", "b", "i", "s"} and {"?", "q"} <= keys
        await run.pilot.press("i")
        await run.pilot.pause()
        assert not isinstance(run.app.screen, PromptScreen)  # no message to a stopped agent
        run.controller.request_stop(evaluate=False)
        await run.finished()


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


def transcript(events: list[ev.Event], *, ahead: Path | None = None) -> str:
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    if ahead is not None:
        display.read_ahead(events, ahead)
    for event in events:
        display.on_event(event)
    return out.getvalue()


def test_a_fork_replayed_headless_names_the_fork(
    answer_baseline_run: BaselineRun, answer_task: Path, tmp_path: Path
) -> None:
    source = load_run(answer_baseline_run.run_dir)
    fork_dir = tmp_path / "runs" / "the-fork"
    fork_run(source, load_task(answer_task), at_step=1, run_dir=fork_dir, model="baseline")
    proc = mlra_cli(["replay", str(fork_dir), "--no-tui"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[:2]
    assert f"run the-fork (a fork of {source.started.run_id} at worker step 1)" in header[0]
    assert f"workspace {fork_dir / 'workspace'}" in header[1], header
    assert str(answer_baseline_run.run_dir) not in "\n".join(header)
    assert f"⑂ this is run the-fork, forked from {source.started.run_id} at worker step 1" in (
        proc.stdout
    )


def test_the_headless_transcript_shows_jobs_retries_and_what_an_edit_ran() -> None:
    command = {"command": "echo 42 > answer.txt"}
    edited = {"command": "echo 41 > answer.txt"}
    text = transcript(
        [
            ev.JobStarted(
                job="job-1", name="train", command="python train.py", log="job-1.log", t=1
            ),
            ev.ModelRetry(agent="worker", model="m", attempt=2, max_retries=5, status=429, t=2),
            ev.ModelRetry(agent="worker", model="m", attempt=3, t=3),
            ev.ToolCall(call_id="c1", agent="worker", tool="bash", arguments=command, t=4),
            ev.ApprovalRequested(call_id="c1", tool="bash", arguments=command, reason="bash", t=4),
            ev.Control(action="edit", call_id="c1", arguments=edited, t=5),
            ev.JobEnded(job="job-1", end="exited", exit_code=0, duration_s=213, t=214),
            ev.JobEnded(job="job-2", end="stopped", reason="the time limit was reached", t=215),
        ]
    )
    assert "job job-1 (train) started: $ python train.py · log job-1.log" in text
    assert "worker model retry 2/5 after 429" in text
    assert "worker model retry 3 after a failed connection" in text
    assert "user edit, runs: $ echo 41 > answer.txt" in text
    assert "job job-1 exited 0 after 3m33s" in text
    assert "job job-2 stopped after 0s: the time limit was reached" in text


def test_a_submitted_runs_submit_step_is_done_and_unisolated_is_said_once() -> None:
    submitted = ev.RunFinished(status="finished", reason="submitted", message="")
    assert step_mark(ev.PlanStep(id="2", title="Submit"), submitted)[2] == "done: the run submitted"
    assert step_mark(ev.PlanStep(id="3", title="Write a report"), submitted)[2] == (
        "not started: the run submitted"
    )
    score = ev.EvaluationFinished(
        ok=True, metric="acc", score=0.9, baseline=0.5, agent_isolation="none"
    )
    assert "UNISOLATED" in score_line(score)
    assert all("UNISOLATED" not in t.plain for t in score_texts(score, unisolated=False))


async def test_a_finished_unisolated_run_says_unisolated_once(tmp_path: Path) -> None:
    events = []
    for event in recorded_run("finished"):
        if isinstance(event, ev.RunStarted):
            sandbox = event.sandbox.model_copy(update={"isolation": "none"})
            event = event.model_copy(update={"sandbox": sandbox})
        elif isinstance(event, ev.EvaluationFinished):
            event = event.model_copy(update={"agent_isolation": "none"})
        events.append(event)
    app = MlraApp(events=events)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        content = app.query_one(StatusBar).content
        line = content.plain if isinstance(content, Text) else str(content)
        assert "minimal_pair_accuracy" in line and line.count("UNISOLATED") == 1, line
