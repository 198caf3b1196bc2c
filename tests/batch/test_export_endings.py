"""How each way a run ends reads in MLflow and in W&B, read back with their own readers:
a graded run FINISHED, one that ended by its own limit (the deadline) FINISHED with its
score and its `reason` tag; a run that ended with no score (a rule broken, the
evaluator's error, no submission, a budget with nothing graded) FAILED with why, as the
report judges it (batch/report_judged.py: judged, and failed); a person's stop (graded or
not) KILLED, as `mlra runs` says "stopped"; an `--ungraded` run FINISHED with why it was
not graded, and FAILED where it handed nothing in; a search's attempt (never graded on
the test split) FINISHED at its own deadline or budget and where its search cancelled it
(was FAILED, and KILLED/255: a person's stop); a graded stop with nothing graded and a run
Ray killed for its memory FAILED (the report judges both failed); a replay of a killed
recording as a crash, no exit (was 255). MLflow said FINISHED for every run that ended "finished" (a broken rule, no
submission), FAILED for a person's quit, and nothing of an ungraded run; W&B the same
by its exit code. A killed mlra and a run still going: tests/batch/test_unfinished_runs.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.loop.attempts import ATTEMPTS_DIR
from mlra.agent.loop.ending import RECORDING_UNFINISHED
from mlra.batch.state import OUT_OF_MEMORY, Placement, add_placement
from mlra.console.cli.cli import main
from tests.batch.compare_runs import compared_run

UNGRADED = "its evaluator needs a GPU this machine lacks"


def _failed(error: str, violations: tuple[str, ...] = ()) -> ev.EvaluationFinished:
    return ev.EvaluationFinished(
        ok=False, metric="exact_match", error=error, violations=list(violations)
    )


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A batch folder of one run for each ending."""
    folder = tmp_path_factory.mktemp("endings") / "b1"
    runs = folder / "runs"
    compared_run(runs, "scored", score=0.5)
    compared_run(
        runs,
        "rule_broken",
        evaluation=_failed("the submission breaks a rule", ("it read the test labels",)),
    )
    compared_run(runs, "eval_error", evaluation=_failed("evaluator exited with status 1"))
    compared_run(
        runs,
        "no_submission",
        graded=False,
        ending=ev.RunFinished(
            status="finished", reason="no_submission", message="the agent ended without submitting"
        ),
    )
    compared_run(
        runs,
        "deadline",
        score=0.3,
        ending=ev.RunFinished(
            status="finished", reason="deadline", message="the time limit was reached"
        ),
    )
    compared_run(
        runs,
        "budget_unscored",
        evaluation=_failed("answer.txt is empty"),
        ending=ev.RunFinished(status="finished", reason="budget", message="a budget was used up"),
    )
    compared_run(  # `stop` (the console's key, `mlra ctl stop`): graded what there was
        runs,
        "stopped",
        score=0.4,
        ending=ev.RunFinished(status="finished", reason="stopped", message="stopped by the user"),
    )
    compared_run(  # `quit`, a Ctrl-C: ended with nothing graded
        runs,
        "quit",
        graded=False,
        ending=ev.RunFinished(status="stopped", reason="stopped", message="stopped by the user"),
    )
    compared_run(
        runs,
        "provider_failed",
        graded=False,
        ending=ev.RunFinished(
            status="error", reason="provider_error", message="the model provider failed"
        ),
    )
    compared_run(
        runs,
        "ungraded",
        config={"ungraded": UNGRADED},
        evaluation=_failed("no GPU found"),
    )
    compared_run(  # `--ungraded`, and it handed nothing in: as any run that submitted nothing
        runs,
        "ungraded_stuck",
        config={"ungraded": UNGRADED},
        graded=False,
        ending=ev.RunFinished(status="finished", reason="stuck", message=STUCK),
    )
    compared_run(  # `stop` graded what there was, and found nothing: judged, and failed
        runs,
        "stop_empty",
        evaluation=_failed("answer.txt is empty"),
        ending=ev.RunFinished(status="finished", reason="stopped", message="stopped by the user"),
    )
    compared_run(  # a replay of a killed recording, from before `cause`: read by its words
        runs,
        "replay_killed",
        graded=False,
        ending=ev.RunFinished(status="stopped", reason="stopped", message=REPLAY_KILLED),
    )
    oom = compared_run(runs, "oom", finished=False)  # Ray killed it for its memory
    add_placement(oom, Placement(node_id="ab" * 8, host="n2", outcome=OUT_OF_MEMORY, detail=OOM))
    _attempts(runs / "scored" / ATTEMPTS_DIR)
    return folder


