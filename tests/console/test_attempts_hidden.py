"""An Attempts pane with no room for every attempt (a search of many, or the replay's
verdict above it on a short terminal) says how many it does not show, above and
below, where it showed some rows with only a one-cell scrollbar to say others were
there."""

from __future__ import annotations

import re

from mlra import events as ev
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.attempts import AttemptsPane
from mlra.console.text.replay import ReplayModel
from tests.console.test_attempts_pane import Log, _finished, _started, until

ATTEMPTS = 12


def _many() -> Log:
    """A finished search of twelve validated variants."""
    log = Log()
    log.add(0, _started("20261126-120000-tiny-lm-many"))
    for i in range(1, ATTEMPTS + 1):
        log.add(
            i * 10,
            ev.AttemptStarted(
                attempt=f"a{i}",
                operator="variant",
                instructions=f"recipe with steps={100 * i}",
                folder=f"attempts/a{i}",
                time_limit_s=500,
            ),
        )
        log.add(i * 10 + 9, _finished(f"a{i}", None, status="validated", score=0.7 + i / 1000))
    log.add(200, ev.RunFinished(status="finished", reason="submitted", message="submitted a12"))
    return log


def _counts(title: str) -> tuple[int, int]:
    above = re.search(r"(\d+) more ↑", title)
    below = re.search(r"(\d+) more ↓", title)
    return (int(above[1]) if above else 0, int(below[1]) if below else 0)


async def test_the_attempts_pane_says_how_many_it_has_no_room_for() -> None:
    app = ReplayApp(ReplayModel(_many().events))
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(AttemptsPane)
        await until(pilot, lambda: "more" in str(pane.border_title), "the pane says more")
        shown = pane.scrollable_content_region.height
        assert 0 < shown < ATTEMPTS
        assert _counts(str(pane.border_title)) == (0, ATTEMPTS - shown), pane.border_title
        await pilot.press("A", "end")  # to the pane, then its last attempt
        await until(pilot, lambda: "more ↑" in str(pane.border_title), "the rows above said")
        assert _counts(str(pane.border_title)) == (ATTEMPTS - shown, 0), pane.border_title
    roomy = ReplayApp(ReplayModel(_many().events))
    async with roomy.run_test(size=(160, 60)) as pilot:
        pane = roomy.query_one(AttemptsPane)
        await until(pilot, lambda: pane.option_count == ATTEMPTS, "the tree shown")
        await pilot.pause()
        assert pane.scrollable_content_region.height >= ATTEMPTS
        assert pane.border_title == "Attempts"
