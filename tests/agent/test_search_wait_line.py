"""An LLM supervisor's `attempt_wait` line says the wait it is: the tool waits an hour at
most and never past the run's deadline, but the line said the hour the model asked for
(`supervisor attempt_wait for a1, up to 60m` in a 90-second run). The bound comes from
the run's log (its time limit, the call's time), headless and in the console's
transcript alike. A scripted `--search llm` run on the small `answer` task."""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.text.headless import TranscriptDisplay
from mlra.durations import parse_duration
from mlra.tasks.spec import load_task
from tests.conftest import SECRET_ENV, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

LIMIT_S = 90.0


async def test_a_supervisors_wait_is_said_within_the_time_the_run_has_left(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42 into answer.txt")),
            turn("", call("attempt_wait", attempt="a1", timeout=3600)),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="wrote 42")),
        ],
    }
    config = RunConfig(
        task="answer",
        model="openai/test",
        runs_dir=tmp_path,
        isolation="none",
        search="llm",
        attempts=1,
        time_limit_s=LIMIT_S,
    )
    with ScriptedModelServer(script, turn_by_history=True) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        controller = RunController(config, load_task(answer_task), provider)
        result = await asyncio.wait_for(controller.run(agent_for), 120)
        await provider.aclose()
    assert result.reason == "submitted" and result.score == 1.0, result.message
    events = read_events(controller.run_dir / "events.jsonl")
    (wait,) = [e for e in events if isinstance(e, ev.ToolCall) and e.tool == "attempt_wait"]
    assert wait.agent == "supervisor" and wait.arguments == {"attempt": "a1", "timeout": 3600}
    left = round(LIMIT_S - wait.t)

    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False, heartbeat_s=None)
    for event in events:
        display.on_event(event)
    (said,) = re.findall(r"\] supervisor attempt_wait for a1, up to (\S+)", out.getvalue())
    assert parse_duration(said) == left <= LIMIT_S, out.getvalue()

    pane = TranscriptPane()
    for event in events:
        pane.feed(event)
    shown = [entry.render_entry().plain for entry in pane._entries]
    waits = [line for line in shown if "supervisor: attempt_wait" in line]
    assert waits and all(f"supervisor: attempt_wait for a1, up to {said}" in w for w in waits)
    assert "60m" not in out.getvalue() + "\n".join(shown), shown


def test_a_resumed_runs_wait_is_said_within_the_limit_it_recorded(
    tmp_path: Path, answer_task: Path
) -> None:
    """A run of 5 minutes is killed while its supervisor thinks, and `mlra resume` (no
    `--time-limit`) goes on with it: the resume writes no limit, and its printer, which
    sees only what comes after, knew none, so the hour the supervisor asked was said
    ("up to 60m") in a run with less than 5 minutes left. It folds the run's past now."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42 into answer.txt")),
            {"hold": "wait", **turn("", call("attempt_wait", attempt="a1", timeout=3600))},
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="wrote 42")),
        ],
    }
    runs = tmp_path / "runs"
    run_dir = runs / "r"
    log = run_dir / "events.jsonl"
    with ScriptedModelServer(script, turn_by_history=True) as server:
        args = [
            sys.executable, "-m", "mlra", "run", str(answer_task), "--model", "openai/test",
            "--base-url", server.url_for("openai"), "--no-tui", "--runs-dir", str(runs),
            "--run-id", "r", "--isolation", "none", "--search", "llm", "--attempts", "1",
            "--time-limit", "5m",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        env["OPENAI_API_KEY"] = "sk-test-not-a-secret"
        proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            # a1 ended, and the supervisor's next turn is held: nothing more can happen
            while not (
                len(server.requests_for("supervisor")) == 2
                and log.is_file()
                and any(isinstance(e, ev.AttemptFinished) for e in read_events(log))
            ):
                assert proc.poll() is None, "the run ended before it was killed"
                assert time.monotonic() < deadline, "a1 never ended"
                time.sleep(0.02)  # polling what another process writes: nothing to await
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait()
        server.release("wait")
        resumed = mlra_cli(["resume", str(run_dir), "--no-tui"], cwd=tmp_path, env=env)
    out = resumed.stdout
    assert resumed.returncode == 0, out + resumed.stderr
    events = read_events(log)
    (again,) = [e for e in events if isinstance(e, ev.RunResumed)]
    assert "time_limit_s" not in again.settings
    (wait,) = [e for e in events if isinstance(e, ev.ToolCall) and e.tool == "attempt_wait"]
    assert wait.seq > again.seq
    (said,) = re.findall(r"\] supervisor attempt_wait for a1, up to (\S+)", out)
    assert parse_duration(said) == round(300 - wait.t) < 300, out
