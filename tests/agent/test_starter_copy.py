"""A run's workspace holds the task's starter files and nothing its installation added:
pip byte-compiles an installed task's `starter/train.py` into `starter/__pycache__/`,
and a run from the wheel showed the agent a `__pycache__/` it never made."""

from __future__ import annotations

import compileall
import os
import shutil
import time
from pathlib import Path

from mlra.agent.setup.run_setup import make_run_folder
from mlra.console.panes.files import label_for
from mlra.console.text.host_workspace import HostWorkspace
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


async def test_the_starter_files_are_dated_when_the_workspace_got_them(tmp_path: Path) -> None:
    """The Files pane showed an installed task's starter files at the wheel's install time
    (the copy kept the package's times): a time that meant nothing to the researcher."""
    task_dir = shutil.copytree(ANSWER_TASK, tmp_path / "answer")
    installed = time.mktime((2024, 1, 2, 3, 4, 5, 0, 0, -1))  # as a wheel left them
    for path in (task_dir / "starter").rglob("*"):
        os.utime(path, (installed, installed))
    before = time.time()
    workspace = tmp_path / "run" / "workspace"
    make_run_folder(workspace.parent, workspace, load_task(task_dir))
    listed = await HostWorkspace(workspace).list_tree()  # as the Files pane reads it
    files = [info for info in listed if not info.is_dir]
    assert [info.path for info in files] == ["question.txt"]
    for info in files:
        assert info.mtime >= before - 1, info  # the copy's time, not the install's
        assert "03:04:05" not in label_for(info).plain
        assert (workspace / info.path).read_bytes() == (
            task_dir / "starter" / info.path
        ).read_bytes()
