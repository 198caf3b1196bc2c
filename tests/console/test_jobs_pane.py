"""The Resources pane's Jobs section: the run's background jobs as their events tell
them, running ones first (with how long they have run) and then how the others ended."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult

from mlra import events as ev
from mlra.agent.state import fold
from mlra.console.panes.resources import ResourcesPane


class _OnePane(App[None]):
    def compose(self) -> ComposeResult:
        yield ResourcesPane(id="resources")


def _events() -> list[ev.Event]:
    events: list[ev.Event] = [
        ev.RunStarted(
            run_id="r", task="t", task_title="T", task_dir="/t", model="m",
            limits=ev.Limits(time_limit_s=600),
            sandbox=ev.SandboxInfo(kind="local", isolation="none", network=False, workdir="/w", workspace="/w"),
        ),
        ev.JobStarted(job="job-1", name="prep", command="python prep.py", log="jobs/job-1.log"),
        ev.JobEnded(job="job-1", end="exited", exit_code=0, duration_s=3.0),
        ev.JobStarted(job="job-2", name="train", command="python train.py", log="jobs/job-2.log"),
        ev.JobStarted(job="job-3", command="sleep 100", log="jobs/job-3.log"),
        ev.JobEnded(job="job-3", end="lost", reason="mlra stopped while it ran"),
    ]  # fmt: skip
    events[3].t = 20.0
    return events


async def test_the_resources_pane_lists_the_jobs() -> None:
    app = _OnePane()
    async with app.run_test(size=(60, 30)) as pilot:
        pane = app.query_one(ResourcesPane)
        pane.show(fold(_events()), 95.0)
        await pilot.pause()
        content = pane.content
        text = content.plain if isinstance(content, Text) else str(content)
    assert "Jobs 1 running" in text
    lines = text.splitlines()
    first = lines.index("Jobs 1 running")
    assert "job-2 train running 1m15s" in lines[first + 1]
    assert "job-3 sleep 100 lost" in lines[first + 2]
    assert "job-1 prep exit 0" in lines[first + 3]


async def test_a_run_without_jobs_shows_no_jobs_section() -> None:
    app = _OnePane()
    async with app.run_test(size=(60, 30)) as pilot:
        pane = app.query_one(ResourcesPane)
        pane.show(fold(_events()[:1]), 5.0)
        await pilot.pause()
        content = pane.content
        text = content.plain if isinstance(content, Text) else str(content)
    assert "Jobs" not in text