STUCK = "the agent made the same call again and again"
REPLAY_KILLED = f"the recording ends here, after model call 3: {RECORDING_UNFINISHED}, so ..."
OOM = "the node ran out of memory and Ray killed the run (OutOfMemoryError)"
CANCELLED = "the run was cancelled before it could finish"


def _attempts(attempts: Path) -> None:
    """A search's attempts: validated (best 0.45), never graded on the test split; ended by
    their own deadline or budget, their work done, cancelled by their search, or stuck. Two say
    they are attempts in their config, two only by their folder (`attempts/`)."""
    endings = {
        "a1": ev.RunFinished(
            status="finished", reason="deadline", message="the time limit was reached"
        ),
        "a2": ev.RunFinished(status="finished", reason="budget", message="a budget was used up"),
        "a3": ev.RunFinished(status="stopped", reason="stopped", message=CANCELLED),
        "a4": ev.RunFinished(
            status="finished", reason="attempt_ended", message="the attempt ended"
        ),
        "a5": ev.RunFinished(status="finished", reason="stuck", message=STUCK),
    }
    for n, (name, ending) in enumerate(endings.items()):
        config = {"attempt": name} if n % 2 else None
        folder = compared_run(attempts, name, graded=False, ending=ending, config=config)
        result = folder / "result.json"  # its experiments' best, as a search's attempt's has
        data = json.loads(result.read_text(encoding="utf-8")) | {"best_validation": 0.45}
        result.write_text(json.dumps(data), encoding="utf-8")


def _mlflow_runs(batch: Path, dest: Path) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    assert main(["export", str(batch), "--to", "mlflow", "--dest", str(dest)]) == 0
    client = MlflowClient(tracking_uri=dest.resolve().as_uri())
    experiment = client.get_experiment_by_name("mlra/answer")
    assert experiment is not None
    return {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}


