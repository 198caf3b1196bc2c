"""How a run ended is judged by the cause its `run_finished` records, not by its words:
a replay of a killed recording (the trackers' KILLED with no exit, as the recorded run)
and a request the model's window cannot hold (judged, and failed) were told by matching
their messages (batch/export/endings.py, batch/report_judged.py), so a reworded message
changed the judgement. A log or a result.json from before the field is still read by the
words it has (events/run.py `cause_as_read`), and by nothing else.

The two endings are made by real runs (in-process, against the scripted model server):
a recording cut where mlra was killed, replayed; and a window smaller than the request.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop import ending as ending_module
from mlra.agent.loop import overflow_mend, replay_provider
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import EVENTS_FILE, read_events
from mlra.agent.record.run_result import RunResult, result_of
from mlra.agent.record.state import fold
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.batch.export.endings import BY_ITS_SEARCH, STOP_EXIT, Ended, ended
from mlra.batch.report import write_report
from mlra.batch.report_judged import has_outcome, judged_success
from mlra.batch.state import ENDED, RUNS, run_status
from mlra.console.apps.headless_run import final_line
from mlra.console.text.args import shown_folder
from mlra.tasks.spec import load_task
from tests.agent.test_overflow_mend import _run as _overflow_run
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

OLD_UNFINISHED = (
    "the recording ends here, after model call 3: the recorded run never finished "
    "(it was killed or crashed), so the replay stops where it stopped"
)
"""A killed recording's replay's message as logs from before `cause` have it."""
OLD_OVERFLOW = "the model's window (8,192 tokens) cannot hold supervisor's request"
"""A window overflow's message as logs from before `cause` have it."""


