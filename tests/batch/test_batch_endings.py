"""Batches account for every run (issue 15): a run that never started is a row
with its reason, a run that ended unscored by itself is not retried, retries are
counted and shown, and the means count the first attempt of each seed, so that
retrying cannot move them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.agent.record.run_result import write_result
from mlra.agent.record.state import RunState
from mlra.batch.report import write_report
from mlra.batch.state import RETIRED, RUNS, RunCard, run_status, write_card
from tests.batch.naming import batch_run_id
from tests.conftest import mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import turn

MODEL = "openai/test-model"


def _run(
    run_dir: Path,
    *,
    seed: int,
    reason: ev.FinishReason = "submitted",
    status: ev.RunStatus = "finished",
    score: float | None = None,
    cost: float = 0.0,
) -> Path:
    """A run folder as the controller writes one: started, ended as told, graded if a score."""
    log = EventLog(run_dir / EVENTS_FILE)
    state = RunState()
    log.subscribe(state.apply)
    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    log.append(
        ev.RunStarted(
            run_id=run_dir.name.split("__a")[0],
            task="answer",
            task_title="A",
            model=MODEL,
            limits=ev.Limits(time_limit_s=60),
            sandbox=sandbox,
            config={"seed": seed},
        )
    )
    log.append(ev.ModelCall(agent="supervisor", model=MODEL, cost_usd=cost))
    if score is not None or reason in ("deadline", "submitted"):
        log.append(
            ev.Submission(path="answer.txt", by="deadline" if reason == "deadline" else "agent")
        )
        error = None if score is not None else "answer.txt does not exist"
        log.append(
            ev.EvaluationFinished(
                ok=score is not None,
                metric="exact_match",
                score=score,
                normalized=score,
                error=error,
            )
        )
    log.append(ev.RunFinished(status=status, reason=reason, message=f"ended: {reason}"))
    log.close()
    write_result(state, run_dir)
    return run_dir


@pytest.mark.parametrize(
    ("reason", "status", "kind"),
    [
        ("no_submission", "finished", "unscored"),
        ("no_tool_calls", "finished", "unscored"),
        ("repeated_failure", "finished", "unscored"),
        ("stuck", "finished", "unscored"),  # it would go round in circles again
        ("deadline", "finished", "unscored"),
        ("submitted", "finished", "unscored"),  # graded, and the grader found no score
        ("provider_error", "error", "failed"),
        ("error", "error", "failed"),
        ("replay_diverged", "error", "unscored"),  # it would diverge again
    ],
)
def test_only_failures_that_say_nothing_about_the_agent_are_retried(
    tmp_path: Path, reason: ev.FinishReason, status: ev.RunStatus, kind: str
) -> None:
    _run(tmp_path / RUNS / "r", seed=1, reason=reason, status=status)
    found = run_status(tmp_path, "r")
    assert found.kind == kind
    assert found.reason == ("no score" if reason == "submitted" else reason)


def test_the_report_counts_the_first_attempt_and_shows_every_other(tmp_path: Path) -> None:
    out = tmp_path
    # Seed 1: its first attempt's provider failed; the retry scored 1.0.
    _run(
        out / RETIRED / "answer__m__s1__a1",
        seed=1,
        reason="provider_error",
        status="error",
        cost=0.5,
    )
    _run(out / RUNS / "answer__m__s1", seed=1, score=1.0, cost=0.25)
    # Seed 2 scored 0 at once; seed 3 ended without a submission (not retried).
    _run(out / RUNS / "answer__m__s2", seed=2, score=0.0)
    _run(out / RUNS / "answer__m__s3", seed=3, reason="no_submission")
    # Seed 4 never started: the machine could not hold it. Its card is its only trace.
    write_card(
        out,
        RunCard(
            run_id="answer__m__s4",
            task="answer",
            model=MODEL,
            seed=4,
            not_started="resources",
            detail="needs 3 GPU(s); this machine has 2",
        ),
    )
    (group,) = write_report(out, plots=False)
    assert group.runs == 4 and group.retries == 1
    # The first attempt of each seed with an outcome: seed 1's first said nothing of the
    # agent (its provider failed, as the batch retries exactly those): its retry's 1.0.
    assert group.scored == 2 and group.score_mean == 0.5
    assert group.failures == {"no_submission": 1, "resources": 1}
    assert group.cost_usd == pytest.approx(0.75)  # every attempt was paid for
    report = json.loads((out / "report.json").read_text())
    assert report["attempt"] == "first"
    rows = {(r["run_id"], r["attempt"]): r for r in report["runs"]}
    assert len(rows) == 5
    assert rows["answer__m__s1", 2]["counted"] and not rows["answer__m__s1", 1]["counted"]
    never = rows["answer__m__s4", 1]
    assert never["status"] == "not started" and never["reason"] == "resources"
    assert never["seed"] == 4 and never["model"] == MODEL
    md = (out / "report.md").read_text()
    assert "counting the first attempt of each seed" in md
    # Why each run that started has no score, as its log says (the table says only
    # "provider_error ×1"; what failed, a server gone for minutes or a bad key, was not said).
    assert "- answer__m__s1 (attempt 1): provider_error: ended: provider_error\n" in md
    assert "- answer__m__s3 (attempt 1): no_submission: ended: no_submission\n" in md
    assert rows["answer__m__s1", 1]["detail"] == "ended: provider_error"
    assert rows["answer__m__s1", 2]["detail"] == ""  # scored: nothing to explain
    assert "| no_submission ×1, resources ×1 | 1 | bwrap |" in md
    assert "- answer__m__s4 (attempt 1): resources" in md

    # Asked for, the last attempt of each seed: here the same.
    proc = mlra_cli(["report", str(out), "--no-plots", "--attempt", "last"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    last = json.loads((out / "report.json").read_text())
    assert last["attempt"] == "last"
    assert last["groups"][0]["score_mean"] == 0.5 and last["groups"][0]["scored"] == 2
    assert "counting the last attempt of each seed" in proc.stdout


def test_a_run_that_ends_unscored_by_itself_is_not_retried(
    tmp_path: Path, answer_task: Path
) -> None:
    (tmp_path / "answer_task").symlink_to(answer_task)
    out = tmp_path / "b"
    script: dict[str, Any] = {"supervisor:fallback": turn("I think it is 42.")}
    with ScriptedModelServer(script) as server:
        args = ["batch", "--tasks", "answer_task", "--models", MODEL, "--out", str(out)]
        args += ["--base-url", server.url_for("openai"), "--isolation", "none", "--no-tui"]  # type: ignore[list-item]
        args += ["--max-attempts", "3"]
        proc = mlra_cli(args, cwd=tmp_path, timeout=180)
        asked = len(server.requests)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        run_id = batch_run_id(out, MODEL)
        assert f"not scored: {run_id} (unscored, no_tool_calls, 1 attempt)" in proc.stdout
        assert "0/1 finished and 1 unscored (0 already were; 0 retries)" in proc.stdout
        assert not (out / RETIRED).exists()
        # Running the batch again starts nothing: the outcome is final.
        again = mlra_cli(args, cwd=tmp_path, timeout=60)
        assert len(server.requests) == asked and "queue " not in again.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["groups"][0]["failures"] == {"no_tool_calls": 1}
    card = json.loads((out / "logs" / f"{run_id}.json").read_text())
    assert card == {
        "run_id": run_id,
        "task": "answer",
        "model": MODEL,
        "seed": 1,
        "not_started": None,
        "detail": "",
    }


async def test_a_run_that_never_started_is_a_row_of_the_report(
    tmp_path: Path, answer_task: Path
) -> None:
    from mlra.batch.executors.local import Capacity, LocalExecutor
    from mlra.batch.run_ids import run_names
    from mlra.batch.runner import BatchRunner
    from mlra.batch.spec import BatchSpec, Overrides, expand

    out = tmp_path / "b"
    spec = BatchSpec(
        tasks=[str(answer_task)],
        models=["baseline"],
        seeds=2,
        out=out,
        isolation="none",
        overrides={str(answer_task): Overrides(gpus=3)},
    )
    executor = LocalExecutor(Capacity(cpus=8, memory_gb=64, gpus=["0", "1"]))
    await BatchRunner(spec, expand(spec, run_names(out)), executor, out).run()
    run_id = batch_run_id(out, "baseline")
    assert not (out / RUNS / run_id).exists()
    (group,) = write_report(out, plots=False)
    assert group.runs == 2 and group.scored == 0 and group.failures == {"resources": 2}
    assert group.median_duration_s is None  # no run took any time: not "0.0s"
    md = (out / "report.md").read_text()
    assert "| none scored | – |" in md, md  # no run graded: no success rate, not 0%
    assert f"- {run_id} (attempt 1): resources" in md
