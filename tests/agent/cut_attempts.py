"""The setup of the tests of an attempt its own time limit ends (test_search_reserve.py,
test_search_inherited.py): the baseline's greedy search of the `answer` task, an
attempt's limit brought to half a second from now once it has begun its work (its
first command, or its artifact written), so it is cut at a known point of its recipe
and not by wall-clock luck."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.tasks.spec import TaskSpec, load_task
from tests.conftest import answer_task_as

CUT_S = 0.5
"""What is left of an attempt's limit once it is cut."""


def events_of(run_dir: Path) -> list[ev.Event]:
    """A run's (or an attempt's) log as it is now."""
    return read_events(run_dir / "events.jsonl")


def writes_then_works_on(answer_task: Path, tmp_path: Path, variants: str) -> TaskSpec:
    """The answer task whose recipe writes {n} into answer.txt and then works on for {s}
    seconds, as a training run that saved its model and is not done: 41 scores 0.0 on
    the validation split, 42 0.5."""
    task = answer_task_as(
        answer_task,
        tmp_path,
        "answer-long",
        (
            'submit = "answer.txt"',
            f'submit = "answer.txt"\nvars = {{ n = "41", s = "0" }}\nvariants = {variants}',
        ),
        ('python -c \\"print(6 * 7)\\" > answer.txt', "echo {n} > answer.txt; sleep {s}"),
    )
    return load_task(task)


def cut(controller: RunController, attempt: str) -> None:
    """The attempt's own limit brought to CUT_S from now."""
    child = controller.attempts.child(attempt)
    assert child is not None, attempt
    child.clock.limit_s = child.clock.elapsed() + CUT_S


async def cut_once(
    controller: RunController, attempt: str, logged: Callable[[ev.Event], bool]
) -> None:
    """Cuts the attempt once its log holds an event `logged` picks: its limit falls where
    the test needs it, however long a loaded machine took to get there."""
    async with asyncio.timeout(120):
        while (child := controller.attempts.child(attempt)) is None or not any(  # noqa: ASYNC110
            logged(e) for e in events_of(child.run_dir)
        ):
            await asyncio.sleep(0.05)
    cut(controller, attempt)


async def cut_once_it_runs(controller: RunController, attempt: str) -> None:
    """Cuts the attempt once its log holds its first tool call (its recipe started)."""
    await cut_once(controller, attempt, lambda e: isinstance(e, ev.ToolCall))


async def until_it_wrote(runs: Path, attempt: str, answer: str | None = None) -> None:
    """Returns once the attempt's workspace holds its answer.txt; `answer`: one that
    says that (a child's workspace holds its parent's answer from the moment it is
    copied, before the child runs)."""

    def written() -> bool:
        for path in runs.glob(f"*/attempts/{attempt}/workspace/answer.txt"):
            try:
                if answer is None or path.read_text().strip() == answer:
                    return True
            except OSError:
                continue
        return False

    async with asyncio.timeout(120):
        while not written():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
