"""A batch sent SIGTERM (a scheduler ending the job, `timeout`) stops as Ctrl-C stops it:
its runs record their stop, and it says what it leaves, with the report so far.

It died outright, saying nothing; where it had started a local Ray, Ray's own handler
made it exit 15, its runs killed with their workers instead of told to stop.
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
from pathlib import Path

import pytest

from mlra.batch.state import run_status
from tests.batch.naming import batch_run_id
from tests.batch.test_batch import (
    HANGING,
    MODEL,
    _hanging_batch,
    _hanging_tool_call,
    _wait_for,
    task_link,  # noqa: F401  # a fixture
)
from tests.fakes.model_server import ScriptedModelServer

RAY = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")


@pytest.mark.usefixtures("task_link")
@pytest.mark.parametrize("executor", ["local", pytest.param("ray", marks=[pytest.mark.slow, RAY])])
def test_sigterm_stops_the_batch_as_ctrl_c_does(tmp_path: Path, executor: str) -> None:
    out = tmp_path / "b"
    with ScriptedModelServer(HANGING) as server:
        # Two seeds, one run at a time: the model's second run still waits for its turn
        # when the first is stopped midway (its driver ends at once).
        batch = _hanging_batch(
            tmp_path, server, "--parallel", "1", "--executor", executor, "--seeds", "2",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        llm_run = out / "runs" / batch_run_id(out, MODEL)
        try:
            _wait_for(lambda: _hanging_tool_call(llm_run), 120, "the model run's long command")
            batch.send_signal(signal.SIGTERM)
            stdout, stderr = batch.communicate(timeout=120)  # each run has 30 s to stop
        finally:
            if batch.poll() is None:
                batch.kill()
                batch.wait()
    assert batch.returncode == 128 + signal.SIGTERM, stdout + stderr
    last = stdout.strip().splitlines()[-1]
    assert last.startswith(
        "batch: stopped (SIGTERM): 1 run stopped midway and 1 not started or to retry"
    ), stdout + stderr
    assert "the same command carries them on" in last and (out / "report.md").is_file()
    assert run_status(out, llm_run.name).kind == "interrupted"
    log = (out / "logs" / f"{llm_run.name}.log").read_text()
    assert "stopped by the user" in log, log  # it recorded its stop, not killed mid-way