def test_mlflow_says_how_each_run_ended(batch: Path, tmp_path: Path) -> None:
    runs = _mlflow_runs(batch, tmp_path / "mlruns")
    status = {name: run.info.status for name, run in runs.items()}
    assert status == {
        "scored": "FINISHED",
        "deadline": "FINISHED",
        "ungraded": "FINISHED",
        "rule_broken": "FAILED",
        "eval_error": "FAILED",
        "no_submission": "FAILED",
        "budget_unscored": "FAILED",
        "provider_failed": "FAILED",
        "stopped": "KILLED",
        "quit": "KILLED",
        "ungraded_stuck": "FAILED",
        "stop_empty": "FAILED",
        "replay_killed": "KILLED",
        "oom": "FAILED",
        "scored/a1": "FINISHED",
        "scored/a2": "FINISHED",
        "scored/a3": "FINISHED",
        "scored/a4": "FINISHED",
        "scored/a5": "FAILED",  # stuck: its work undone
    }
    tags = {name: run.data.tags for name, run in runs.items()}
    assert tags["ungraded_stuck"]["mlra.error"] == "nothing was graded"
    assert tags["ungraded_stuck"]["mlra.ungraded"] == UNGRADED
    assert tags["stop_empty"]["mlra.error"] == "answer.txt is empty"
    assert tags["replay_killed"]["mlra.ending"] == REPLAY_KILLED
    assert tags["oom"]["mlra.error"] == OOM
    assert tags["scored/a5"]["mlra.error"] == "it ended before its work was done"
    assert tags["scored/a3"]["mlra.ending"] == f"stopped by its search: {CANCELLED}"
    for name in ("scored/a1", "scored/a2", "scored/a3", "scored/a4"):
        assert tags[name]["mlra.best_validation"] == "0.45", name  # no test score: validated
        assert "mlra.error" not in tags[name] and "user" not in tags[name]["mlra.ending"], name
    assert "it read the test labels" in tags["rule_broken"]["mlra.error"]
    assert tags["eval_error"]["mlra.error"] == "evaluator exited with status 1"
    assert tags["no_submission"]["mlra.ending"] == "the agent ended without submitting"
    assert tags["no_submission"]["mlra.error"] == "nothing was graded"  # not the ending again
    assert tags["budget_unscored"]["mlra.error"] == "answer.txt is empty"
    assert tags["budget_unscored"]["mlra.reason"] == "budget"
    assert tags["provider_failed"]["mlra.error"] == "the model provider failed"
    assert tags["deadline"]["mlra.reason"] == "deadline"
    assert tags["deadline"]["mlra.ending"] == "the time limit was reached"
    assert runs["deadline"].data.metrics["score"] == 0.3  # its own limit: graded, a score
    assert tags["stopped"]["mlra.ending"] == "stopped by the user"
    assert runs["stopped"].data.metrics["score"] == 0.4  # graded what there was
    assert tags["ungraded"]["mlra.ungraded"] == UNGRADED
    for name in ("scored", "deadline", "ungraded", "stopped", "quit"):
        assert "mlra.error" not in tags[name], name


def _wandb_runs(batch: Path, dest: Path) -> dict[str, tuple[Any, list[int]]]:
    """Each run's W&B run record and its exit codes, from its `.wandb` file."""
    from tests.console.test_export import _wandb_records

    assert main(["export", str(batch), "--to", "wandb", "--dest", str(dest)]) == 0
    found: dict[str, tuple[Any, list[int]]] = {}
    for log in (dest / "wandb").glob("offline-run-*/run-*.wandb"):
        records = _wandb_records(log)
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        found[run.display_name] = (run, [r.exit.exit_code for r in records if r.HasField("exit")])
    return found


def test_wandb_says_how_each_run_ended(batch: Path, tmp_path: Path) -> None:
    """Exit 0 is W&B's Finished, 1 its Failed, 255 the code W&B itself records for a run
    its user stopped (Ctrl-C: W&B's Killed is set only by its server)."""
    runs = _wandb_runs(batch, tmp_path / "wb")
    exits = {name: codes for name, (_, codes) in runs.items()}
    assert exits == {
        "scored": [0],
        "deadline": [0],
        "ungraded": [0],
        "rule_broken": [1],
        "eval_error": [1],
        "no_submission": [1],
        "budget_unscored": [1],
        "provider_failed": [1],
        "stopped": [255],
        "quit": [255],
        "ungraded_stuck": [1],
        "stop_empty": [1],
        "replay_killed": [],  # no exit: W&B's Crashed once synced, as mlra killed
        "oom": [1],
        "scored/a1": [0],
        "scored/a2": [0],
        "scored/a3": [0],
        "scored/a4": [0],
        "scored/a5": [1],
    }
    notes = {name: run.notes for name, (run, _) in runs.items()}
    assert "it read the test labels" in notes["rule_broken"]
    assert "answer.txt is empty" in notes["budget_unscored"]
    assert "stopped by the user" in notes["quit"]
    assert "not graded" in notes["ungraded"] and UNGRADED in notes["ungraded"]
    assert "reason:deadline" in runs["deadline"][0].tags
    assert "ungraded" in runs["ungraded"][0].tags
    assert "stopped by its search" in notes["scored/a3"] and "user" not in notes["scored/a3"]
    assert OOM in notes["oom"]
