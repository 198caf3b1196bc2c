"""What the live console tells a person steering a run: the model generating and its
retries (from `model_retry` events), the score coloured by what it means, a status
line that fits 80 columns, no pause for an evaluation, and dialogs or timers that
outlive the run without raising. Live runs use the scripted model server through
the real OpenAI SDK, as tests/console/test_console_controls.py does."""

from __future__ import annotations

import re
from pathlib import Path

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import Static

from mlra import events as ev
from mlra.agent.record.run_progress import glance
from mlra.agent.record.state import AFTER_ACTION, AFTER_ATTEMPTS, fold
from mlra.console.apps.app import MlraApp
from mlra.console.panes.plan import plan_window
from mlra.console.panes.status import Part, StatusBar, activity, fit, score_style, score_texts
from mlra.console.screens.screens import ConfirmScreen, PromptScreen
from tests.console.console_fixtures import recorded_run
from tests.console.test_console_controls import ANSWER, REPORT, is_, live, worker
from tests.scripts import supervisor_answering, turn


def status_line(app: MlraApp) -> str:
    content = app.query_one(StatusBar).content
    return content.plain if isinstance(content, Text) else str(content)


def _score(
    score: float, *, higher: bool = True, success: bool | None = None
) -> ev.EvaluationFinished:
    return ev.EvaluationFinished(
        ok=True, metric="acc", score=score, baseline=0.5, higher_is_better=higher, success=success
    )


def test_a_score_is_green_only_where_it_beats_the_baseline() -> None:
    assert score_style(_score(0.7)) == "bold green"
    assert score_style(_score(0.3)) == "bold red"
    assert score_style(_score(0.5)) == "bold yellow"
    assert score_style(_score(0.3, higher=False)) == "bold green"  # a loss: lower is better
    assert score_style(_score(0.7, success=False)) == "bold yellow"  # short of the success bar
    assert score_style(ev.EvaluationFinished(ok=False, metric="acc", error="crashed")) == "bold red"
    assert score_style(ev.EvaluationFinished(ok=True, metric="acc", score=0.4)) == "bold"


def test_a_narrow_line_keeps_the_score_whole_and_drops_the_model_first() -> None:
    e = ev.EvaluationFinished(ok=True, metric="minimal_pair_accuracy", score=0.812, baseline=0.767)
    parts = [
        Part([Text("task ")], rank=7),
        Part([Text("· anthropic/claude-sonnet-4-6 ")], rank=8),
        Part([Text(" FINISHED ")], rank=0, droppable=False),
        Part([Text("  q quit")], rank=1, droppable=False),
        Part([Text("  ") + t for t in score_texts(e)], rank=2, droppable=False),
    ]
    line = fit(parts, 40).plain
    assert "0.812" in line and "q quit" in line and "claude" not in line
    assert len(line) <= 40
    assert not line.rstrip().endswith("score:")


def test_the_plan_window_keeps_the_current_step() -> None:
    steps = [ev.PlanStep(id=str(i), title=f"step {i}", status="done") for i in range(1, 8)]
    steps += [ev.PlanStep(id=str(i), title=f"step {i}") for i in range(8, 11)]
    state = fold(
        [ev.PlanUpdated(steps=steps), ev.SubtaskStarted(subtask=1, step_id="8", instructions="")]
    )
    shown, before, after = plan_window(state, 5)
    assert "8" in [s.id for s in shown]
    assert before + len(shown) + after == 10 and len(shown) + 2 <= 5


async def test_retries_show_in_the_status_line_as_they_happen(
    tmp_path: Path, answer_task: Path
) -> None:
    # The second 429 asks the SDK to wait 3 s: the status line shows it while it waits.
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            {"status": 429, "times": 1},
            {"status": 429, "times": 1, "retry_after_ms": 3000},
            ANSWER,
            REPORT,
        ],
    }
    async with live(tmp_path, answer_task, script) as run:
        retry = await run.watch.wait(is_(ev.ModelRetry, attempt=2))
        assert isinstance(retry, ev.ModelRetry) and retry.status == 429 and retry.agent == "worker"
        await run.shown(lambda app: "retry 2" in status_line(app))
        line = status_line(run.app)
        assert "generating…" in line and "after 429" in line
        assert (await run.finished()).reason == "submitted"
    # The log holds them, so a replay folds the same state.
    assert [e.attempt for e in run.watch.events if isinstance(e, ev.ModelRetry)] == [1, 2]


