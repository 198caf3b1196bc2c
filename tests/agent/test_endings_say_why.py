"""A run that ends unscored says why in its own words: a supervisor whose submit failed
is not said never to have called it, and a replay whose prompt changed names what
differs (and a batch does not try it again). Runs through the real OpenAI SDK against
the scripted model server."""

from __future__ import annotations

from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.batch.state import RUNS, run_status
from mlra.tasks.spec import load_task
from tests.agent.test_model_server_faults import _run
from tests.scripts import call, supervisor_answering, turn, worker_answering


async def test_a_supervisor_whose_submit_failed_is_not_said_never_to_have_called_it(
    tmp_path: Path, answer_task: Path
) -> None:
    supervisor = [turn("", call("submit", path="missing.txt", note="done"))]
    supervisor += ["I am done."] * 4
    finished, _, _ = await _run({"supervisor": supervisor}, tmp_path, answer_task)
    assert finished is not None and finished.reason == "no_tool_calls"
    assert "never called submit" not in finished.message
    assert "submit call failed" in finished.message and "missing.txt" in finished.message


async def test_a_replay_whose_prompt_changed_shows_the_difference(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {"supervisor": supervisor_answering(), "worker": worker_answering()}
    finished, _, _ = await _run(script, tmp_path / "rec", answer_task)
    assert finished is not None and finished.reason == "submitted"
    recorded = next((tmp_path / "rec").iterdir())

    provider = ReplayProvider.from_spec(f"replay:{recorded}")
    out = tmp_path / "batch"
    config = RunConfig(
        task="answer",
        model=f"replay:{recorded}",
        runs_dir=out / RUNS,
        run_id="again",
        isolation="none",
        time_limit_s=360,  # the recording ran under the default
    )
    controller = RunController(config, load_task(answer_task), provider)
    await controller.run(agent_for)
    events = read_events(controller.run_dir / "events.jsonl")
    ended = events[-1]
    assert isinstance(ended, ev.RunFinished) and ended.reason == "replay_diverged"
    assert "replay diverged at model call 1 (supervisor" in ended.message
    assert "time limit 6m00s (recorded 5m00s)" in ended.message  # what changed, shown
    assert not any(isinstance(e, ev.ModelError) for e in events)
    # A batch does not try it again: it would diverge the same way.
    assert run_status(out, "again").kind == "unscored"
