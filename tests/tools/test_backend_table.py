"""A sandbox backend added as docs/contributing.md's recipe says: its own module (this
file's `PlainBackend`) and one line of the table (set here by the test). Commands run
through it, `mlra run --sandbox NAME` starts a run on it, and a name the table does not
hold is refused in one line that names those it does."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.agent.setup.config import RunConfig
from mlra.agent.setup.sandboxes import create_sandbox
from mlra.console.cli.cli import main
from mlra.tasks.spec import load_task
from mlra.tools.sandbox.backends import BACKENDS, SandboxRequest
from mlra.tools.sandbox.base import Sandbox, SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from mlra.tools.sandbox.local_backend import LocalBackend


class PlainBackend(LocalBackend):
    """`--sandbox plain`: the local sandbox never confined (bubblewrap not even tried),
    so nothing is checked before the run."""

    name = "plain"

    def preflight(self, request: SandboxRequest) -> list[str]:
        return []

    def create(
        self, workspace: Path, spec: SandboxSpec, request: SandboxRequest, *, run_id: str
    ) -> Sandbox:
        return LocalSandbox(workspace, spec, isolation_mode="none")


@pytest.fixture
def plain(monkeypatch: pytest.MonkeyPatch) -> str:
    """The table's one new line."""
    monkeypatch.setitem(BACKENDS, "plain", f"{__name__}:PlainBackend")
    return "plain"


async def test_a_command_runs_through_a_backend_added_to_the_table(
    tmp_path: Path, answer_task: Path, plain: str
) -> None:
    task = load_task(answer_task)
    config = RunConfig(task=task.name, model="openai/test", sandbox=plain)
    sandbox = create_sandbox(tmp_path, SandboxSpec(), config=config, task=task, run_id="plain-1")
    await sandbox.start()
    try:
        done = await sandbox.exec(["sh", "-c", "echo made here > out.txt; cat out.txt"], timeout=30)
    finally:
        await sandbox.close()
    assert isinstance(sandbox, LocalSandbox) and sandbox.isolation == "none"
    assert done.exit_code == 0 and "made here" in done.output
    assert (tmp_path / "out.txt").read_text() == "made here\n"


def test_a_run_starts_on_a_backend_added_to_the_table(
    tmp_path: Path, answer_task: Path, plain: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    argv = ["run", str(answer_task), "--model", "baseline", "--sandbox", plain, "--no-tui"]
    code = main([*argv, "--runs-dir", str(runs)])
    out = capsys.readouterr().out
    assert code == 0, out
    (run_dir,) = runs.iterdir()
    events = read_events(run_dir / "events.jsonl")
    started = events[0]
    assert isinstance(started, ev.RunStarted) and started.sandbox.isolation == "none"
    assert started.config["sandbox"] == "plain"
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


def test_a_name_not_in_the_table_is_one_line_naming_those_in_it(
    tmp_path: Path, answer_task: Path, plain: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", str(answer_task), "--model", "baseline", "--sandbox", "nowhere"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--runs-dir", str(tmp_path / "runs")])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "invalid choice: 'nowhere'" in line
    assert all(f"'{name}'" in line for name in ("local", "docker", "plain"))
    assert not (tmp_path / "runs").exists()

    with pytest.raises(ValidationError) as refused:
        RunConfig(task="answer", model="baseline", sandbox="nowhere")
    # As pydantic words a value outside a Literal, the table's names in it.
    assert "Input should be 'local', 'docker' or 'plain'" in str(refused.value)