async def test_a_call_asked_again_after_a_lost_connection_shows_as_that_call_retried(
    tmp_path: Path, answer_task: Path
) -> None:
    """The server answers after a while, then the connection drops mid-answer: the run
    waits and asks again. The status line says "retry 1" of the same call, its time
    counted from when the call was sent, not from the retry as a new turn's would be."""
    script = {
        "supervisor": supervisor_answering(),
        # The call asked again is answered only after 3 s: the run waits no more then.
        "worker": [{"hang": 2.5, "drop": True}, {**ANSWER, "hang": 3}, REPORT],
    }
    async with live(tmp_path, answer_task, script) as run:
        retry = await run.watch.wait(is_(ev.ModelRetry, agent="worker"))
        assert isinstance(retry, ev.ModelRetry) and retry.cause == "connection_lost"
        state = fold([e for e in run.watch.events if e.seq <= retry.seq])
        state.started = True
        (shown, *_) = [t.plain for t in activity(state, retry.t)]
        took = re.fullmatch(r"worker generating… (\d+)s \(retry 1 after the connection .*", shown)
        assert took is not None and int(took[1]) >= 2, shown  # the 2.5 s before the drop
        assert "waiting 1s, clock paused" in shown
        # Once the clock runs again (the wait over, the call in flight), the clock is
        # not said paused: in the status line, nor in a batch's or heartbeat's words.
        later = await run.watch.wait(lambda e: e.t > retry.t + 1, after=retry.seq)
        events = [e for e in run.watch.events if e.seq <= later.seq]
        assert not any(isinstance(e, ev.ModelCall) and e.agent == "worker" for e in events)
        (shown, *_) = [t.plain for t in activity(state, later.t)]
        assert "(retry 1 after the connection was lost mid-answer)" in shown, shown
        assert "clock paused" not in glance(events, later.t), glance(events, later.t)
        assert (await run.finished()).reason == "submitted"


def test_a_wait_for_the_model_server_shows_in_the_status_line() -> None:
    """A run waiting out a server that went away (agent/loop/server_wait.py) says so, and
    why, for as long as it waits: its clock is paused, so the seconds stand still."""
    events: list[ev.Event] = [
        ev.StepStarted(agent="worker", step=3, turn=3, t=10.0),
        ev.ModelRetry(
            agent="worker",
            model="anthropic/local",
            attempt=2,
            cause="connection_lost",
            wait_s=2.0,
            wait_limit_s=300.0,
            t=12.0,
        ),
    ]
    state = fold(events)
    state.started = True
    shown = [t.plain for t in activity(state, 12.0)]
    assert shown[0] == (
        "worker generating… 2s (retry 2 after the connection was lost mid-answer; "
        "waiting 2s, clock paused)"
    )
    assert all("clock paused" in line for line in shown)  # kept in the narrowest too


