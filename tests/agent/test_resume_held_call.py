"""Resume after SIGKILL of a call that was approved but never began (a pause held it).

The real command line: a baseline run held at a `--break bash` breakpoint, steered
with the real `mlra ctl` (pause, then approve), killed, then `mlra resume`. The log's
`tool_started` tells such a call from one the run stopped under: it runs on resume,
once, where it used to be reported "interrupted: it may have run in part".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.panes.transcript import TranscriptPane
from tests.conftest import ANSWER_TASK, SECRET_ENV, BaselineRun, mlra_cli, processes_running
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in SECRET_ENV}


def _wait_in_log(
    proc: subprocess.Popen[bytes], log: Path, what: str, found: Callable[[ev.Event], bool]
) -> None:
    """Poll the log another process writes until an event satisfies `found`."""
    deadline = time.monotonic() + 120
    while True:
        events = read_events(log) if log.exists() and log.stat().st_size else []
        if any(found(e) for e in events):
            return
        assert proc.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"the run never showed {what}"
        time.sleep(0.02)


@contextmanager
def _mlra(
    args: list[str], cwd: Path, env: dict[str, str], *, out: int = subprocess.DEVNULL
) -> Iterator[subprocess.Popen[bytes]]:
    """`mlra ARGS` as its own process, killed on the way out if it still runs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlra", *args],
        cwd=cwd,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT if out == subprocess.PIPE else subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def _end_all(marker: str) -> None:
    """Kills the process group of each process whose command line holds `marker`."""
    for pid in processes_running(marker):
        with suppress(OSError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)


def _breaking_at_assign_subtask(server: ScriptedModelServer, runs: Path) -> list[str]:
    """A supervised run `r` of the answer task held at the supervisor's assign_subtask."""
    args = ["run", str(ANSWER_TASK), "--model", "openai/test", "--no-tui"]
    args += ["--base-url", server.url_for("openai"), "--runs-dir", str(runs), "--run-id", "r"]
    return [*args, "--isolation", "none", "--break", "assign_subtask"]


