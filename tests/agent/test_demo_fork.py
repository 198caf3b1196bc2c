"""`mlra fork` and `mlra resume` going on with `--model demo` (switched to or kept): a
task the demo has no recipe for is refused as `mlra run` refuses it, in one line with
exit status 2, before anything is written. They went on with a demo that read the files,
asked for a `submission` nothing wrote and ended "no_tool_calls", as if mlra had failed.

The source is a real demo run (two steps, no training) of a copy of tiny-lm, which the
demo knows by its title; retitled afterwards, the copy is a task the demo does not know.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, read_events
from mlra.tasks.spec import find_task
from mlra.tools.sandbox import bwrap as bw
from tests.conftest import mlra_cli

pytestmark = pytest.mark.skipif(bw.find_bwrap() is None, reason="needs bubblewrap")

REFUSED = "--model demo follows a built-in task's reference recipe, and my-tiny is not one"


def demo_run(tmp_path: Path) -> tuple[Path, Path]:
    """A finished two-step demo run of a copy of tiny-lm: (the run, the task copy)."""
    copy = Path(shutil.copytree(find_task("tiny-lm").root, tmp_path / "my-tiny"))
    runs = tmp_path / "runs"
    argv = ["run", str(copy), "--model", "demo", "--no-tui", "--max-steps", "2"]
    proc = mlra_cli([*argv, "--runs-dir", str(runs), "--run-id", "src"], cwd=tmp_path)
    assert (runs / "src" / EVENTS_FILE).is_file(), proc.stdout + proc.stderr
    return runs / "src", copy


def retitled(task: Path) -> None:
    """The copy named and its prompt titled as no built-in task is: the demo no longer
    knows it."""
    toml = task / "task.toml"
    text = toml.read_text().replace(find_task("tiny-lm").title, "My own tiny language model")
    toml.write_text(text.replace('name = "tiny-lm"', 'name = "my-tiny"', 1))


@pytest.mark.parametrize(
    "argv",
    [
        ["fork", "--at", "2", "--model", "demo", "--run-id", "f"],
        ["fork", "--at", "2", "--run-id", "f"],  # the run's own model: demo
        ["resume", "--model", "demo"],
        ["resume"],
    ],
)
def test_going_on_with_the_demo_on_a_task_it_does_not_know_is_refused(
    tmp_path: Path, argv: list[str]
) -> None:
    run, task = demo_run(tmp_path)
    retitled(task)
    before = (run / EVENTS_FILE).read_bytes()
    verb, *flags = argv
    proc = mlra_cli([verb, str(run), *flags, "--no-tui", "--max-steps", "6"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert REFUSED in line, line
    new_run = "mlra run my-tiny --model baseline"  # the folder, from here; not a fork: refused
    assert line.endswith(f"give a real model (--model NAME), or start a new run: {new_run}"), line
    assert (run / EVENTS_FILE).read_bytes() == before  # the run untouched
    assert not (run.parent / "f").exists()  # no fork made


def test_a_task_the_demo_knows_still_forks_with_the_demo(tmp_path: Path) -> None:
    run, _ = demo_run(tmp_path)
    argv = ["fork", str(run), "--at", "2", "--model", "demo", "--run-id", "f", "--no-tui"]
    proc = mlra_cli([*argv, "--max-steps", "3"], cwd=tmp_path)
    assert "reference recipe" not in proc.stderr, proc.stderr
    events = read_events(run.parent / "f" / EVENTS_FILE)
    assert any(isinstance(e, ev.RunForked) for e in events)
    assert isinstance(events[-1], ev.RunFinished), events[-1]
    assert "forked src at step 2 into f" in proc.stdout, proc.stdout
