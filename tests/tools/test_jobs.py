"""Background jobs (`job_start`, `job_status`, `job_wait`, `job_stop`) in whole runs.

Runs go through the real command line (or an in-process controller, where the
test must act on the run while it goes: a pause) with the real OpenAI SDK and
the scripted model server on loopback. Each job's command carries a marker of
its own, so the test can tell whether any of its processes is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
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
from mlra.tools.job_tools import job_tools
from mlra.tools.jobs import JobManager, JobRecord
from mlra.tools.registry import ToolContext, ToolRegistry
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import IsolationMode, LocalSandbox
from tests.conftest import (
    SECRET_ENV,
    TEST_IMAGE,
    deadline_inside_the_held_call,
    docker_address,
    docker_problem,
    mlra_cli,
    processes_running,
)
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

MODEL = "openai/test-model"


def job_start(command: str, name: str = "") -> dict[str, Any]:
    """A `job_start` call (`call` takes the tool's name as its own `name`)."""
    return {"name": "job_start", "arguments": {"command": command, "name": name}}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env["OPENAI_API_KEY"] = "sk-test-not-a-secret"
    return env


def _args(server: ScriptedModelServer, runs: Path, task: Path, *extra: str) -> list[str]:
    return [
        "run",
        str(task),
        "--model",
        MODEL,
        "--base-url",
        server.url_for("openai"),
        "--no-tui",
        "--runs-dir",
        str(runs),
        "--run-id",
        "r",
        *extra,
    ]


@pytest.fixture(params=["local", "docker"])
def sandbox(request: pytest.FixtureRequest) -> list[str]:
    """The `mlra run` arguments of each kind of sandbox a job must work in (Docker where an
    engine and the test image are here; the test says why it skips otherwise)."""
    if request.param == "local":
        return []
    problem = docker_problem()
    if problem is not None:
        pytest.skip(problem)
    return ["--sandbox", "docker", "--image", TEST_IMAGE]


def _run(tmp_path: Path, task: Path, script: dict[str, Any], *extra: str) -> list[ev.Event]:
    env = _env()
    if "docker" in extra:
        env["DOCKER_HOST"] = docker_address() or ""
    with ScriptedModelServer(script) as server:
        proc = mlra_cli(_args(server, tmp_path / "runs", task, *extra), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return read_events(tmp_path / "runs" / "r" / "events.jsonl")


def _result_of(events: list[ev.Event], tool: str, nth: int = 0) -> ev.ToolResult:
    calls = [e for e in events if isinstance(e, ev.ToolCall) and e.tool == tool]
    call_id = calls[nth].call_id
    return next(e for e in events if isinstance(e, ev.ToolResult) and e.call_id == call_id)


def _one(events: list[ev.Event], kind: type[ev.Event]) -> Any:
    found = [e for e in events if isinstance(e, kind)]
    assert len(found) == 1, found
    return found[0]


def _kill_all(marker: str) -> None:
    for pid in processes_running(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_job_runs_while_the_worker_goes_on_and_job_wait_returns_its_output(
    tmp_path: Path, answer_task: Path, sandbox: list[str]
) -> None:
    job = "echo begun-A1; while [ ! -f go ]; do sleep 0.02; done; echo finished-A1; exit 3"
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("Train in the background.", job_start(job, "train")),
            turn("Meanwhile, answer.", call("bash", command="echo 42 > answer.txt")),
            turn("How is it doing?", call("job_status")),
            turn("Let it finish.", call("write_file", path="go", content="")),
            turn("", call("job_wait", job="train", timeout=60)),
            turn("", call("report", summary="answer.txt holds 42; train exited")),
        ],
    }
    events = _run(tmp_path, answer_task, script, *sandbox)
    started = _one(events, ev.JobStarted)
    ended = _one(events, ev.JobEnded)
    assert started.job == "job-1" and started.name == "train" and started.log == "jobs/job-1.log"
    # The worker's other calls ran while the job did: their times lie between its start
    # and its end.
    bash = _result_of(events, "bash")
    assert started.seq < bash.seq < ended.seq and started.ts < bash.ts < ended.ts
    assert "job-1 (train): running" in _result_of(events, "job_status").output
    # Each turn's status note names the running job.
    prompts = [
        e.prompt
        for e in events
        if isinstance(e, ev.StepStarted) and started.seq < e.seq < ended.seq
    ]
    assert any("Jobs running: job-1 (train) for" in p for p in prompts)
    waited = _result_of(events, "job_wait")
    assert waited.ok and "begun-A1" in waited.output and "finished-A1" in waited.output
    assert "exited with code 3" in waited.output
    assert ended.end == "exited" and ended.exit_code == 3
    log = (tmp_path / "runs" / "r" / "workspace" / "jobs" / "job-1.log").read_text()
    assert log == "begun-A1\nfinished-A1\n"
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


async def test_the_deadline_stops_a_job_before_the_submission_is_frozen(
    tmp_path: Path, answer_task: Path, sandbox: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Markers of its own per sandbox: the two cases may run at once (pytest-xdist).
    job, foreground = ("118.35", "119.85") if sandbox else ("118.25", "119.75")
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("job_start", command=f"sleep {job}")),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("Wait out the clock.", call("bash", command=f"sleep {foreground}", timeout=300)),
        ],
    }
    config: dict[str, Any] = {"breakpoints": [f"bash:sleep {foreground}"]}
    if sandbox:
        monkeypatch.setenv("DOCKER_HOST", docker_address() or "")
        config |= {"sandbox": "docker", "image": TEST_IMAGE}
    with ScriptedModelServer(script) as server:
        controller = _controller(server, answer_task, tmp_path, **config)
        # The deadline falls while the foreground command runs, however long the steps
        # before it took on a busy machine (a fixed 3 s limit once ran out before them).
        deadline_inside_the_held_call(controller)
        try:
            await controller.run(agent_for)
        finally:
            leftover = processes_running(job)
            _kill_all(job)
            _kill_all(foreground)
    events = read_events(controller.run_dir / "events.jsonl")
    assert not leftover
    ended = _one(events, ev.JobEnded)
    assert ended.end == "stopped" and ended.reason == "the time limit was reached"
    # Within 2 s of the run's end killing the foreground command, and before the
    # workspace's artifact was frozen for grading.
    killed = _result_of(events, "bash", 1)
    assert not killed.ok and ended.ts - killed.ts < 2.0
    submission = _one(events, ev.Submission)
    assert ended.seq < submission.seq and submission.by == "deadline"
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "deadline"


