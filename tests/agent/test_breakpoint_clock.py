"""Time at a breakpoint: while a call waits for approval, the run is held as a pause
holds it (its clock stops, and so do the sandbox's commands and background jobs), unless
the user chose `--break-runs-jobs`, and then the wait counts on the clock.

Whole runs in-process (the test approves the held call, as the console would) with the
real OpenAI SDK against the scripted model server, in real bubblewrap. The background
job is a ticker that writes a counter and its own wall-clock time every 0.1 s to its
log: the log says when it made progress, whatever the run's clock says.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from mlra.tools.sandbox import bwrap as bw
from tests.conftest import processes_running
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

HOLD_S = 1.5
"""How long the test leaves a call waiting for approval (the time that must not count)."""
CLOCK_SLACK_S = 0.15
"""How far the run clock and the wall clock may drift over a wait where both run (the
events' stamps are taken a few statements apart)."""

pytestmark = pytest.mark.skipif(bw.find_bwrap() is None, reason="needs bubblewrap")


def _ticker(marker: str) -> str:
    return (
        f'i=0; while [ ! -f stop-{marker} ]; do i=$((i+1)); echo "{marker} $i $(date +%s.%N)"; '
        f"sleep 0.1; done; echo done-{marker}"
    )


def _until_ticks(marker: str, n: int) -> str:
    """A foreground command that returns once the job's log holds `n` ticks."""
    return (
        f"until [ \"$(grep -c '^{marker} ' jobs/job-1.log 2>/dev/null)\" -ge {n} ]; "
        "do sleep 0.02; done"
    )


def _script(marker: str) -> dict[str, Any]:
    return {
        "supervisor": supervisor_answering(),
        "worker": [
            turn(
                "",
                {"name": "job_start", "arguments": {"command": _ticker(marker), "name": "ticker"}},
            ),
            turn("", call("bash", command=_until_ticks(marker, 3))),
            turn("", call("bash", command="echo 42 > answer.txt")),  # the breakpoint's
            turn("", call("job_wait", job="ticker", timeout=120)),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }


def _controller(server: ScriptedModelServer, task: Path, runs: Path, **cfg: Any) -> RunController:
    provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
    config = RunConfig(
        task="answer",
        model="openai/test",
        runs_dir=runs,
        run_id="b",
        isolation="bwrap",
        breakpoints=["bash:echo 42"],
        **cfg,
    )
    controller = RunController(config, load_task(task), provider)
    controller.prepare()
    return controller


def _ticks(log: Path, marker: str) -> list[tuple[int, float]]:
    """(counter, the job's own wall-clock time) of each whole line the ticker wrote."""
    text = log.read_text() if log.exists() else ""
    whole = text[: text.rfind("\n") + 1]
    ticks = []
    for line in whole.splitlines():
        if line.startswith(f"{marker} "):
            _, n, t = line.split()
            ticks.append((int(n), float(t)))
    return ticks


def _states(marker: str) -> set[str]:
    states = set()
    for pid in processes_running(marker):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            states.add(stat[stat.rfind(")") + 2])
    return states


async def _until(condition: Any, what: str) -> None:
    """Wait for a condition on files or processes another process changes (nothing to await)."""
    try:
        async with asyncio.timeout(30):
            while not condition():  # noqa: ASYNC110 (no event to await: another process's state)
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"waited 30 s for {what}") from None


def _kill_all(marker: str) -> None:
    for pid in processes_running(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _one(events: list[ev.Event], kind: type[ev.Event]) -> Any:
    found = [e for e in events if isinstance(e, kind)]
    assert len(found) == 1, found
    return found[0]


def _approved(events: list[ev.Event]) -> ev.Control:
    return next(e for e in events if isinstance(e, ev.Control) and e.action == "approve")


async def _run(controller: RunController, on_approval: Any) -> list[ev.Event]:
    tasks: list[asyncio.Task[None]] = []

    def seen(event: ev.Event) -> None:
        if isinstance(event, ev.ApprovalRequested):
            tasks.append(asyncio.ensure_future(on_approval(event)))

    controller.subscribe(seen)
    await controller.run(agent_for)
    await asyncio.gather(*tasks)
    return read_events(controller.run_dir / "events.jsonl")


async def test_a_call_waiting_for_approval_holds_the_jobs_and_the_clock(
    tmp_path: Path, answer_task: Path
) -> None:
    marker = "tick-B4"
    held: list[tuple[float, float]] = []
    try:
        with ScriptedModelServer(_script(marker)) as server:
            controller = _controller(server, answer_task, tmp_path)
            log = controller.workspace / "jobs" / "job-1.log"

            async def wait_then_approve(event: ev.ApprovalRequested) -> None:
                await _until(lambda: _states(marker) == {"T"}, "the job stopped")
                since = time.time()
                # A pause and a resume while the call still waits: the resume must not
                # let the job go on (the approval holds it still).
                controller.pause()
                controller.resume()
                await asyncio.sleep(HOLD_S)  # the person away: time that must not count
                assert _states(marker) == {"T"}
                held.append((since, time.time()))
                controller.approve(event.call_id)
                await _until(lambda: _states(marker) - {"T"}, "the job going on")
                # Some running time after the wait, then let it end.
                await _until(
                    lambda: sum(t > held[0][1] for _, t in _ticks(log, marker)) >= 4, "ticks"
                )
                (controller.workspace / f"stop-{marker}").touch()

            events = await _run(controller, wait_then_approve)
    finally:
        _kill_all(marker)

    ((since, until),) = held
    ticks = _ticks(log, marker)
    # The job's own log: no progress while the call waited, and none lost.
    assert not [t for _, t in ticks if since < t < until], ticks
    assert [n for n, _ in ticks] == list(range(1, len(ticks) + 1))
    # The run clock stood still over the wait, which took HOLD_S and more of wall time.
    asked, approved = _one(events, ev.ApprovalRequested), _approved(events)
    assert approved.ts - asked.ts >= HOLD_S
    assert approved.t - asked.t < CLOCK_SLACK_S
    # The job's recorded duration is its running time and none of the wait.
    started, ended = _one(events, ev.JobStarted), _one(events, ev.JobEnded)
    assert ended.end == "exited" and ended.exit_code == 0
    # Each stamp is taken a few statements from its reading of the clock (a job's end
    # is recorded after its metrics are read): on a busy machine, more than 10 ms.
    assert abs((ended.t - started.t) - ended.duration_s) < CLOCK_SLACK_S
    # At least its running time by its own log (its start before the first tick and its
    # exit after the last add to that: a second and more on a busy machine, so no bound
    # above by the log) ...
    own = _running_time_by_log(ticks, since, until)
    assert ended.duration_s >= own - CLOCK_SLACK_S, (own, ended.duration_s)
    # ... and at most the wall clock less the wait between the events: the clock and the
    # job stay held a moment past the approval (until the run goes on), never less.
    waited = approved.ts - asked.ts
    assert ended.duration_s <= (ended.ts - started.ts) - waited + CLOCK_SLACK_S
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


async def test_break_runs_jobs_lets_them_run_and_counts_the_wait(
    tmp_path: Path, answer_task: Path
) -> None:
    marker = "tick-B5"
    try:
        with ScriptedModelServer(_script(marker)) as server:
            controller = _controller(server, answer_task, tmp_path, break_runs_jobs=True)
            log = controller.workspace / "jobs" / "job-1.log"

            async def wait_then_approve(event: ev.ApprovalRequested) -> None:
                # The job goes on while the call waits: ticks half a second past the
                # question by the job's own clock (counting lines would not do: a starved
                # reader takes several at once, less than half a second apart).
                await _until(
                    lambda: any(t >= event.ts + 0.5 for _, t in _ticks(log, marker)),
                    "ticks meanwhile",
                )
                controller.approve(event.call_id)
                (controller.workspace / f"stop-{marker}").touch()

            events = await _run(controller, wait_then_approve)
    finally:
        _kill_all(marker)

    ticks = _ticks(log, marker)
    asked, approved = _one(events, ev.ApprovalRequested), _approved(events)
    assert [t for _, t in ticks if asked.ts < t < approved.ts]
    # The wait counted on the run clock as it passed on the wall clock.
    assert approved.ts - asked.ts >= 0.4
    assert abs((approved.t - asked.t) - (approved.ts - asked.ts)) < CLOCK_SLACK_S
    started, ended = _one(events, ev.JobStarted), _one(events, ev.JobEnded)
    assert ended.end == "exited" and ended.exit_code == 0
    assert abs(ended.duration_s - (ended.ts - started.ts)) < CLOCK_SLACK_S
    # The ticks over the wait are in its duration (its start and exit add to it).
    own = ticks[-1][1] - ticks[0][1]
    assert ended.duration_s >= own - CLOCK_SLACK_S, (own, ended.duration_s)
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


async def test_with_break_runs_jobs_the_deadline_passes_while_a_call_waits(
    tmp_path: Path, answer_task: Path
) -> None:
    """The wait counts: a call nobody approves ends the run at its time limit, and the
    job that ran meanwhile is stopped then, its duration its whole run."""
    marker = "tick-B6"
    limits: list[float] = []
    try:
        with ScriptedModelServer(_script(marker)) as server:
            controller = _controller(
                server, answer_task, tmp_path, break_runs_jobs=True, time_limit_s=600
            )
            log = controller.workspace / "jobs" / "job-1.log"

            async def never(event: ev.ApprovalRequested) -> None:
                # The deadline falls during the wait however long the steps before it
                # took on a busy machine (a fixed 8 s limit could run out first): 6 s
                # on from here, past the deadline watcher's longest nap (5 s).
                limits.append(controller.clock.elapsed() + 6.0)
                controller.clock.limit_s = limits[0]

            events = await _run(controller, never)
    finally:
        _kill_all(marker)
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished) and finished.reason == "deadline"
    asked = _one(events, ev.ApprovalRequested)
    assert not [e for e in events if isinstance(e, ev.Control) and e.action == "approve"]
    # The run clock ran through the wait to the limit, and the job with it: its own log
    # has ticks from the wait, and its recorded duration reaches the limit.
    ended = _one(events, ev.JobEnded)
    (limit,) = limits
    assert asked.t < limit <= ended.t + CLOCK_SLACK_S
    assert [t for _, t in _ticks(log, marker) if t > asked.ts]
    started = _one(events, ev.JobStarted)
    assert ended.end == "stopped" and ended.reason == "the time limit was reached"
    # On the run clock, which stops at the deadline: stopping the job after it takes
    # what the machine gives it (a quarter of a second at a load of 17) and is not the
    # job's time, so its wall-clock stamps are no measure of its duration.
    assert abs((ended.t - started.t) - ended.duration_s) < CLOCK_SLACK_S
    assert ended.duration_s >= limit - started.t - CLOCK_SLACK_S


def _running_time_by_log(ticks: list[tuple[int, float]], since: float, until: float) -> float:
    """The job's running time by its own log: from its first tick to its last, less the
    time it stood stopped (the gap across the wait, less one usual period)."""
    times = [t for _, t in ticks]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    across = next(b - a for a, b in itertools.pairwise(times) if a < since and b > until)
    period = statistics.median(gaps)
    return (times[-1] - times[0]) - (across - period)
