"""Replay's go-to dialog (`g`) in a search names what it jumps to: the search's own
steps (starting, waiting on, submitting attempts), not a worker's, which a search's
run has none of; a search that numbers no steps (an LLM search's turns are its
supervisor's) says where its attempts' steps are instead of offering `(1–0)`."""

from __future__ import annotations

from textual.widgets import Input, Label

from mlra import events as ev
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.screens.screens import PromptScreen
from mlra.console.text.replay import ReplayModel
from tests.console.test_attempts_pane import Log, _finished, _started, toasts, until


def _search(role: ev.AgentRole) -> list[ev.Event]:
    log = Log()
    started = _started("20261126-120000-tiny-lm-goto")
    log.add(0, started.model_copy(update={"config": {"search": "greedy"}}))
    for i in (1, 2, 3):
        log.add(i * 10, ev.StepStarted(agent=role, step=i, turn=i))
        log.add(
            i * 10 + 1,
            ev.AttemptStarted(
                attempt=f"a{i}", operator="variant", instructions="", folder=f"attempts/a{i}"
            ),
        )
        log.add(i * 10 + 9, _finished(f"a{i}", None, status="validated", score=0.7 + i / 100))
    log.add(40, ev.RunFinished(status="finished", reason="submitted", message="submitted a3"))
    return log.events


async def test_go_to_in_a_search_says_search_step() -> None:
    app = ReplayApp(ReplayModel(_search("baseline")))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, PromptScreen), "the dialog")
        title = str(app.screen.query_one(".dialog-title", Label).content)
        assert title.startswith("Go to search step (1–3)"), title
        assert "worker" not in title and "own actions" in title, title
        assert "Attempts" in app.screen.query_one(Input).placeholder
        app.screen.query_one(Input).value = "9"
        await pilot.press("enter")
        await until(pilot, lambda: "no search step 9" in toasts(app), "the refusal")
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, PromptScreen), "the dialog again")
        app.screen.query_one(Input).value = "2"
        await pilot.press("enter")
        await until(pilot, lambda: app.model.position().step == 2, "the cursor at step 2")


async def test_go_to_in_a_search_with_no_steps_of_its_own_says_where_they_are() -> None:
    app = ReplayApp(ReplayModel(_search("supervisor")))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: "numbers no steps of its own" in toasts(app), "the note")
        assert not isinstance(app.screen, PromptScreen)