async def test_space_while_evaluating_says_evaluation_cannot_be_paused(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.watch.wait(is_(ev.ApprovalRequested))
        # The run as the console sees it during an evaluation (the agent is held at
        # the breakpoint, so the phase stays put while the key is pressed).
        run.controller.emit(ev.EvaluationStarted(evaluator="answer", artifact="answer.txt"))
        await run.shown(lambda app: app.state.phase == "evaluating")
        await run.pilot.press("space")
        await run.shown(
            lambda app: any("cannot be paused" in n.message for n in app._notifications)
        )
        assert run.watch.count(is_(ev.Control, action="pause")) == 0
        assert not run.controller.controls.paused
        run.controller.request_stop(evaluate=False)
        await run.finished()


async def test_quit_while_grading_leaves_once_graded_and_says_so(
    tmp_path: Path, answer_task: Path
) -> None:
    """q during the grading asked "The run is stopped without evaluation and marked
    stopped", logged a quit, then waited out the grading and ended the run finished with
    its score: the question now says what happens, and nothing is logged as a quit."""
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.watch.wait(is_(ev.ApprovalRequested))
        run.controller.emit(ev.EvaluationStarted(evaluator="answer", artifact="answer.txt"))
        await run.shown(lambda app: app.state.phase == "evaluating")
        await run.pilot.press("space")
        await run.shown(
            lambda app: any("q leaves once it is graded" in n.message for n in app._notifications)
        )
        await run.pilot.press("q")
        await run.shown(lambda app: isinstance(app.screen, ConfirmScreen))
        asked = " ".join(str(s.render()) for s in run.app.screen.query(Static))
        assert "leaves once its grade is in" in asked and "without evaluation" not in asked
        assert "mlra run --no-tui" in asked and "mlra attach" in asked  # how to be free to go
        await run.pilot.press("y")
        await run.shown(lambda app: not isinstance(app.screen, ConfirmScreen))
        assert run.watch.count(is_(ev.Control, action="quit")) == 0
        assert run.app.return_value is None  # still here while it grades
        run.controller.request_stop(evaluate=True)  # the grading comes to its end
        finished = await run.finished()
        await run.shown(lambda app: app.return_value is not None)
    assert finished.status == "finished"


async def test_a_dialog_answered_after_the_run_ended_does_not_raise(
    tmp_path: Path, answer_task: Path
) -> None:
    async with live(tmp_path, answer_task, worker(ANSWER, REPORT), breakpoints=["bash"]) as run:
        await run.watch.wait(is_(ev.ApprovalRequested))
        await run.pilot.press("i")
        await run.shown(lambda app: isinstance(app.screen, PromptScreen))
        run.controller.request_stop(evaluate=False)  # the run ends while the dialog is open
        await run.finished()
        await run.shown(lambda app: app.result is not None)
        await run.pilot.press(*"too late", "enter")
        await run.shown(lambda app: any("too late" in n.message for n in app._notifications))
        assert run.watch.count(is_(ev.Control, action="inject")) == 0


async def test_timers_firing_after_the_panes_are_gone_do_not_raise() -> None:
    app = MlraApp(events=recorded_run("running"))
    async with app.run_test(size=(80, 24)) as pilot:
        await app.query_one("#body").remove()
        await app.query_one(StatusBar).remove()
        app._tick()
        await app._refresh_files()
        await pilot.pause()


def test_a_wait_for_attempts_is_said_in_words() -> None:
    """`waiting for a1 (1m59s of up to 60m)`, not `attempt_wait 1m59s: {"timeout": 3600.0}`."""
    from mlra.console.panes.status import activity

    state = fold(
        [
            ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=1.0),
            ev.ToolCall(
                call_id="w1",
                agent="worker",
                tool="attempt_wait",
                arguments={"timeout": 3600.0},
                t=2.0,
            ),
        ]
    )
    state.started = True  # as after its run_started
    forms = [text.plain for text in activity(state, 121.0)]
    assert forms[0] == "waiting for a1 (1m59s of up to 60m)"
    assert not any("timeout" in form for form in forms)


