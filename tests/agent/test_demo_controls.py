"""`--model demo` under the console's controls, as a newcomer tries them on tiny-lm: a
rejected training call runs again with the change its message asks for, a failed edit
runs the recipe again, and the run still ends submitted; the worker reports the call
that ran, the user's edit included; the supervisor submits only an artifact it has seen.

A real run (the demo provider, the real tool registry, breakpoints and log, no sandbox),
driven by the controls' own methods, as `mlra ctl` and the console's keys drive it. The
training itself is the slow suite's: the retried call is edited to a quick stand-in."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import demo, resolve_model
from mlra.agent.providers.base import Message
from mlra.agent.providers.demo_plan import asked_in
from mlra.agent.providers.result_notes import INTERRUPTED_OUTPUT, RUN_ENDED_UNDER
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import find_task
from tests.agent.test_demo_model import ask, worker_until_bash
from tests.console.test_console_controls import Watch, is_

RECIPE = "python train.py --out submission --seed 0 --steps {steps} --lr 3e-3"
QUICK = "mkdir -p submission && echo 'step 40/40' && echo 'saved to submission'"
"""What the retried training call is edited to: the test is about the agent, not torch."""


@pytest.fixture
def quick_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "THINK_S", 0.0)


def _demo_run(tmp_path: Path) -> tuple[RunController, Watch]:
    cfg = RunConfig(
        task="tiny-lm",
        model="demo",
        runs_dir=tmp_path,
        isolation="none",
        breakpoints=["bash:train.py"],
        ungraded="a test of the demo's turns",
    )
    controller = RunController(
        cfg, find_task("tiny-lm"), resolve_model("demo", base_url=None, env={})
    )
    controller.prepare()
    return controller, Watch(controller)


async def _held(watch: Watch, after: int = 0) -> ev.ApprovalRequested:
    held = await watch.wait(is_(ev.ApprovalRequested), after=after, timeout=60)
    assert isinstance(held, ev.ApprovalRequested)
    return held


def _ending(watch: Watch) -> ev.RunFinished:
    (finished,) = [e for e in watch.events if isinstance(e, ev.RunFinished)]
    return finished


def _calls(watch: Watch, tool: str) -> list[ev.ToolCall]:
    return [e for e in watch.events if isinstance(e, ev.ToolCall) and e.tool == tool]


@pytest.mark.usefixtures("quick_turns")
async def test_a_rejected_training_call_runs_again_as_asked_and_the_run_is_submitted(
    tmp_path: Path,
) -> None:
    controller, watch = _demo_run(tmp_path)
    running = asyncio.create_task(controller.run(agent_for))
    first = await _held(watch)
    assert first.arguments == {"command": RECIPE.format(steps=100)}
    assert controller.reject(first.call_id, "use --steps 40 instead")
    again = await _held(watch, after=first.seq)
    assert again.arguments == {"command": RECIPE.format(steps=40)}
    assert controller.edit(again.call_id, {"command": QUICK})
    await asyncio.wait_for(running, 120)
    assert _ending(watch).reason == "submitted"
    (submitted,) = _calls(watch, "submit")
    assert submitted.agent == "supervisor" and submitted.arguments == {
        "path": "submission",
        "note": "the demo's recipe run",
    }
    # The supervisor looked for the artifact before it submitted it.
    (looked,) = _calls(watch, "list_files")[-1:]
    assert looked.agent == "supervisor" and looked.seq < submitted.seq


@pytest.mark.usefixtures("quick_turns")
async def test_a_failed_edit_runs_the_recipe_again_and_the_report_names_what_ran(
    tmp_path: Path,
) -> None:
    controller, watch = _demo_run(tmp_path)
    running = asyncio.create_task(controller.run(agent_for))
    first = await _held(watch)
    bad = "echo \"train.py: error: argument --lr: invalid float value: 'notanumber'\" >&2; exit 2"
    assert controller.edit(first.call_id, {"command": bad})
    again = await _held(watch, after=first.seq)
    assert again.arguments == {"command": RECIPE.format(steps=100)}  # the recipe's own
    assert controller.edit(again.call_id, {"command": QUICK})
    await asyncio.wait_for(running, 120)
    assert _ending(watch).reason == "submitted"
    (report,) = _calls(watch, "report")
    summary = str((report.arguments or {})["summary"])
    # What ran, as the user edited it: not the recipe's `--steps 100` it was asked as.
    assert summary.startswith(f"Ran `{QUICK}` (as the user edited it)"), summary
    assert "--steps 100" not in summary
    told = [e.text for e in watch.events if isinstance(e, ev.SupervisorMessage)]
    assert any(f"Ran `{QUICK}`" in text for text in told), told


@pytest.mark.usefixtures("quick_turns")
async def test_the_supervisor_never_submits_an_artifact_that_is_not_there(
    tmp_path: Path,
) -> None:
    """Every training call rejected, with no change the demo can apply: it tries each
    subtask's call a few times, reports, hands the step over once more, then stops."""
    controller, watch = _demo_run(tmp_path)
    running = asyncio.create_task(controller.run(agent_for))
    seen = 0
    while not running.done():
        held = asyncio.ensure_future(_held(watch, after=seen))
        await asyncio.wait({held, running}, return_when=asyncio.FIRST_COMPLETED)
        if not held.done():
            held.cancel()
            break
        request = held.result()
        assert request.arguments == {"command": RECIPE.format(steps=100)}  # as it was
        assert controller.reject(request.call_id, "not now")
        seen = request.seq
    await running
    assert not _calls(watch, "submit")
    assert len(_calls(watch, "assign_subtask")) == 2
    assert len([e for e in watch.events if isinstance(e, ev.ApprovalRequested)]) == 6
    told = [e.text for e in watch.events if isinstance(e, ev.SupervisorMessage)]
    assert "`submission` is still not there after 2 subtasks" in told[-1]
    assert _ending(watch).reason == "no_tool_calls"


