"""The Resources pane's context gauge shows the prompt being answered, not 0%: before
the first answer came it said `Ctx 0/8.2k 0%` while a 4.4k-token prompt was read. The
step's start records mlra's estimate of the request (`step_started.prompt_tokens`), marked
"~" until the answer's count replaces it; a log without it says the size is not known yet.

A live console on a real run (the scripted model server on loopback) whose supervisor's
first answer is held until the screen is read.
"""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from mlra import events as ev
from mlra.agent.record.state import RunState, fold
from mlra.console.apps.app import MlraApp
from mlra.console.panes.resources import context_gauge
from tests.console.test_console_controls import ANSWER, REPORT, is_, live
from tests.scripts import supervisor_answering


def _gauge(app: MlraApp) -> str:
    pane = str(app.query_one("#resources", Static).content)
    return next((line for line in pane.splitlines() if line.startswith("Ctx")), "")


async def test_the_first_prompt_s_size_shows_while_it_is_answered(
    tmp_path: Path, answer_task: Path
) -> None:
    first, *rest = supervisor_answering()
    script = {"supervisor": [{"hold": "first", **first}, *rest], "worker": [ANSWER, REPORT]}
    async with live(tmp_path, answer_task, script) as run:
        started = await run.watch.wait(is_(ev.StepStarted, agent="supervisor"))
        assert isinstance(started, ev.StepStarted)
        sent = started.prompt_tokens
        assert sent is not None and sent > 500  # the system prompt and the tools, estimated
        await run.shown(lambda app: "~" in _gauge(app))
        gauge = _gauge(run.app)
        assert " 0/" not in gauge and "0%" not in gauge, gauge
        run.server.release("first")
        called = await run.watch.wait(is_(ev.ModelCall, agent="supervisor"))
        assert isinstance(called, ev.ModelCall)
        assert (await run.finished()).reason == "submitted"
    # The answer's count replaces the estimate (the next step's estimate follows at once).
    answered = fold([e for e in run.watch.events if e.seq <= called.seq])
    assert answered.context_tokens == called.input_tokens
    assert not answered.context_estimated


def test_a_log_without_the_estimate_says_the_size_is_not_known_yet() -> None:
    state = RunState(context_window=8_192)
    state.apply(ev.StepStarted(agent="worker", step=1, turn=1))
    for width in (8, 30):
        gauge = context_gauge(state, width)
        assert gauge is not None and "?/8.2k" in gauge.plain and "0%" not in gauge.plain
        assert "not" in gauge.plain and "0/" not in gauge.plain