def test_a_wait_past_the_runs_deadline_is_said_as_long_as_the_run_has_left() -> None:
    """The greedy search asks an hour of attempt_wait; the tool waits at most the run's
    time left, and a 20-minute run's status line said `of up to 60m`."""
    from mlra.console.panes.status import activity

    started = ev.RunStarted(
        run_id="r",
        task="tiny-lm",
        task_title="t",
        model="baseline",
        limits=ev.Limits(time_limit_s=1200),
        sandbox=ev.SandboxInfo(
            kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/r/w"
        ),
        t=0.0,
    )
    attempt = ev.AttemptStarted(attempt="a1", operator="variant", folder="attempts/a1", t=1.0)
    wait = ev.ToolCall(
        call_id="w1", agent="baseline", tool="attempt_wait", arguments={"timeout": 3600.0}, t=60.0
    )
    forms = [text.plain for text in activity(fold([started, attempt, wait]), 134.0)]
    assert forms[0] == "waiting for a1 (1m14s of up to 19m)"
    first = wait.model_copy(update={"t": 0.02})  # the search's first wait, at its start
    assert activity(fold([started, attempt, first]), 60.0)[0].plain.endswith("of up to 20m)")
    short = wait.model_copy(update={"arguments": {"timeout": 300.0}})
    assert activity(fold([started, attempt, short]), 134.0)[0].plain.endswith("of up to 5m)")


async def test_a_run_that_submitted_nothing_says_so_beside_its_task_at_160_columns(
    tmp_path: Path, answer_task: Path
) -> None:
    """A worker alone that only ever answers in text ends `no_tool_calls`, unsubmitted. The
    line said only `FINISHED  q quit  took 1s` at 160 columns: the reason (one form, too
    long to fit) was left out, and the task and model with it, as they gave way first.
    At 80 columns the reason is shortened, never left out."""
    chatter = turn("I would fine-tune the model with a larger learning rate and more epochs.")
    script = {"supervisor": [], "worker": [chatter] * 8}
    async with live(tmp_path, answer_task, script, agent="worker") as run:
        finished = await run.finished()
        assert finished.reason == "no_tool_calls"
        await run.shown(lambda app: app.state.finished is not None)
        await run.shown(lambda app: "took" in status_line(app))
        line = status_line(run.app)
        await run.pilot.resize_terminal(80, 24)
        await run.shown(lambda app: len(status_line(app)) <= 80)
        narrow = status_line(run.app)
    assert "not submitted: the worker" in line, line
    assert "answer" in line and "openai/test" in line, line  # the task and the model
    assert len(line) <= 160
    assert "not submitted" in narrow and "q quit" in narrow and "took" in narrow, narrow


def test_a_call_begun_before_a_resume_is_not_said_to_wait_to_run_once_paused() -> None:
    """A call open at the kill that had begun (the supervisor's assign_subtask, run again
    on resume) stays begun through the resume: paused, the status line gave it as
    what the next step runs ("before it runs")."""
    call = ev.ToolCall(
        call_id="s1",
        agent="supervisor",
        tool="assign_subtask",
        arguments={"step_id": "1", "instructions": "train"},
        logs_start=True,
        t=5.0,
    )
    events: list[ev.Event] = [
        call,
        ev.ToolStarted(call_id="s1", t=5.0),
        ev.RunResumed(t=10.0),
        ev.Control(action="pause", t=11.0),
    ]
    state = fold(events)
    assert "s1" in state.begun
    assert not any("before it runs" in text.plain for text in activity(state, 12.0))


class _Bar(App[None]):
    def compose(self) -> ComposeResult:
        yield StatusBar()


async def test_a_pending_pause_is_worded_from_the_step_the_log_has() -> None:
    """The step's own text says what it waits for: a search's step with no attempt in the
    log yet read `pausing after this action`, and a step after the action in hand while
    an attempt was listed running read as waiting on the attempts."""
    started = ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=1.0)
    shown: list[str] = []
    async with _Bar().run_test(size=(160, 24)) as pilot:
        bar = pilot.app.query_one(StatusBar)
        for events in (
            [ev.Control(action="step", text=AFTER_ATTEMPTS, t=2.0)],
            [started, ev.Control(action="step", text=AFTER_ACTION, t=2.0)],
        ):
            state = fold(events)
            state.started = True
            bar.show(state)
            content = bar.content
            shown.append(content.plain if isinstance(content, Text) else str(content))
    assert "RUNNING · pausing after the attempts' actions in hand" in shown[0], shown[0]
    assert "RUNNING · pausing after this action" in shown[1], shown[1]
