"""`--model replay:RUN` of a search with a model (agent/loop/replay_provider.py): each
attempt's worker is answered from the attempt's own recording, and a recording that ends
with its person promoting an attempt ends the replay the same way. A scripted search on
the small `answer` task, recorded, then played back; real processes, real grading."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.text.attempt_lines import attempt_finished_line
from mlra.tasks.spec import load_task
from tests.agent.test_search import _scripted_search
from tests.scripts import call, turn


def _script(go: Path) -> dict[str, object]:
    """a1 writes the answer; a2, an improvement of it, waits for `go`, which never comes
    while it is recorded: the person promotes a1 meanwhile."""
    return {
        "supervisor": [
            turn("", call("attempt_start", instructions="Write 42 into answer.txt")),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("attempt_start", parent="a1", operator="improve", instructions="Wait")),
            turn("", call("attempt_wait", attempt="a2", timeout=600)),
            turn("", call("submit", attempt="a2")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="wrote 42")),
            turn("", call("bash", command=f"until [ -e {go} ]; do sleep 0.1; done", timeout=600)),
            turn("", call("report", summary="waited")),
        ],
    }


async def test_a_replay_of_a_promoted_search_plays_its_attempts_and_promotes_again(
    tmp_path: Path, answer_task: Path
) -> None:
    """It "diverged at model call 3 (supervisor, step 0)": the attempts' workers asked the
    search's recording, which holds the supervisor's calls alone; and the recording's
    end, the person's promotion, read as the agent asking on where nothing was recorded."""
    go = tmp_path / "go"

    async def promote_a1_while_a2_waits(controller: RunController) -> None:
        async with asyncio.timeout(120):
            while b"until [ -e" not in _log(controller.run_dir / "attempts" / "a2"):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        assert controller.promote_attempt("a1")

    recorded, result, _ = await _scripted_search(
        tmp_path / "rec",
        answer_task,
        _script(go),
        during=promote_a1_while_a2_waits,
        search="llm",
        attempts=2,
    )
    assert result.reason == "submitted" and result.score == 1.0
    go.touch()  # the replayed a2 goes on from its wait, to where its recording ends

    provider = ReplayProvider.from_spec(f"replay:{recorded.run_dir}")
    config = RunConfig(
        task="answer",
        model=f"replay:{recorded.run_dir}",
        runs_dir=tmp_path / "replay",
        isolation="none",
        search="llm",
        attempts=2,
    )
    controller = RunController(config, load_task(answer_task), provider)
    replayed = await asyncio.wait_for(controller.run(agent_for), 120)
    assert replayed.reason == "submitted", replayed.message
    assert replayed.message == (
        "the recording ends here, after model call 4: the recorded run's user promoted "
        "attempt a1 here; the replay promotes it too"
    )
    events = read_events(controller.run_dir / "events.jsonl")
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    assert finished["a1"].status == "validated" and finished["a1"].score == 0.5
    assert finished["a2"].status == "stopped", finished["a2"].why
    assert "diverged" not in finished["a2"].why
    # Cut off where its recording was, by the promotion, not "by its user".
    assert finished["a2"].why == (
        "the recording stops here, after model call 1, by the promotion of attempt a1"
    )
    # Said once, in one line: it read "attempt a2 stopped: the recording ends here, after
    # model call 1: the recorded attempt was stopped here by the promotion of attempt a1;
    # the replay ends the same way".
    line = attempt_finished_line(finished["a2"])
    assert line.startswith(
        "attempt a2 stopped: the recording stops here, after model call 1, by the promotion "
        "of attempt a1 after "
    )
    assert line.count("stop") == 2 and "\n" not in line
    submission = next(e for e in events if isinstance(e, ev.Submission))
    assert (submission.by, submission.attempt) == ("user", "a1")
    assert replayed.score == 1.0


def _log(run_dir: Path) -> bytes:
    log = run_dir / "events.jsonl"
    return log.read_bytes() if log.is_file() else b""


def test_how_long_a_draft_ran_is_no_difference_to_a_replay() -> None:
    """A draft's row reads `from the starter, 4s:` since its lineage of itself alone was
    dropped, and its time was then compared: a replay on a busier machine diverged."""
    from mlra.agent.loop.fingerprint import normalize

    row = "- a1 (best) [0.5] chosen, from the starter, {}: wrote 42"
    assert normalize(row.format("4s")) == normalize(row.format("1m02s"))
    improved = "- a2 [0.5] improve, from a1 (a1 > a2), {}: waited"
    assert normalize(improved.format("4s")) == normalize(improved.format("12s"))
