"""The suite run as a shell's background job (`.ci/run &`, `nohup .ci/run &`): pytest and
its xdist workers start with SIGINT ignored, and the processes the tests start got it
ignored too, so a test that stops `mlra batch` with Ctrl-C and expects exit 130 saw it
run on to its end (tests/conftest.py takes the terminal's SIGINT back).

A real pytest (one xdist worker) of one probe test, with this suite's conftest, started
with SIGINT ignored as a background job is; the probe starts a child and reads its
SIGINT. No test of the suite left SIGINT ignored or blocked for the next (checked test
by test over tests/agent, batch, console, tools and tasks); the conftest now fails one
that would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import signal, subprocess, sys

def test_a_child_gets_the_terminals_ctrl_c():
    said = subprocess.run(
        [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT))"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "default_int_handler" in said, said
"""


def _as_a_background_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_suite_started_as_a_background_job_starts_children_with_ctrl_c(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-o", "addopts=", "-n", "1",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_as_a_background_job,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