def test_an_approved_call_a_pause_held_runs_on_resume(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_dir = runs / "r"
    log = run_dir / "events.jsonl"
    args = ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    args += ["--run-id", "r", "--isolation", "none", "--break", "bash"]

    def ctl(*words: str) -> None:
        done = mlra_cli(["ctl", str(run_dir), *words], cwd=tmp_path, env=_env())
        assert done.returncode == 0, done.stdout + done.stderr

    with _mlra(args, tmp_path, _env()) as proc:
        _wait_in_log(proc, log, "the call waiting", lambda e: isinstance(e, ev.ApprovalRequested))
        ctl("breakpoints")  # none: the resumed run does not ask again
        ctl("pause")
        ctl("approve")
        _wait_in_log(
            proc, log, "the approval", lambda e: isinstance(e, ev.Control) and e.action == "approve"
        )
        _kill(proc)
    killed = read_events(log)
    assert not any(isinstance(e, ev.ToolStarted | ev.ToolResult) for e in killed)

    with _mlra(["resume", str(run_dir), "--no-tui"], tmp_path, _env(), out=subprocess.PIPE) as proc:
        # Paused when killed, it is paused again once live, and says so.
        _wait_in_log(
            proc,
            log,
            "the pause again",
            lambda e: isinstance(e, ev.Control) and e.source == "resume",
        )
        ctl("resume")
        printed = (proc.communicate(timeout=120)[0] or b"").decode()
    assert proc.returncode == 0, printed
    assert "paused again, as it was when mlra stopped" in printed
    assert "may have run in part" not in printed
    assert "interrupted" not in printed
    events = read_events(log)
    (again,) = [e for e in events if isinstance(e, ev.RunResumed)]
    assert again.interrupted_calls == []
    (command,) = [e for e in events if isinstance(e, ev.ToolCall) and e.tool == "bash"]
    results = [e for e in events if isinstance(e, ev.ToolResult) and e.call_id == command.call_id]
    assert [(r.ok, r.error) for r in results] == [(True, None)]
    starts = [e.seq for e in events if isinstance(e, ev.ToolStarted)]
    assert again.seq < starts[0] < results[0].seq  # it began in the resumed part
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    assert json.loads((run_dir / "result.json").read_text())["score"] == 1.0

    # The console (live, attached or replayed: one transcript) shows the call where it
    # ran, below the "resumed here" line; its first place, with the approval, says so.
    pane = TranscriptPane()
    for event in events:
        pane.feed(event)
    shown = [entry.render_entry().plain for entry in pane._entries]
    resumed_at = next(i for i, line in enumerate(shown) if "resumed here" in line)
    calls = [i for i, line in enumerate(shown) if "$ " in line and "answer.txt" in line]
    assert len(calls) == 2 and calls[0] < resumed_at < calls[1], shown
    first, ran = shown[calls[0]], shown[calls[1]]
    assert "approved by ctl" in first and "see below, after the resume" in first
    assert "✓" in ran and "see below" not in ran


@pytest.mark.parametrize("decision", ["approve", "edit"])
def test_a_resume_through_a_decided_assign_subtask_goes_on_without_asking_again(
    tmp_path: Path, decision: str
) -> None:
    """`--break assign_subtask` (or `*`): the supervisor's call is run again while a resumed
    run catches up (it runs the worker), and is decided as the log says it was. Before,
    it waited for a decision nobody is asked for while catching up: the resume hung."""
    env = {**_env(), "OPENAI_API_KEY": "sk-test-not-a-secret"}
    marker = f"held-{uuid.uuid4().hex}"  # no other test session's
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            # Killed under this call; unconfined, it would outlive the killed mlra (and keep
            # its workspace's volume mounted past the test) but for its marker.
            turn("", call("bash", command=f"sleep 300; : {marker}")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    runs = tmp_path / "runs"
    run_dir = runs / "r"
    log = run_dir / "events.jsonl"
    with ScriptedModelServer(script, turn_by_history=True) as server:
        with _mlra(_breaking_at_assign_subtask(server, runs), tmp_path, env) as proc:
            _wait_in_log(
                proc, log, "the call waiting", lambda e: isinstance(e, ev.ApprovalRequested)
            )
            words = ["approve"]
            if decision == "edit":
                edited = {"step_id": "1", "instructions": "Write 42 into answer.txt."}
                words = ["edit", json.dumps(edited)]
            done = mlra_cli(["ctl", str(run_dir), *words], cwd=tmp_path, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
            _wait_in_log(
                proc,
                log,
                "the worker's long command",
                lambda e: isinstance(e, ev.ToolCall) and "sleep" in str(e.arguments),
            )
            # Killed under it, once begun: killed between its call and its start (a loaded
            # machine), the resume rightly runs it whole (300 s) and the test timed out.
            sleeping = next(
                e.call_id
                for e in read_events(log)
                if isinstance(e, ev.ToolCall) and "sleep" in str(e.arguments)
            )
            _wait_in_log(
                proc,
                log,
                "the long command begun",
                lambda e: isinstance(e, ev.ToolStarted) and e.call_id == sleeping,
            )
            _kill(proc)
            _end_all(marker)  # as a killed machine would: the resume settles its volume
        resumed = mlra_cli(["resume", str(run_dir), "--no-tui"], cwd=tmp_path, env=env, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    events = read_events(log)
    assert len([e for e in events if isinstance(e, ev.ApprovalRequested)]) == 1
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


def test_a_fork_with_paused_waits_where_it_goes_live_then_steps(
    answer_baseline_run: BaselineRun, tmp_path: Path
) -> None:
    """`mlra fork RUN --at STEP --paused`: to step through a run from a step, the fork
    pauses where it goes live, before the step's action; `mlra ctl RUN step` runs that."""
    env = _env()
    runs = answer_baseline_run.run_dir.parent
    args = ["fork", str(answer_baseline_run.run_dir), "--at", "2", "--run-id", "f"]
    log = runs / "f" / "events.jsonl"
    with _mlra([*args, "--paused", "--no-tui"], tmp_path, env, out=subprocess.PIPE) as proc:
        _wait_in_log(
            proc, log, "the pause", lambda e: isinstance(e, ev.Control) and e.source == "start"
        )
        events = read_events(log)
        forked = next(i for i, e in enumerate(events) if isinstance(e, ev.RunForked))
        assert not [e for e in events[forked:] if isinstance(e, ev.ToolCall)]  # nothing ran
        done = mlra_cli(["ctl", str(runs / "f"), "step"], cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "paused before the first action (--paused)" in out.decode()
    events = read_events(log)
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    # A fork of it not asked to pause runs freely, and says so: its `start_paused` is its
    # own, not the one its log's `run_started` copied from the run forked.
    again = ["fork", str(runs / "f"), "--at", "2", "--run-id", "g", "--no-tui"]
    done = mlra_cli(again, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    for fork, given in (("f", True), ("g", False)):  # the fork's line says what it was asked
        shown = mlra_cli(["replay", str(runs / fork), "--no-tui"], cwd=tmp_path, env=env).stdout
        (line,) = [line for line in shown.splitlines() if f"⑂ this is run {fork}," in line]
        assert ("given --paused" in line) is given, shown
    compared = mlra_cli(
        ["compare", str(answer_baseline_run.run_dir), str(runs / "f"), str(runs / "g"), "--json"],
        cwd=tmp_path,
        env=env,
    )
    rows = {r["name"]: r["cells"] for r in json.loads(compared.stdout)["rows"]}
    assert rows["start_paused"] == ["false", "true", "false"], rows


def test_a_fork_with_break_stops_at_the_rule_from_where_it_goes_live(
    answer_baseline_run: BaselineRun, tmp_path: Path
) -> None:
    """`mlra fork RUN --at STEP --break bash` (resume's too): to step through a run from a
    step at its calls, the rules hold from where the fork goes live, recorded there; a
    rule naming no tool of the run's agents is refused first, and no fork is made."""
    env = _env()
    runs = answer_baseline_run.run_dir.parent
    args = ["fork", str(answer_baseline_run.run_dir), "--at", "1", "--no-tui"]
    typo = mlra_cli([*args, "--run-id", "typo", "--break", "bsah"], cwd=tmp_path, env=env)
    assert typo.returncode == 2 and "(did you mean bash?)" in typo.stderr, typo.stderr
    assert not (runs / "typo").exists()
    log = runs / "f" / "events.jsonl"
    with _mlra([*args, "--run-id", "f", "--break", "bash"], tmp_path, env) as proc:
        _wait_in_log(proc, log, "the call waiting", lambda e: isinstance(e, ev.ApprovalRequested))
        done = mlra_cli(["ctl", str(runs / "f"), "approve"], cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert proc.wait(timeout=120) == 0
    events = read_events(log)
    forked = next(e.seq for e in events if isinstance(e, ev.RunForked))
    (rules,) = [e for e in events if isinstance(e, ev.Control) and e.action == "breakpoints"]
    (asked,) = [e for e in events if isinstance(e, ev.ApprovalRequested)]
    assert forked < rules.seq < asked.seq and rules.arguments == {"rules": ["bash"]}
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


def test_a_resume_asks_again_for_an_assign_subtask_left_waiting_at_its_breakpoint(
    tmp_path: Path,
) -> None:
    """Killed while the supervisor's `assign_subtask` waited at its breakpoint, undecided:
    the resumed run asks for the decision again in its own part of the log, as it does
    for any other call. Before, the call (run again while catching up) matched the old
    request and wrote none; `run_resumed` had cleared it, so no console showed a call
    waiting and `mlra ctl approve` found none, while the run waited for the decision."""
    env = {**_env(), "OPENAI_API_KEY": "sk-test-not-a-secret"}
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    runs = tmp_path / "runs"
    run_dir = runs / "r"
    log = run_dir / "events.jsonl"
    with ScriptedModelServer(script, turn_by_history=True) as server:
        with _mlra(_breaking_at_assign_subtask(server, runs), tmp_path, env) as first:
            _wait_in_log(
                first, log, "the call waiting", lambda e: isinstance(e, ev.ApprovalRequested)
            )
            _kill(first)
        with _mlra(["resume", str(run_dir), "--no-tui"], tmp_path, env) as resumed:
            _wait_in_log(resumed, log, "the resume", lambda e: isinstance(e, ev.RunResumed))
            went_live = next(e.seq for e in read_events(log) if isinstance(e, ev.RunResumed))
            _wait_in_log(
                resumed,
                log,
                "the call asked for again",
                lambda e: isinstance(e, ev.ApprovalRequested) and e.seq > went_live,
            )
            done = mlra_cli(["ctl", str(run_dir), "approve"], cwd=tmp_path, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
            assert resumed.wait(timeout=120) == 0
    events = read_events(log)
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


def test_an_assign_subtask_a_quit_closed_at_its_breakpoint_keeps_its_one_result(
    tmp_path: Path,
) -> None:
    """Quit (not killed) while the supervisor's `assign_subtask` waited at its breakpoint:
    the log closes the call "not run", and that stays its one result, the one the model
    reads on resume; the supervisor assigns the subtask again, a call of its own, asked
    for at its breakpoint. Before, the resumed run ran the closed call again (the tool
    runs the worker, so it is executed again on resume), asked for it, and wrote a second
    result for the same call id after the first."""
    env = {**_env(), "OPENAI_API_KEY": "sk-test-not-a-secret"}
    assign = call("assign_subtask", step_id="1", instructions="Write 42 into answer.txt.")
    supervisor = supervisor_answering()
    script = {
        "supervisor": [*supervisor[:2], turn("Again.", assign), *supervisor[2:]],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    runs = tmp_path / "runs"
    run_dir = runs / "r"
    log = run_dir / "events.jsonl"
    with ScriptedModelServer(script, turn_by_history=True) as server:
        with _mlra(_breaking_at_assign_subtask(server, runs), tmp_path, env) as first:
            _wait_in_log(
                first, log, "the call waiting", lambda e: isinstance(e, ev.ApprovalRequested)
            )
            done = mlra_cli(["ctl", str(run_dir), "quit"], cwd=tmp_path, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
            first.wait(timeout=60)
        (closed,) = [e for e in read_events(log) if isinstance(e, ev.ToolResult) and not e.ok]
        assert "[not run: the run ended (it was stopped) before it was approved]" in closed.output
        with _mlra(["resume", str(run_dir), "--no-tui"], tmp_path, env) as resumed:
            _wait_in_log(
                resumed,
                log,
                "the new call asked for",
                lambda e: isinstance(e, ev.ApprovalRequested) and e.call_id != closed.call_id,
            )
            done = mlra_cli(["ctl", str(run_dir), "approve"], cwd=tmp_path, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
            assert resumed.wait(timeout=120) == 0
        asked = server.requests_for("supervisor")[2].body["messages"]
    events = read_events(log)
    results = [e.call_id for e in events if isinstance(e, ev.ToolResult)]
    assert len(results) == len(set(results)), results  # one result a call
    (again,) = [e for e in events if isinstance(e, ev.RunResumed)]
    assert not [e for e in events[again.seq :] if getattr(e, "call_id", None) == closed.call_id]
    read = [m for m in asked if m.get("role") == "tool" and "before it was approved" in str(m)]
    assert len(read) == 1  # what the model read of it
    reports = [
        e for e in events if isinstance(e, ev.ToolResult) and e.tool == "assign_subtask" and e.ok
    ]
    assert len(reports) == 1 and "answer.txt holds 42" in reports[0].output
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    assert json.loads((run_dir / "result.json").read_text())["score"] == 1.0
