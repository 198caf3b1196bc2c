"""A batch stopped while one of its runs waits in the queue (for the machine's CPUs,
a GPU or a Ray node), and the same command run again: the run's log heads the attempt
once, and a retry that never began is not counted as made.

Through the real command line: a batch of two runs of the scripted model with room for
one at a time (the batch's process is given one CPU), one run hanging in a long command
while the other waits for the CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from mlra.agent.record.eventlog import log_is_live
from tests.batch.naming import batch_run_id
from tests.batch.test_batch import (
    HANGING,
    MODEL,
    _hanging_tool_call,
    _wait_for,
    worker_writing,
)
from tests.conftest import SECRET_ENV, mlra_cli
from tests.fakes.model_server import ScriptedModelServer


def _one_cpu() -> None:
    """In the batch's process: one CPU, so its local pool holds one run (each asks for
    one) and queues the other; SIGINT as from a terminal."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_batch_killed_while_a_run_is_queued_heads_its_attempt_once(
    tmp_path: Path, answer_task: Path
) -> None:
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