async def _killed_recording(tmp: Path, task: Path) -> Path:
    """A run recorded whole, its log then cut before its fourth model call (the worker's
    second), as a run mlra was killed in leaves it: no `run_finished`."""
    worker = [
        turn("Answer.", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    script = {"supervisor": supervisor_answering(), "worker": worker}
    with ScriptedModelServer(script, turn_by_history=True) as server:
        provider = resolve_model("openai/test-model", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer",
            model="openai/test-model",
            runs_dir=tmp / "runs",
            run_id="recorded",
            isolation="none",
        )
        await RunController(config, load_task(task), provider).run(agent_for)
        await provider.aclose()
    run_dir = tmp / "runs" / "recorded"
    lines = (run_dir / EVENTS_FILE).read_text(encoding="utf-8").splitlines(keepends=True)
    calls = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "model_call"]
    (run_dir / EVENTS_FILE).write_text("".join(lines[: calls[3]]), encoding="utf-8")
    (run_dir / "result.json").unlink(missing_ok=True)
    assert not any(isinstance(e, ev.RunFinished) for e in read_events(run_dir / EVENTS_FILE))
    return run_dir


async def test_a_replay_of_a_killed_recording_is_judged_by_its_cause_whatever_its_words(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay ends "stopped", as a stop does, its cause recorded: the trackers say
    KILLED with no exit (W&B's Crashed), as the recorded run was, however its message
    is worded (reworded here: it was KILLED/255, a person's stop)."""
    recorded = await _killed_recording(tmp_path, answer_task)
    reworded = "the recorded run stops short"
    monkeypatch.setattr(ending_module, "RECORDING_UNFINISHED", reworded)
    # where the message was built before it was the ending's own (agent/loop/ending.py)
    monkeypatch.setattr(replay_provider, "RECORDING_UNFINISHED", reworded, raising=False)
    provider = ReplayProvider.from_spec(f"replay:{recorded}")
    config = RunConfig(
        task="answer", model=f"replay:{recorded}", runs_dir=tmp_path / "replay", isolation="none"
    )
    controller = RunController(config, load_task(answer_task), provider)
    result = await controller.run(agent_for)

    finished = read_events(controller.run_dir / EVENTS_FILE)[-1]
    assert isinstance(finished, ev.RunFinished)
    assert (finished.status, finished.reason) == ("stopped", "stopped")
    assert finished.cause == "recording_unfinished"
    assert reworded in finished.message and "never finished" not in finished.message
    stored = RunResult.model_validate_json((controller.run_dir / "result.json").read_bytes())
    assert stored.cause == result.cause == "recording_unfinished"
    assert ended(stored) == Ended("KILLED", None, finished.message)

    # Its own replay ends as it did, the killed run's: not "stopped by its user" (255).
    again = ReplayProvider.from_spec(f"replay:{controller.run_dir}")
    config = RunConfig(
        task="answer",
        model=f"replay:{controller.run_dir}",
        runs_dir=tmp_path / "replay2",
        isolation="none",
    )
    twice = await RunController(config, load_task(answer_task), again).run(agent_for)
    assert twice.cause == "recording_unfinished"
    assert ended(twice).wandb_exit is None


async def test_a_window_overflow_is_judged_by_its_cause_whatever_its_words(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window smaller than the first request ends the run "provider_error", its cause
    recorded: judged, and failed, as it would end the same way again, however its
    message is worded (reworded here: it was never judged, as a provider's failure)."""
    monkeypatch.setattr(overflow_mend, "WINDOW_CANNOT_HOLD", "no room in the context")
    script = {"supervisor": supervisor_answering()}
    events, _ = await _overflow_run(tmp_path, answer_task, script, {"llama_server_ctx": 1000})
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished)
    assert (finished.reason, finished.cause) == ("provider_error", "window_overflow")
    assert finished.message.startswith("no room in the context")
    run_dir = next(p.parent for p in tmp_path.rglob("result.json"))
    stored = RunResult.model_validate_json((run_dir / "result.json").read_bytes())
    for result in (stored, result_of(fold(events))):
        assert result.cause == "window_overflow"
        assert has_outcome(result) and judged_success(result) is False
        assert ended(result).mlflow == "FAILED"


def _old_log_result(line: dict[str, object]) -> RunResult:
    """The result of a log whose ending is `line`, as a log from before `cause` has it."""
    return result_of(fold([ev.parse_event(json.dumps(line))]))


def test_an_old_log_without_the_cause_is_judged_by_its_words_as_before() -> None:
    """Logs and result.json files written before `cause`: their words, and only there."""
    killed = _old_log_result(
        {
            "type": "run_finished",
            "status": "stopped",
            "reason": "stopped",
            "message": OLD_UNFINISHED,
        }
    )
    assert killed.cause == "recording_unfinished"
    assert ended(killed) == Ended("KILLED", None, OLD_UNFINISHED)
    overflowed = _old_log_result(
        {
            "type": "run_finished",
            "status": "error",
            "reason": "provider_error",
            "message": OLD_OVERFLOW,
        }
    )
    assert overflowed.cause == "window_overflow" and has_outcome(overflowed)
    # A result.json from before the field, read as it is.
    data = killed.model_dump(exclude={"cause"})
    assert "cause" not in data
    assert RunResult.model_validate(data).cause == "recording_unfinished"
    # A person's stop and a provider that failed have no cause: KILLED/255, not judged.
    stop = _old_log_result(
        {
            "type": "run_finished",
            "status": "stopped",
            "reason": "stopped",
            "message": "stopped by the user",
        }
    )
    assert stop.cause is None and ended(stop) == Ended("KILLED", STOP_EXIT, "stopped by the user")
    failed = _old_log_result(
        {
            "type": "run_finished",
            "status": "error",
            "reason": "provider_error",
            "message": "HTTP 500",
        }
    )
    assert failed.cause is None and not has_outcome(failed)


def _as_old_log(run_dir: Path, words: str = OLD_OVERFLOW) -> None:
    """The run's ending as a log and a result.json from before `cause` have it: no cause,
    and the message's `words` from then."""
    log = run_dir / EVENTS_FILE
    lines = log.read_text(encoding="utf-8").splitlines()
    last = json.loads(lines[-1])
    assert last["type"] == "run_finished" and last.pop("cause") is not None
    last["message"] = words
    log.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n", encoding="utf-8")
    stored = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    stored.pop("cause")
    stored["message"] = words
    (run_dir / "result.json").write_text(json.dumps(stored), encoding="utf-8")


async def test_a_batch_does_not_retry_a_run_whose_request_the_window_cannot_hold(
    tmp_path: Path, answer_task: Path
) -> None:
    """A window too small for the request ends the run at once, and would again: a batch
    that retried it (its reason is "provider_error") spent its attempts for nothing, and
    its report counted the first of them anyway. It is final, unscored, said for what it
    is, in a log from before the cause too."""
    out = tmp_path / "new"
    script = {"supervisor": supervisor_answering()}
    await _overflow_run(out / RUNS, answer_task, script, {"llama_server_ctx": 1000})
    (run_dir,) = (out / RUNS).iterdir()
    old = tmp_path / "old"
    shutil.copytree(run_dir, old / RUNS / run_dir.name)
    _as_old_log(old / RUNS / run_dir.name)
    for folder in (out, old):
        status = run_status(folder, run_dir.name)
        assert (status.kind, status.reason) == ("unscored", "window_overflow")
        assert status.kind in ENDED and "cannot hold supervisor's request" in status.detail
        (group,) = write_report(folder, plots=False)
        assert group.failures == {"window_overflow": 1}  # not a provider's failure
        (row,) = json.loads((folder / "report.json").read_text(encoding="utf-8"))["runs"]
        assert (row["counted"], row["success"]) == (True, False)  # judged, and failed


def test_a_replayed_attempt_of_a_killed_recording_is_killed_not_stopped_by_its_search() -> None:
    """A replayed search's attempt whose recording ends without `run_finished` stops as
    the recorded one was killed: the trackers said "stopped by its search" (FINISHED),
    as if the search had cancelled it."""
    line = {"type": "run_finished", "status": "stopped", "reason": "stopped"}
    new = _old_log_result({**line, "message": "cut short", "cause": "recording_unfinished"})
    old = _old_log_result({**line, "message": OLD_UNFINISHED})
    assert ended(new, attempt=True) == Ended("KILLED", None, "cut short")
    assert ended(old, attempt=True) == Ended("KILLED", None, OLD_UNFINISHED)
    # An attempt its search cancelled is still the search's doing.
    cancelled = _old_log_result({**line, "message": "the search submitted a2"})
    assert ended(cancelled, attempt=True).words.startswith(BY_ITS_SEARCH)


@pytest.mark.parametrize("logged", ["with its cause", "from before the cause"])
async def test_a_replay_of_a_window_overflow_ends_as_it_did_and_is_not_retried(
    tmp_path: Path, answer_task: Path, logged: str
) -> None:
    """A recording that ended because the model's window could not hold its fourth
    request (a refused request records no model call): the replay ends there the same
    way, its cause with it (it ended `provider_error` with none, a provider's failure,
    which a batch retries), the recorded words first."""
    recorded = await _killed_recording(tmp_path, answer_task)
    words = f"{OLD_OVERFLOW} (9,000 tokens as the server counts it)"
    ending = ev.RunFinished(status="error", reason="provider_error", message=words)
    if logged == "with its cause":
        ending = ending.model_copy(update={"cause": "window_overflow"})
    last = read_events(recorded / EVENTS_FILE)[-1]
    stamps = {"seq": last.seq + 1, "ts": last.ts, "t": last.t}
    with (recorded / EVENTS_FILE).open("a", encoding="utf-8") as log:
        log.write(ending.model_copy(update=stamps).model_dump_json(exclude_none=True) + "\n")
    out = tmp_path / "batch"
    provider = ReplayProvider.from_spec(f"replay:{recorded}")
    config = RunConfig(
        task="answer",
        model=f"replay:{recorded}",
        runs_dir=out / RUNS,
        run_id="replay",
        isolation="none",
    )
    result = await RunController(config, load_task(answer_task), provider).run(agent_for)
    events = read_events(out / RUNS / "replay" / EVENTS_FILE)
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished)
    assert (finished.status, finished.reason) == ("error", "provider_error")
    assert finished.cause == result.cause == "window_overflow"
    assert finished.message.startswith(words) and "the replay ends so too" in finished.message
    assert not any(isinstance(e, ev.EvaluationStarted) for e in events)
    assert run_status(out, "replay").kind == "unscored"  # a batch does not retry it


async def test_a_replay_of_a_killed_recording_is_final_and_not_told_to_resume(
    tmp_path: Path, answer_task: Path
) -> None:
    """It stops where the recorded run was killed, and would stop there again: its last
    line told `mlra resume ... goes on with it`, and a batch resumed it (then retried it)
    each time to the same stop. Its last line names no resume, and a batch leaves it,
    unscored, in a log from before the cause too."""
    recorded = await _killed_recording(tmp_path, answer_task)
    out = tmp_path / "batch"
    provider = ReplayProvider.from_spec(f"replay:{recorded}")
    config = RunConfig(
        task="answer", model=f"replay:{recorded}", runs_dir=out / RUNS, isolation="none"
    )
    controller = RunController(config, load_task(answer_task), provider)
    result = await controller.run(agent_for)
    assert (result.status, result.cause) == ("stopped", "recording_unfinished")
    last = final_line(controller.run_dir, result)
    assert last.endswith(f"run dir {shown_folder(controller.run_dir)}"), last
    assert "mlra resume" not in last
    old = tmp_path / "old"
    shutil.copytree(controller.run_dir, old / RUNS / controller.run_dir.name)
    _as_old_log(old / RUNS / controller.run_dir.name, OLD_UNFINISHED)
    stored = old / RUNS / controller.run_dir.name / "result.json"
    assert "mlra resume" not in final_line(
        stored.parent, RunResult.model_validate_json(stored.read_bytes())
    )
    for folder in (out, old):
        status = run_status(folder, controller.run_dir.name)
        assert (status.kind, status.reason) == ("unscored", "recording_unfinished")
        assert "never finished" in status.detail or "recording ends here" in status.detail
    # A person's stop still says how to go on.
    stop = result.model_copy(update={"cause": None, "message": "stopped by the user"})
    assert "goes on with it" in final_line(controller.run_dir, stop)
