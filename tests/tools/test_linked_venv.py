"""A run started from a virtual environment reached through a link (`.venv` linking to a
folder elsewhere, as some tools and people set up): the sandbox shows the environment at
its real path, so the grader and the agent's `python` must be named by that path. The
grader failed to start ("prlimit: failed to execute .venv/bin/python") and the run ended
unscored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlra.tools.sandbox.bwrap import isolation_problem

BWRAP_PROBLEM = isolation_problem()
pytestmark = [
    pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or ""),
    pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the tests run outside a venv"),
]


def test_a_run_from_a_linked_venv_is_graded(tmp_path: Path, answer_task: Path) -> None:
    linked = tmp_path / "project" / ".venv"
    linked.parent.mkdir()
    linked.symlink_to(sys.prefix, target_is_directory=True)
    python = linked / "bin" / Path(sys.executable).name
    runs = tmp_path / "runs"
    argv = [str(python), "-m", "mlra", "run", str(answer_task), "--model", "baseline"]
    argv += ["--no-tui", "--isolation", "bwrap", "--runs-dir", str(runs)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = runs.glob("*/result.json")
    data = json.loads(result.read_text())
    assert data["status"] == "finished" and data["score"] == 1.0, done.stdout


def test_the_agents_python_is_the_linked_venvs(tmp_path: Path) -> None:
    """`python` on the sandbox's PATH is mlra's environment, reached through the link."""
    linked = tmp_path / ".venv"
    linked.symlink_to(sys.prefix, target_is_directory=True)
    python = linked / "bin" / Path(sys.executable).name
    probe = (
        "import sys; from mlra.tools.sandbox.env import shown_interpreter; "
        "print(shown_interpreter()); print(sys.prefix)"
    )
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True)
    shown, prefix = out.stdout.split()
    assert Path(shown).parent == Path(sys.prefix).resolve() / "bin"
    assert prefix == str(linked)  # the venv is still the venv, not its base Python