def test_jobs_at_once_are_bounded_and_submit_stops_them(tmp_path: Path, answer_task: Path) -> None:
    starts = [turn("", call("job_start", command=f"sleep 120.{i}7")) for i in range(5)]
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            *starts,
            turn("", call("job_stop", job="job-2")),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    try:
        events = _run(tmp_path, answer_task, script)
    finally:
        leftover = [pid for i in range(5) for pid in processes_running(f"120.{i}7")]
        for i in range(5):
            _kill_all(f"120.{i}7")
    assert not leftover
    refused = _result_of(events, "job_start", 4)
    assert not refused.ok and "the most at once is 4" in refused.output
    assert [e.job for e in events if isinstance(e, ev.JobStarted)] == [
        f"job-{i}" for i in range(1, 5)
    ]
    ended = {e.job: e for e in events if isinstance(e, ev.JobEnded)}
    assert ended["job-2"].reason == "stopped with job_stop"
    submission = _one(events, ev.Submission)
    for job in ("job-1", "job-3", "job-4"):
        assert ended[job].end == "stopped" and ended[job].reason == "the agent submitted"
        assert ended[job].seq < submission.seq
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


def _controller(
    server: ScriptedModelServer, task: Path, runs: Path, **config_fields: Any
) -> RunController:
    provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
    config = RunConfig(
        task="answer", model="openai/test", runs_dir=runs, run_id="p", **config_fields
    )
    controller = RunController(config, load_task(task), provider)
    controller.prepare()
    return controller


async def _until(condition: Any, what: str) -> None:
    """Wait for a condition on files or processes another process changes (nothing to await)."""
    async with asyncio.timeout(20):
        while not condition():  # noqa: ASYNC110 (no event to await: another process's state)
            await asyncio.sleep(0.01)


def _states(marker: str) -> set[str]:
    states = set()
    for pid in processes_running(marker):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            states.add(stat[stat.rfind(")") + 2])
    return states


