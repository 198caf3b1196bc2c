"""A run's workspace holds the task's starter files and nothing its installation added:
pip byte-compiles an installed task's `starter/train.py` into `starter/__pycache__/`,
and a run from the wheel showed the agent a `__pycache__/` it never made."""

from __future__ import annotations

import compileall
import shutil
from pathlib import Path

from mlra.agent.setup.run_setup import make_run_folder
from mlra.tasks.spec import load_task
from tests.conftest import ANSWER_TASK


def test_the_starters_byte_code_caches_stay_out_of_the_workspace(tmp_path: Path) -> None:
    task_dir = shutil.copytree(ANSWER_TASK, tmp_path / "answer")
    starter = task_dir / "starter"
    (starter / "lib").mkdir()
    (starter / "train.py").write_text("print('train')\n")
    (starter / "lib" / "util.py").write_text("X = 1\n")
    assert compileall.compile_dir(starter, quiet=1)  # as pip does at install
    assert (starter / "__pycache__").is_dir() and (starter / "lib" / "__pycache__").is_dir()

    workspace = tmp_path / "run" / "workspace"
    make_run_folder(workspace.parent, workspace, load_task(task_dir))

    held = sorted(p.relative_to(workspace).as_posix() for p in workspace.rglob("*"))
    assert held == ["lib", "lib/util.py", "question.txt", "train.py"]
