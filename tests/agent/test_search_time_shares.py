"""Time shares of attempts started side by side (agent/loop/attempts.py): a real greedy
search of the small `answer` task's recipe variants, two at a time."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.console.text.attempt_lines import attempt_started_line
from tests.agent.test_search import greedy_search, sleeping_variant_task


async def test_an_attempt_started_as_another_ended_is_raised_to_the_next_ones_share(
    tmp_path: Path, answer_task: Path
) -> None:
    """Four attempts, two at a time, in 120 s. a1 ends, a3 starts beside a2, still
    running, so two waves seem to come: a3 got half the time left. a2 ends a second
    later and a4 starts, the last wave: it got all the time left, twice a3's, though
    the two ran side by side. a3 is raised to a4's share, and its own run's deadline
    moves with it."""
    task = sleeping_variant_task(
        answer_task,
        tmp_path,
        '{ n = "41", s = "0" }',
        '[{ n = "42" }, { s = "1" }, { s = "4", n = "42" }, { n = "40" }]',
    )
    controller = greedy_search(task, tmp_path, 4, attempts_parallel=2, time_limit_s=120)
    a3_deadline: list[float] = []

    async def a3s_deadline_once_a4_started(controller: RunController) -> None:
        tree = controller.attempts.tree
        async with asyncio.timeout(120):
            while tree.get("a4") is None:  # noqa: ASYNC110 (the run's state)
                await asyncio.sleep(0.01)
        a3 = controller.attempts.child("a3")
        if a3 is not None:  # still sleeping: its run's own deadline
            a3_deadline.append(a3.clock.limit_s)

    side = asyncio.ensure_future(a3s_deadline_once_a4_started(controller))
    result = await controller.run(agent_for)
    await side
    events = read_events(controller.run_dir / "events.jsonl")
    started = {e.attempt: e for e in events if isinstance(e, ev.AttemptStarted)}
    a3, a4 = started["a3"], started["a4"]
    assert a3.time_limit_s < 65 and a4.time_limit_s > 100  # two waves to come, then one
    assert a4.raised == {"a3": a4.time_limit_s}
    assert a3_deadline == [a4.time_limit_s]
    assert "a3's raised to" in attempt_started_line(a4)
    assert controller.state.attempts.nodes["a3"].time_limit_s == a4.time_limit_s
    assert result.attempts is not None and result.attempts.tried == 4