async def test_a_pause_suspends_jobs_and_their_clocks(tmp_path: Path, answer_task: Path) -> None:
    # Each tick says when it was printed, so a tick printed while paused shows however
    # late the log's reader writes it down.
    job = 'while [ ! -f stop ]; do echo "tick-P7 $(date +%s.%N)"; sleep 0.02; done; echo done-P7'
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", job_start(job, "ticker")),
            turn("", call("job_wait", job="ticker", timeout=120)),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    with ScriptedModelServer(script) as server:
        controller = _controller(server, answer_task, tmp_path)
        log = controller.workspace / "jobs" / "job-1.log"
        paused: list[tuple[float, float]] = []

        async def pause_while_it_runs() -> None:
            await _until(lambda: log.exists() and "tick-P7" in log.read_text(), "output")
            controller.pause()
            await _until(lambda: _states("tick-P7") == {"T"}, "the job stopped")
            stopped = time.time()
            await asyncio.sleep(0.5)  # paused time, which the job's clock must leave out
            paused.append((stopped, time.time()))
            controller.resume()
            await _until(lambda: _states("tick-P7") - {"T"}, "the job going on")
            await _until(lambda: any(t > paused[0][1] for t in _ticks(log)), "a tick after it")
            (controller.workspace / "stop").touch()

        tasks: list[asyncio.Task[None]] = []

        def seen(event: ev.Event) -> None:
            if isinstance(event, ev.JobStarted):
                tasks.append(asyncio.ensure_future(pause_while_it_runs()))

        controller.subscribe(seen)
        try:
            await controller.run(agent_for)
            await asyncio.gather(*tasks)
        finally:
            _kill_all("tick-P7")
    events = read_events(controller.run_dir / "events.jsonl")
    # Nothing was printed while paused: running, it prints a line each 20 ms.
    ((stopped, resumed),) = paused
    assert not [t for t in _ticks(log) if stopped < t < resumed]
    started, ended = _one(events, ev.JobStarted), _one(events, ev.JobEnded)
    assert ended.end == "exited" and ended.exit_code == 0
    assert ended.duration_s <= (ended.ts - started.ts) - 0.45
    waited = _result_of(events, "job_wait")
    assert waited.ok and "done-P7" in waited.output
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


# A command that waits for the test's go-ahead (30 s at most): the kill may land before
# or while it runs, and the resumed run must not wait out a fixed sleep either way.
WAIT_R3 = "for i in $(seq 600); do [ -f go-R3 ] && break; sleep 0.05; done; echo waited-R3"


def _ticks(log: Path) -> list[float]:
    """When each of the ticker's lines was printed, by its own clock."""
    text = log.read_text() if log.exists() else ""
    whole = text[: text.rfind("\n") + 1]  # a line still being written is left out
    return [float(line.split()[1]) for line in whole.splitlines() if line.startswith("tick-P7 ")]


