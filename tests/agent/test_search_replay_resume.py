"""A replayed search resumed in the middle of an attempt: the attempt goes on under the
limit its recording had, as a fresh attempt of the replay begins under it (its prompts
state it). It took the limit the replay's own search tree gave it, which a replay's
timing makes another than the recording's, and its sandbox was made outside the run's
group. A scripted search on the small `answer` task, recorded; the attempt's run is
taken up as the replay's search takes up one it finds running.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import cast

from mlra import events as ev
from mlra.agent.agents.attempt_runs import _child
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.tasks.spec import load_task
from mlra.tools.sandbox.run_group import RunGroup
from tests.agent.raised_search import raising_script, run_scripted, search_config


async def test_a_resumed_attempt_of_a_replay_runs_under_its_recorded_limit(
    tmp_path: Path, answer_task: Path
) -> None:
    result, recorded = await run_scripted(
        tmp_path / "rec", answer_task, raising_script("echo 42 > answer.txt")
    )
    assert result.reason == "submitted", result.message
    a1 = read_events(recorded.run_dir / "attempts" / "a1" / "events.jsonl")
    run_started = next(e for e in a1 if isinstance(e, ev.RunStarted))
    limit = run_started.limits.time_limit_s

    # The replay's a1, killed as it ran: its log up to its first tool result.
    folder = tmp_path / "replay" / "search" / "attempts" / "a1"
    shutil.copytree(recorded.run_dir / "attempts" / "a1", folder)
    log = folder / "events.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    cut = next(i for i, e in enumerate(a1) if isinstance(e, ev.ToolResult))
    log.write_bytes(b"".join(lines[: cut + 1]))
    (folder / "result.json").unlink(missing_ok=True)

    replay = ReplayProvider.from_spec(f"replay:{recorded.run_dir}")
    parent = RunController(
        search_config(tmp_path / "replay", f"replay:{recorded.run_dir}"),
        load_task(answer_task),
        replay,
    )
    group = cast(RunGroup, object())  # the run's cgroup, as a token
    parent.run_group = group
    # As this replay's search gave it: another limit than its recording's.
    started = next(
        e
        for e in read_events(recorded.run_dir / "events.jsonl")
        if isinstance(e, ev.AttemptStarted)
    )
    started = started.model_copy(update={"time_limit_s": limit + 100})
    child, _ = _child(parent, started, folder, True)
    assert child is not None
    try:
        assert child.time_limit_s == limit
        assert child.run_group is group
    finally:
        if child.log is not None:
            child.log.close()
