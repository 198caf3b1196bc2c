"""The Resources pane's Jobs section: the run's background jobs as their events tell
them, running ones first (with how long they have run) and then how the others ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import OptionList

from mlra import events as ev
from mlra.agent.record.state import fold
from mlra.console.apps.app import MlraApp
from mlra.console.panes.resources import ResourcesPane
from mlra.console.screens.screens import StopJobScreen
from tests.conftest import processes_running
from tests.console.test_console_controls import ANSWER, REPORT, is_, live, worker
from tests.scripts import call, turn


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


def call_job(tool: str, **arguments: Any) -> dict[str, Any]:
    """A job tool's call (`tests.scripts.call` takes the tool's name as its own `name`)."""
    return {"name": tool, "arguments": arguments}


def _pane_text(app: MlraApp) -> str:
    content = app.query_one(ResourcesPane).content
    return content.plain if isinstance(content, Text) else str(content)


MARK = "jobmark-5173"
TICKER = f"for i in $(seq 600); do echo tick-$i; sleep 0.1; done  # {MARK}"


async def test_the_user_stops_a_running_job_from_the_console(
    tmp_path: Path, answer_task: Path
) -> None:
    """The pane shows the job's last line while it runs; `j` lists the running jobs and
    stops the chosen one; the log says the user stopped it, the agent's `job_wait` reads
    so, and none of its processes is left."""
    script = worker(
        turn("Start the ticker.", call_job("job_start", command=TICKER, name="ticker")),
        turn("Wait for it.", call_job("job_wait", job="job-1", timeout=60)),
        ANSWER,
        REPORT,
    )
    async with live(tmp_path, answer_task, script) as run:
        await run.watch.wait(is_(ev.JobStarted))
        await run.watch.wait(lambda e: isinstance(e, ev.ToolCall) and e.tool == "job_wait")
        await run.shown(lambda app: "    tick-" in _pane_text(app))
        await run.pilot.press("j")
        await run.shown(lambda app: isinstance(app.screen, StopJobScreen))
        assert "job-1 (ticker)" in str(
            run.app.screen.query_one(OptionList).get_option_at_index(0).prompt
        )
        await run.pilot.press("enter")
        ended = await run.watch.wait(is_(ev.JobEnded))
        waited = await run.watch.wait(
            lambda e: isinstance(e, ev.ToolResult) and e.tool == "job_wait"
        )
        assert processes_running(MARK) == []
        await run.finished()
    assert isinstance(ended, ev.JobEnded)
    assert ended.end == "stopped" and ended.reason == "stopped by the user"
    assert isinstance(waited, ev.ToolResult)
    assert "stopped by the user" in waited.output


async def test_j_with_no_job_running_says_so(tmp_path: Path, answer_task: Path) -> None:
    """`j` before any job has started answers with a toast: it was disabled then, and the
    key did nothing at all, though its action has words for that case."""
    wait_for_go = (
        "import os, time\nprint('waiting', flush=True)\n"
        "for _ in range(1200):\n    if os.path.exists('go'): break\n    time.sleep(0.05)\n"
    )
    script = worker(turn("wait", call("python", code=wait_for_go)), ANSWER, REPORT)
    async with live(tmp_path, answer_task, script) as run:
        await run.watch.wait(is_(ev.ToolOutput))
        await run.pilot.press("j")
        await run.shown(
            lambda app: any(
                "No background job is running" in str(n.message) for n in app._notifications
            )
        )
        assert not isinstance(run.app.screen, StopJobScreen)
        (run.controller.workspace / "go").touch()
        await run.finished()
