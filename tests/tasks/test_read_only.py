"""Read-only starter files in mlra's own format (issue 17): `[files] read_only` is
mounted read-only in bubblewrap (a write fails with the OS's error), refused by the
file tools, put back in the graded copy (so under `--isolation none`, where the
agent can write anything, a change still cannot move the score) and recorded so,
and shown by `mlra tasks NAME`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.cli.cli import main
from mlra.tasks.grading import grade
from mlra.tasks.spec import TaskSpec, load_task
from mlra.tools.sandbox.base import SandboxError, SandboxSpec, read_only_mounts
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.local import LocalSandbox
from mlra.tools.submission import artifact_digest, freeze
from tests.conftest import mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, turn

BWRAP_PROBLEM = isolation_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or "")

TASK_TOML = """
name = "read-only"
title = "Answer without touching the bonus"
[prompt]
task = "Write 42 into answer.txt and submit the workspace. bonus.txt and rules/ are read-only."
[files]
starter = ["starter"]
hidden = ["hidden"]
read_only = ["bonus.txt", "rules"]
[metric]
name = "points"
baseline = 0.0
top = 1.0
[evaluator]
kind = "script"
artifact = "."
timeout = "1m"
settings = { script = "hidden/check.py" }
[resources]
time_limit = "5m"
"""

CHECK_PY = """
import json, sys
from pathlib import Path
artifact, root, out = (Path(a) for a in sys.argv[1:4])
answer = (artifact / "answer.txt").read_text().strip() if (artifact / "answer.txt").exists() else ""
bonus = float((artifact / "bonus.txt").read_text())
out.write_text(json.dumps({"score": float(answer == "42") + bonus}))
"""


@pytest.fixture
def task(tmp_path: Path) -> TaskSpec:
    """A task whose score the agent could raise by writing its read-only bonus.txt."""
    folder = tmp_path / "task"
    (folder / "starter" / "rules").mkdir(parents=True)
    (folder / "starter" / "bonus.txt").write_text("0\n")
    (folder / "starter" / "rules" / "limits.txt").write_text("no more than 42\n")
    (folder / "hidden").mkdir()
    (folder / "hidden" / "check.py").write_text(CHECK_PY)
    (folder / "task.toml").write_text(TASK_TOML)
    return load_task(folder)


def _workspace(task: TaskSpec, tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    shutil.copytree(task.root / "starter", workspace)
    return workspace.resolve()


@needs_bwrap
async def test_bubblewrap_shows_read_only_files_read_only(task: TaskSpec, tmp_path: Path) -> None:
    workspace = _workspace(task, tmp_path)
    spec = SandboxSpec(read_only_files=task.read_only_originals())
    sb = LocalSandbox(workspace, spec, isolation_mode="bwrap")
    await sb.start()
    try:
        result = await sb.exec(["bash", "-c", "echo 5 > bonus.txt"], timeout=30)
        assert result.exit_code != 0 and "Read-only file system" in result.output
        result = await sb.exec(["bash", "-c", "echo x > rules/more.txt"], timeout=30)
        assert result.exit_code != 0 and "Read-only file system" in result.output
        result = await sb.exec(["bash", "-c", "cat bonus.txt; echo 42 > answer.txt"], timeout=30)
        assert result.exit_code == 0 and result.output.strip() == "0"
    finally:
        await sb.close()
    assert (workspace / "bonus.txt").read_text() == "0\n"
    assert not (workspace / "rules" / "more.txt").exists()
    assert (workspace / "answer.txt").read_text() == "42\n"


def test_a_workspace_that_holds_a_link_or_a_folder_there_gets_no_mount(
    task: TaskSpec, tmp_path: Path
) -> None:
    """A mount over the wrong kind would fail every command; grading restores anyway."""
    workspace = _workspace(task, tmp_path)
    originals = task.read_only_originals()
    assert read_only_mounts(workspace, originals) == [
        (str(originals["bonus.txt"].resolve()), "bonus.txt"),
        (str(originals["rules"].resolve()), "rules"),
    ]
    (workspace / "bonus.txt").unlink()
    (workspace / "bonus.txt").mkdir()
    shutil.rmtree(workspace / "rules")
    (workspace / "rules").symlink_to("/etc")
    assert read_only_mounts(workspace, originals) == []


async def test_the_file_tools_refuse_read_only_files_in_any_sandbox(
    task: TaskSpec, tmp_path: Path
) -> None:
    workspace = _workspace(task, tmp_path)
    sb = LocalSandbox(
        workspace, SandboxSpec(read_only_files=task.read_only_originals()), isolation_mode="none"
    )
    for path in ("bonus.txt", str(workspace / "bonus.txt"), "rules/limits.txt", "rules/new.txt"):
        with pytest.raises(SandboxError, match=r"is read-only: the task lets you read"):
            await sb.write_file(path, b"5\n")
    assert await sb.read_file("bonus.txt") == b"0\n"
    assert await sb.write_file("answer.txt", b"42\n") == "answer.txt"
    await sb.close()


def test_freezing_puts_the_originals_back_and_says_which(task: TaskSpec, tmp_path: Path) -> None:
    workspace = _workspace(task, tmp_path)
    untouched = freeze(workspace, ".", tmp_path / "a", originals=task.read_only_originals())
    assert untouched.restored == []
    (workspace / "bonus.txt").write_text("5\n")
    (workspace / "rules" / "more.txt").write_text("x")
    frozen = freeze(workspace, ".", tmp_path / "b", originals=task.read_only_originals())
    assert frozen.restored == ["bonus.txt", "rules"]
    assert (frozen.path / "bonus.txt").read_text() == "0\n"
    assert not (frozen.path / "rules" / "more.txt").exists()
    assert frozen.sha256 == untouched.sha256 == artifact_digest(frozen.path)[0]
    assert (workspace / "bonus.txt").read_text() == "5\n"  # the workspace is left as it is
    (workspace / "bonus.txt").unlink()
    (workspace / "rules").rename(workspace / "elsewhere")
    (workspace / "rules").write_text("a file where the folder was")
    gone = freeze(workspace, ".", tmp_path / "c", originals=task.read_only_originals())
    assert gone.restored == ["bonus.txt", "rules"]
    assert (gone.path / "rules" / "limits.txt").read_text() == "no more than 42\n"
    inside = freeze(workspace, "elsewhere", tmp_path / "d", originals=task.read_only_originals())
    assert inside.restored == []  # a copy of a read-only folder elsewhere is the agent's


async def test_grading_scores_the_original_and_records_the_restore(
    task: TaskSpec, tmp_path: Path
) -> None:
    workspace = _workspace(task, tmp_path)
    (workspace / "answer.txt").write_text("42\n")
    (workspace / "bonus.txt").write_text("5\n")
    _, finished = await grade(task, workspace, ".", tmp_path / "run" / "evaluation")
    assert finished.ok and finished.score == 1.0
    assert finished.restored_read_only == ["bonus.txt"]


def test_mlra_tasks_shows_the_read_only_files(
    task: TaskSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tasks", str(task.root)]) == 0
    out = capsys.readouterr().out
    assert "read-only:  bonus.txt, rules" in out
    assert "success:    gap_fraction: normalized >= 0.05" in out


def _script() -> dict[str, Any]:
    """The agent answers, then tries to raise its score through bonus.txt: with the
    shell, then with write_file."""
    return {
        "supervisor": [
            turn("Plan.", plan("Answer", "Submit")),
            turn("", call("assign_subtask", step_id="1", instructions="Answer, then cheat.")),
            turn("Done.", plan("Answer", "Submit", done=1)),
            turn("", call("submit", path=".", note="the workspace")),
        ],
        "worker": [
            turn("Answer.", call("bash", command="echo 42 > answer.txt")),
            turn("Cheat.", call("bash", command="echo 5 > bonus.txt; cat bonus.txt")),
            turn("Again.", call("write_file", path="bonus.txt", content="5\n")),
            turn("", call("report", summary="answered")),
        ],
    }


@pytest.mark.parametrize("isolation", [pytest.param("bwrap", marks=needs_bwrap), "none"])
def test_a_run_that_changes_a_read_only_file_is_graded_on_the_original(
    task: TaskSpec, tmp_path: Path, isolation: str
) -> None:
    with ScriptedModelServer(_script()) as server:
        proc = mlra_cli(
            [
                "run",
                str(task.root),
                "--model",
                "openai/test-model",
                "--base-url",
                server.url_for("openai"),
                "--no-tui",
                "--runs-dir",
                str(tmp_path / "runs"),
                "--isolation",
                isolation,
            ],
            cwd=tmp_path,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    events = read_events(run_dir / "events.jsonl")
    shell, write = [
        e for e in events if isinstance(e, ev.ToolResult) and e.tool in ("bash", "write_file")
    ][1:]
    assert not write.ok and "bonus.txt is read-only" in write.output
    finished = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert finished.score == 1.0
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score"] == 1.0
    if isolation == "bwrap":
        # The refusal (stderr) and the file's unchanged 0 (stdout) come through two
        # pipes: in either order.
        assert "Read-only file system" in shell.output and "0" in shell.output.splitlines()
        assert finished.restored_read_only == []
    else:  # unconfined, the write went through; the graded copy holds the original
        assert (run_dir / "workspace" / "bonus.txt").read_text() == "5\n"
        assert finished.restored_read_only == result["restored_read_only"] == ["bonus.txt"]
        assert any(isinstance(e, ev.Notice) and "read-only bonus.txt" in e.message for e in events)


@pytest.mark.parametrize("shadow", ["bytecode", "package"])
def test_nothing_imported_in_place_of_a_read_only_module_survives_freezing(
    tmp_path: Path, shadow: str
) -> None:
    """A grader that imports a read-only module from the submission gets the original:
    bytecode the agent compiled for it (an unchecked hash-based .pyc is used whatever the
    source says) and a package of its name (preferred to the source) are removed."""
    import py_compile
    import subprocess
    import sys

    folder = tmp_path / "task"
    (folder / "starter").mkdir(parents=True)
    (folder / "starter" / "scorer.py").write_text("VALUE = 1\n")
    (folder / "starter" / "bonus.txt").write_text("0\n")
    (folder / "hidden").mkdir()
    (folder / "hidden" / "check.py").write_text(CHECK_PY)
    (folder / "task.toml").write_text(TASK_TOML.replace('"rules"]', '"scorer.py"]'))
    task = load_task(folder)
    workspace = _workspace(task, tmp_path)
    forged = tmp_path / "forged.py"
    forged.write_text("VALUE = 99\n")
    if shadow == "bytecode":
        py_compile.compile(
            str(forged),
            cfile=str(workspace / "__pycache__" / f"scorer.{sys.implementation.cache_tag}.pyc"),
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
    else:
        (workspace / "scorer").mkdir()
        (workspace / "scorer" / "__init__.py").write_text("VALUE = 99\n")

    def imported(where: Path) -> str:
        return subprocess.run(
            [sys.executable, "-c", "import scorer; print(scorer.VALUE)"],
            cwd=where,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    assert imported(workspace) == "99"  # what the grader would have got
    frozen = freeze(workspace, ".", tmp_path / "frozen", originals=task.read_only_originals())
    assert imported(frozen.path) == "1"
    assert frozen.restored == [
        "scorer.py: "
        + (f"scorer.{sys.implementation.cache_tag}.pyc" if shadow == "bytecode" else "scorer")
    ]