def test_resume_after_sigkill_reports_a_running_job_as_lost(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", job_start("echo begun-R3; sleep 121.5", "long")),
            turn("", call("bash", command=WAIT_R3)),
            turn("", call("job_status")),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    runs = tmp_path / "runs"
    events_file = runs / "r" / "events.jsonl"
    job_log = runs / "r" / "workspace" / "jobs" / "job-1.log"
    try:
        with ScriptedModelServer(script, turn_by_history=True) as server:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mlra", *_args(server, runs, answer_task)],
                cwd=tmp_path,
                env=_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                deadline = time.monotonic() + 60
                while proc.poll() is None and time.monotonic() < deadline:
                    # Polling files another process writes: there is nothing to await.
                    text = events_file.read_bytes() if events_file.exists() else b""
                    logged = job_log.read_bytes() if job_log.exists() else b""
                    if b"go-R3" in text and b"begun-R3" in logged:
                        break
                    time.sleep(0.005)
                proc.send_signal(signal.SIGKILL)
            finally:
                proc.wait()
            killed = read_events(events_file)
            assert any(isinstance(e, ev.JobStarted) for e in killed)
            (runs / "r" / "workspace" / "go-R3").touch()
            resumed = mlra_cli(["resume", str(runs / "r"), "--no-tui"], cwd=tmp_path, env=_env())
    finally:
        _kill_all("121.5")
        _kill_all("waited-R3")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    events = read_events(events_file)
    lost = _one(events, ev.JobEnded)
    resumed_at = _one(events, ev.RunResumed)
    assert lost.job == "job-1" and lost.end == "lost" and lost.seq > resumed_at.seq
    status = _result_of(events, "job_status")
    assert "job-1 (long): lost" in status.output and "jobs/job-1.log" in status.output
    assert "begun-R3" in job_log.read_text()  # the log is kept
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


class _Log:
    """A run's log and state for the job tools alone: the events, folded as the run folds them."""

    def __init__(self) -> None:
        self.events: list[ev.Event] = []
        self.records: dict[str, JobRecord] = {}
        self.changed = asyncio.Event()

    def emit(self, event: ev.Event) -> None:
        self.events.append(event)
        if isinstance(event, ev.JobStarted):
            self.records[event.job] = JobRecord(started=event)
        elif isinstance(event, ev.JobEnded):
            self.records[event.job].ended = event
        self.changed.set()


@pytest.mark.parametrize("isolation", ["none", "bwrap"])
async def test_the_job_tools_over_a_real_sandbox(tmp_path: Path, isolation: IsolationMode) -> None:
    sandbox = LocalSandbox(tmp_path, SandboxSpec(), isolation_mode=isolation)
    if isolation == "bwrap" and not sandbox.bwrap:
        pytest.skip("no bubblewrap here")
    await sandbox.start()
    log = _Log()
    jobs = JobManager(emit=log.emit, clock=time.monotonic, records=lambda: log.records)
    registry = ToolRegistry(job_tools(jobs))
    ctx = ToolContext(sandbox=sandbox, agent="worker", call_id="c1")
    first = "echo one-J5; while [ ! -f two ]; do sleep 0.02; done; echo two-J5; sleep 122.5"
    try:
        started = await registry.dispatch("job_start", {"command": first, "name": "a"}, ctx)
        assert started.ok and "job-1" in started.output and "jobs/job-1.log" in started.output
        await _until(lambda: "one-J5" in (tmp_path / "jobs" / "job-1.log").read_text(), "out")
        # Still running when the wait times out: what it printed so far, and its state.
        early = await registry.dispatch("job_wait", {"job": "a", "timeout": 0.1}, ctx)
        assert "one-J5" in early.output and "still running" in early.output
        (tmp_path / "two").touch()
        await _until(lambda: "two-J5" in (tmp_path / "jobs" / "job-1.log").read_text(), "out")
        later = await registry.dispatch("job_wait", {"job": "job-1", "timeout": 0.1}, ctx)
        assert "two-J5" in later.output and "one-J5" not in later.output  # only what is new
        second = await registry.dispatch("job_start", {"command": "exit 7"}, ctx)
        assert second.ok
        ended = await registry.dispatch("job_wait", {"job": "2", "timeout": 30}, ctx)
        assert "exited with code 7" in ended.output and ended.exit_code == 7
        everything = await registry.dispatch("job_status", {}, ctx)
        assert "job-1 (a): running" in everything.output and "job-2: exited" in everything.output
        assert "two-J5" in everything.output  # a running job's last lines
        stopped = await registry.dispatch("job_stop", {"job": "a"}, ctx)
        assert "stopped after" in stopped.output and "stopped with job_stop" in stopped.output
        assert not processes_running("122.5")
        unknown = await registry.dispatch("job_wait", {"job": "job-9"}, ctx)
        assert not unknown.ok and "no job 'job-9'" in unknown.output
        kinds = [
            (type(e).__name__, e.job)
            for e in log.events
            if isinstance(e, ev.JobStarted | ev.JobEnded)
        ]
        assert kinds == [
            ("JobStarted", "job-1"),
            ("JobStarted", "job-2"),
            ("JobEnded", "job-2"),
            ("JobEnded", "job-1"),
        ]
    finally:
        await jobs.stop_all("the test ended")
        await sandbox.close()
        _kill_all("122.5")


def test_a_progress_bar_that_never_ends_its_line_shows_its_last_redraw(tmp_path: Path) -> None:
    from mlra.tools.jobs import _Live

    fd = os.open(tmp_path / "job.log", os.O_WRONLY | os.O_CREAT)
    live = _Live(
        record=ev.JobStarted(job="job-1", command="train", log="l"), started_t=0, log_fd=fd
    )
    for i in range(1, 2001):
        live.feed(f"\rtraining {i / 20:.0f}% " + "█" * 200)
    assert live.tail()[-1].startswith("training 100% ")
    assert len(live.partial) <= 4000  # bounded, however long the line grows
    live.feed("\ndone\r\n")
    assert live.tail()[-2:] == ["training 100% " + "█" * 200, "done"]
    os.close(fd)
    assert (tmp_path / "job.log").stat().st_size > 400_000  # the log keeps every byte