@pytest.mark.parametrize(
    "cut",
    [
        f"tokenizer: 2048 tokens\n{INTERRUPTED_OUTPUT}",  # killed: the resume's note
        "step 30/100 loss 3.1\n[killed after 12.0 s: the run ended (it was stopped)"
        + RUN_ENDED_UNDER,  # a stop: the call's own result, recorded as it was killed
    ],
)
def test_a_call_a_stopped_run_left_unfinished_runs_again_as_it_ran(cut: str) -> None:
    """What `mlra resume` hands the worker for its training call the kill, or a stop,
    cut short (a stop's was read as a failure: it reported instead)."""
    provider = demo.DemoProvider(0)
    messages, answer = worker_until_bash(provider, "[subtask 1] Run the recipe.")
    (training,) = answer.tool_calls
    messages.append(Message(role="assistant", content=answer.text, tool_calls=[training]))
    messages.append(Message(role="tool", content=cut, tool_call_id=training.id, is_error=True))
    again = ask(provider, messages)
    assert "may have run only in part" in again.text
    assert [c.arguments for c in again.tool_calls] == [training.arguments]


def test_a_message_from_the_user_naming_a_flag_changes_the_training_call() -> None:
    first = "[subtask 1] Run the recipe.\n\n[message from the user] please use 50 steps"
    _, answer = worker_until_bash(demo.DemoProvider(0), first)
    assert answer.text.startswith("train.py takes everything as a flag. A short run first: 50")
    assert [c.arguments for c in answer.tool_calls] == [{"command": RECIPE.format(steps=50)}]


@pytest.mark.parametrize(
    ("said", "steps"),
    [
        ("take 3 steps back and use --steps 40", "40"),
        ("use 40 steps instead of 100 steps", "40"),
        ("--steps 40 (not --steps 100)", "40"),
        ("set --steps to 40", None),  # no number where the flag's goes
        ("--steps $(id)", None),  # nothing but a number goes into the command
        ("--steps 40&&rm -rf .", None),
        ("see runs/40 steps", None),  # a number in a path
    ],
)
def test_only_a_number_the_user_gives_a_numeric_flag_changes_the_command(
    said: str, steps: str | None
) -> None:
    """`set --steps to 40` made the command `--steps to`, and `--steps $(id)` put the
    user's text into the shell; `take 3 steps back and use --steps 40` ran 3 steps."""
    asked = asked_in([said], RECIPE.format(steps=100))
    assert asked.get("--steps") == steps
    assert "--out" not in asked
