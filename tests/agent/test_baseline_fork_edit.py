"""A baseline run's step can be edited, as the console's `e` at a breakpoint edits it:
`mlra fork RUN --at N --edit-action` runs the recipe step's call with the user's
arguments, and the recipe goes on after it. The words say what the baseline does: its
recipe had the call (no model asked for it), and a fork runs the recipe on from there."""

from __future__ import annotations

import json
from pathlib import Path

from mlra.console.apps.replay_app import ReplayApp
from mlra.console.screens.screens import ConfirmScreen
from mlra.console.text.replay import ReplayModel
from tests.conftest import ANSWER_TASK, mlra_cli


def _baseline_run(tmp_path: Path) -> Path:
    args = ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--isolation", "none"]
    proc = mlra_cli([*args, "--run-id", "src"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp_path / "runs" / "src"


def test_a_fork_of_a_baseline_run_runs_the_edited_step_then_the_rest_of_the_recipe(
    tmp_path: Path,
) -> None:
    source = _baseline_run(tmp_path)
    edit = '{"command": "echo 41 > answer.txt"}'
    fork = ["fork", str(source), "--at", "1", "--edit-action", edit, "--no-tui"]
    proc = mlra_cli([*fork, "--run-id", "f1"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "runs" / "f1" / "result.json").read_text())
    assert result["status"] == "finished" and result["score"] == 0.0  # 41: graded wrong
    shown = mlra_cli(["replay", str(tmp_path / "runs" / "f1"), "--no-tui"], cwd=tmp_path).stdout
    assert "the step's action edited: $ echo 41 > answer.txt" in shown, shown
    assert "$ echo 41 > answer.txt\n" in shown and "[The user edited this call" in shown, shown
    assert "The recipe's step had: bash(" in shown and "You had asked" not in shown, shown
    assert "submitted answer.txt" in shown  # the recipe went on: its submit step


def test_a_baseline_fork_keeps_the_recipe_steps_tool(tmp_path: Path) -> None:
    source = _baseline_run(tmp_path)
    edit = '{"tool": "python", "arguments": {"code": "print(41)"}}'
    fork = ["fork", str(source), "--at", "1", "--edit-action", edit, "--no-tui"]
    proc = mlra_cli([*fork, "--run-id", "f2"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        "mlra: --edit-action: the baseline's step runs bash, from its recipe; an edit gives "
        "it other arguments, not another tool (python)"
    )
    assert not (tmp_path / "runs" / "f2").exists()


async def test_the_replays_fork_dialog_says_the_baseline_runs_its_recipe(tmp_path: Path) -> None:
    source = _baseline_run(tmp_path)
    app = ReplayApp(ReplayModel.open(source), at_step=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("f")
        assert isinstance(app.screen, ConfirmScreen)
        assert "(the baseline agent runs its recipe on from that step)" in app.screen.detail
        assert "model" not in app.screen.detail
        await pilot.press("n")
