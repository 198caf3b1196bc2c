"""`--model demo`: the scripted agent a newcomer tries the console with, no key. The
provider is asked as a run asks it (its answers come from the request alone); a whole
demo run of tiny-lm is graded like any other (the slow suite)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from mlra.agent.providers import resolve_model
from mlra.agent.providers.base import Message, ModelResponse
from mlra.agent.providers.demo import DemoProvider
from mlra.agent.providers.demo_plan import task_refusal
from mlra.agent.setup.prompts import WORKER_SYSTEM
from mlra.console.cli.cli import main
from mlra.tasks.spec import find_task, load_task
from tests.conftest import mlra_cli
from tests.readme_runs import ReadmeRun

TINY = find_task("tiny-lm").render_prompt()


def ask(provider: DemoProvider, messages: list[Message]) -> ModelResponse:
    system = WORKER_SYSTEM.format(workdir="/w", research="")
    return asyncio.run(provider.generate(system=system, messages=messages, tools=[]))


def worker_until_bash(provider: DemoProvider, first: str) -> tuple[list[Message], ModelResponse]:
    """The worker's history up to its first `bash` call, each call answered "ok"."""
    messages = [Message(role="user", content=TINY), Message(role="user", content=first)]
    while True:
        answer = ask(provider, messages)
        (call,) = answer.tool_calls
        if call.name == "bash":
            return messages, answer
        messages.append(Message(role="assistant", content=answer.text, tool_calls=[call]))
        messages.append(Message(role="tool", content="ok", tool_call_id=call.id))


def test_the_demo_is_a_model_spec_with_no_key_and_costs_nothing() -> None:
    provider = resolve_model("demo", base_url=None, env={})
    assert isinstance(provider, DemoProvider)
    answer = ask(provider, [Message(role="user", content=TINY)])
    assert answer.usage.estimated and answer.cost_usd == 0.0
    assert [c.name for c in answer.tool_calls] == ["list_files"]


def test_the_worker_trains_with_the_runs_seed_and_reads_what_it_ran() -> None:
    provider = DemoProvider(7)
    messages, answer = worker_until_bash(provider, "Run the recipe.")
    command = answer.tool_calls[0].arguments or {}
    assert command["command"] == "python train.py --out submission --seed 7 --steps 100 --lr 3e-3"
    assert worker_until_bash(DemoProvider(7), "Run the recipe.")[1] == answer  # deterministic
    # An edited call ran something else: its result is what the next thought reads.
    messages.append(Message(role="assistant", content=answer.text, tool_calls=answer.tool_calls))
    result = "edited-ran\n[exit code 0, 0.1 s]"
    messages.append(Message(role="tool", content=result, tool_call_id=answer.tool_calls[0].id))
    messages.append(Message(role="user", content="[message from the user] use fewer steps"))
    checked = ask(provider, messages)
    assert checked.text.startswith("Noted: use fewer steps")
    assert "edited-ran" in checked.text
    assert checked.tool_calls[0].arguments == {"command": "ls -l submission"}


def test_each_attempt_of_a_search_changes_one_hyperparameter() -> None:
    commands = [
        (worker_until_bash(DemoProvider(0), f"[attempt a{n}] Draft.")[1].tool_calls[0].arguments)
        for n in (1, 2)
    ]
    assert commands[0] == {
        "command": "python train.py --out submission --seed 0 --steps 100 --lr 3e-3"
    }
    assert commands[1] == {
        "command": "python train.py --out submission --seed 0 --steps 100 --lr 5e-3"
    }


def test_a_search_the_model_would_steer_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = mlra_cli(["run", "tiny-lm", "--model", "demo", "--search", "llm"], cwd=tmp_path)
    assert proc.returncode == 2 and "use --search greedy with --model demo" in proc.stderr


@pytest.mark.parametrize("spec", ["demo:", " Demo ", "DEMO:with-words"])
def test_every_spelling_of_the_demo_is_refused_a_search_it_would_steer(
    tmp_path: Path, spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table says which models cannot choose a search's attempts: `demo:anything`
    is the demo model too (resolve_model reads it so), and was let through to a
    supervisor that answered no calls until the run's time ran out."""
    assert isinstance(resolve_model(spec, base_url=None, env={}), DemoProvider)
    argv = ["run", "tiny-lm", "--model", spec, "--search", "llm", "--no-tui"]
    assert main([*argv, "--runs-dir", str(tmp_path / "runs")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "the demo model plays a supervisor and a worker only" in line, line
    assert f"use --search greedy with --model {spec.strip()}" in line, line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("task", ["babylm", "folder"])
def test_a_task_the_demo_has_no_recipe_for_is_refused_in_one_line(
    tmp_path: Path, task: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo knows a built-in task by its prompt's title and follows its recipe: on an
    MLAgentBench folder it read the files, asked for a `submission` nothing wrote and
    ended with nothing submitted after four turns, as if mlra had failed on the task."""
    if task == "folder":
        folder = tmp_path / "benchmarks" / "four"
        for rel, text in {
            "env/train.py": "print(4)\n",
            "scripts/research_problem.txt": "Make the number smaller.",
            "scripts/eval.py": "def get_score(submission_folder='../env'):\n    return 4.0\n",
        }.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
        task = str(folder)
    runs = tmp_path / "runs"
    assert main(["run", task, "--model", "demo", "--no-tui", "--runs-dir", str(runs)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--model demo follows a built-in task's reference recipe" in line, line
    assert "(it knows classify-finetune, compress-budget, merge-models, tiny-lm)" in line, line
    advice = "give a real model" if task == "babylm" else "run its recipe with --model baseline"
    assert line.endswith(advice + (", or give a real model" if task != "babylm" else "")), line
    assert not runs.exists()
    batch = ["batch", "--tasks", f"tiny-lm,{task}", "--models", "demo", "--out", str(runs)]
    assert main(batch) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("mlra: batch: ") and "is not one it knows" in line, line
    assert not runs.exists()


def test_a_copy_of_a_built_in_task_is_one_the_demo_knows(tmp_path: Path) -> None:
    """The demo finds its task by the prompt's title, as a model reads it: a copy of
    tiny-lm's folder given by path is tiny-lm to it."""
    copy = shutil.copytree(find_task("tiny-lm").root, tmp_path / "my-tiny")
    assert task_refusal("demo", load_task(copy)) is None


@pytest.mark.slow
def test_a_headless_demo_run_of_tiny_lm_is_graded(
    readme_demo_run: ReadmeRun, tmp_path: Path
) -> None:
    """The README's `mlra run tiny-lm --model demo`, where no terminal is (made once for
    the session: tests/readme_runs.py): headless, graded, at no cost."""
    run = readme_demo_run.run_dir
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "finished" and result["score"] is not None
    assert result["cost_usd"] == 0.0
    shown = mlra_cli(["replay", str(run), "--no-tui"], cwd=tmp_path).stdout
    # The worker's calls, in its subtask (a worker's lines are not prefixed).
    assert "→ subtask 1 [1]" in shown and "list_files ." in shown
    assert "read_file train.py" in shown
    assert "$ python train.py --out submission --seed 0 --steps 100" in shown
    assert "supervisor submit submission" in shown
