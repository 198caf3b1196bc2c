"""Attempts a batch queued that never began: stopped while one of its runs waits in the
queue (for the machine's CPUs, a GPU or a Ray node), the same command run again heads
the run's attempt once in its log; a retry refused before it began (its model server
down) is not counted as a retry in the batch's last line.

Through the real command line and real `mlra run` processes against the scripted model
server (or a port nothing answers at)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import log_is_live, read_events
from mlra.batch import runner as batch_runner
from mlra.batch.report_rows import collect, summarize
from mlra.console.cli.cli import main
from tests.batch.naming import batch_run_id
from tests.batch.test_batch import (
    HANGING,
    MODEL,
    _hanging_tool_call,
    _wait_for,
    worker_writing,
)
from tests.conftest import SECRET_ENV, mlra_cli
from tests.console.test_unreachable_server import _closed_port_url
from tests.fakes.model_server import ScriptedModelServer


def _one_cpu() -> None:
    """In the batch's process: one CPU, so its local pool holds one run (each asks for
    one) and queues the other; SIGINT as from a terminal."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_batch_killed_while_a_run_is_queued_heads_its_attempt_once(
    tmp_path: Path, answer_task: Path
) -> None:
    """Two runs with room for one at a time (the batch's process is given one CPU): one
    hangs in a long command while the other waits for the CPU, and the batch is killed."""
    (tmp_path / "answer_task").symlink_to(answer_task)
    out = tmp_path / "b"
    with ScriptedModelServer(HANGING) as server:
        args = ["batch", "--tasks", "answer_task", "--models", MODEL, "--seeds", "2"]
        args += ["--parallel", "2", "--out", str(out), "--base-url", server.url_for("openai")]  # type: ignore[list-item]
        args += ["--isolation", "none", "--no-tui"]
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        batch = subprocess.Popen(
            [sys.executable, "-m", "mlra", *args],
            cwd=tmp_path,
            env=env,
            preexec_fn=_one_cpu,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        runs = [out / "runs" / batch_run_id(out, MODEL, seed) for seed in (1, 2)]
        logs = {r: out / "logs" / f"{r.name}.log" for r in runs}

        def one_hangs_one_waits() -> bool:
            hanging = [r for r in runs if _hanging_tool_call(r)]
            waiting = [r for r in runs if not r.exists() and logs[r].is_file()]
            return len(hanging) == 1 and len(waiting) == 1

        try:
            _wait_for(one_hangs_one_waits, 90, "one run hanging and one queued")
        finally:
            batch.send_signal(signal.SIGKILL)
            batch.wait()
        (hung,) = [r for r in runs if r.exists()]
        (queued,) = [r for r in runs if not r.exists()]
        _wait_for(lambda: not log_is_live(hung / "events.jsonl"), 30, "the run to die")
        assert logs[queued].read_text().count("[mlra batch] attempt 1: start, queued ") == 1

        server.set_fallback("worker", worker_writing("42"))
        proc = mlra_cli(args, cwd=tmp_path, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "2/2 finished (0 already were; 1 resumed; 0 retries)" in proc.stdout

    lines = logs[queued].read_text().splitlines()
    headers = [line for line in lines if line.startswith("[mlra batch] attempt ")]
    assert len(headers) == 1 and headers[0].startswith("[mlra batch] attempt 1: start, queued ")
    assert lines[1].startswith("[mlra batch] queued again ") and lines[1].endswith(
        "UTC (the batch stopped before it began)"
    )
    # The run that was running: its first attempt, then its resume, each headed once.
    headers = [line for line in logs[hung].read_text().splitlines() if "] attempt " in line]
    assert [h.split(",")[0] for h in headers] == [
        "[mlra batch] attempt 1: start",
        "[mlra batch] attempt 2: resume",
    ]


def test_a_retry_refused_before_it_began_is_not_counted_as_one(
    tmp_path: Path,
    answer_task: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The first attempt fails (its provider refuses every call); the batch run again
    allows a second, which its model server, down by then, refuses before it begins.
    The last line said "1 retry" for it. (The waits for the server are shortened; the
    real `mlra run` refuses each try.)"""
    out = tmp_path / "b"
    args = ["batch", "--tasks", str(answer_task), "--models", MODEL, "--seeds", "1"]
    args += ["--out", str(out), "--isolation", "none", "--no-tui"]
    failing = {"supervisor:fallback": {"status": 400, "message": "bad request"}}
    with ScriptedModelServer(failing) as server:
        url = server.url_for("openai")  # type: ignore[arg-type]
        proc = mlra_cli([*args, "--base-url", url, "--max-attempts", "1"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "(failed, provider_error, 1 attempt)" in proc.stdout

    monkeypatch.setattr(batch_runner, "UNREACHABLE_WAIT_S", 0.1)
    monkeypatch.setattr(batch_runner, "UNREACHABLE_BUDGET_S", 0.2)
    for key in SECRET_ENV:
        monkeypatch.delenv(key, raising=False)
    down = _closed_port_url()
    assert main([*args, "--base-url", down, "--max-attempts", "2"]) == 1
    printed = capsys.readouterr().out
    run_id = batch_run_id(out, MODEL)
    assert f"not done: {run_id} (failed, server unreachable, 1 attempt)" in printed, printed
    last = printed.strip().splitlines()[-1]
    assert last.startswith("batch: 0/1 finished (0 already were; 0 retries)"), printed
    assert not (out / "runs" / run_id).exists()  # the retry never began
    (group,) = summarize(collect(out))
    assert group.retries == 0  # the report says as the last line does


def test_ctrl_c_while_a_run_is_queued_lets_the_running_one_record_its_stop(
    tmp_path: Path, answer_task: Path
) -> None:
    """One run hangs in a long command while the other waits for the CPU; Ctrl-C. The
    batch ended at once (gather gave up at the queued run's cancellation), the running
    run was killed with it before it recorded its stop, and the last line left it out:
    "1 not started or to retry; ... 0 ended before"."""
    (tmp_path / "answer_task").symlink_to(answer_task)
    out = tmp_path / "b"
    with ScriptedModelServer(HANGING) as server:
        args = ["batch", "--tasks", "answer_task", "--models", MODEL, "--seeds", "2"]
        args += ["--parallel", "2", "--out", str(out), "--base-url", server.url_for("openai")]  # type: ignore[list-item]
        args += ["--isolation", "none", "--no-tui"]
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        batch = subprocess.Popen(
            [sys.executable, "-m", "mlra", *args],
            cwd=tmp_path,
            env=env,
            preexec_fn=_one_cpu,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        runs = [out / "runs" / batch_run_id(out, MODEL, seed) for seed in (1, 2)]
        logs = {r: out / "logs" / f"{r.name}.log" for r in runs}
        try:
            _wait_for(
                lambda: (
                    any(_hanging_tool_call(r) for r in runs)
                    and any(not r.exists() and logs[r].is_file() for r in runs)
                ),
                90,
                "one run hanging and one queued",
            )
            batch.send_signal(signal.SIGINT)
            stdout, stderr = batch.communicate(timeout=120)  # each run has 30 s to stop
        finally:
            if batch.poll() is None:
                batch.kill()
                batch.wait()
    assert batch.returncode == 130, stdout + stderr
    last = stdout.strip().splitlines()[-1]
    assert last.startswith(
        "batch: stopped (Ctrl-C): 1 run stopped midway and 1 not started or to retry"
    ), stdout
    (hung,) = [r for r in runs if r.exists()]
    finished = [e for e in read_events(hung / "events.jsonl") if isinstance(e, ev.RunFinished)]
    assert [(e.status, e.reason) for e in finished] == [("stopped", "stopped")]


def _terminal_group() -> None:
    """In the batch's process: a process group of its own, as a shell gives a foreground
    job, so the test's Ctrl-C reaches the batch and its runs at once, as a terminal's does."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_terminals_ctrl_c_stops_a_batchs_run_without_evaluating_it(
    tmp_path: Path, answer_task: Path
) -> None:
    """The terminal's Ctrl-C reaches the runs too: each began "stopping; evaluating what the
    workspace holds" (the log said so, and the run started grading) until the batch's own
    stop came; the batch stops its runs without evaluating them."""
    (tmp_path / "answer_task").symlink_to(answer_task)
    out = tmp_path / "b"
    with ScriptedModelServer(HANGING) as server:
        args = ["batch", "--tasks", "answer_task", "--models", MODEL, "--seeds", "1"]
        args += ["--out", str(out), "--base-url", server.url_for("openai")]  # type: ignore[list-item]
        args += ["--isolation", "none", "--no-tui"]
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        batch = subprocess.Popen(
            [sys.executable, "-m", "mlra", *args],
            cwd=tmp_path,
            env=env,
            preexec_fn=_terminal_group,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        run = out / "runs" / batch_run_id(out, MODEL)
        try:
            _wait_for(lambda: _hanging_tool_call(run), 90, "the run's long command")
            os.killpg(batch.pid, signal.SIGINT)
            stdout, stderr = batch.communicate(timeout=120)
        finally:
            if batch.poll() is None:
                os.killpg(batch.pid, signal.SIGKILL)
                batch.wait()
    assert batch.returncode == 130, stdout + stderr
    assert "1 run stopped midway" in stdout.strip().splitlines()[-1], stdout
    printed = (out / "logs" / f"{run.name}.log").read_text()
    assert "evaluating what the workspace holds" not in printed, printed
    events = read_events(run / "events.jsonl")
    assert not [e for e in events if isinstance(e, ev.EvaluationStarted)]
    finished = [e for e in events if isinstance(e, ev.RunFinished)]
    assert [(e.status, e.reason) for e in finished] == [("stopped", "stopped")]
