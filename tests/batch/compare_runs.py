"""Run folders for the comparison's tests, written with the real EventLog and RunState
as a run writes them: a model, a score, settings, a loss and an accuracy curve,
validations, a prompt and a submitted file, each chosen by the test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.agent.record.run_result import write_result
from mlra.agent.record.state import RunState

CONFIG: dict[str, Any] = {
    "seed": 1,
    "search": "none",
    "observation_limit": 10000,
    "temperature": None,
    "fetch": {"allow_hosts": [], "ca_bundle": None},
}


def compared_run(
    runs: Path,
    name: str,
    *,
    task: str = "answer",
    model: str = "m1",
    score: float | None = 0.5,
    higher_is_better: bool = True,
    losses: tuple[float, ...] = (2.5, 1.5, 0.9, 0.6),
    accs: tuple[float, ...] = (0.2, 0.4, 0.6),
    validations: tuple[float, ...] = (0.3, 0.45),
    config: dict[str, Any] | None = None,
    prompt: str = "Note: 10 minutes left.",
    answer: str = "42\n",
    finished: bool = True,
    tokens: int = 1200,
    cost: float = 0.01,
    metric: str = "exact_match",
    more: tuple[ev.Metrics, ...] = (),
    time_limit_s: float = 3600,
    ending: ev.RunFinished | None = None,
    evaluation: ev.EvaluationFinished | None = None,
    graded: bool = True,
) -> Path:
    """A run of `task` by `model`; `finished`: it ended (`ending`, else the agent
    submitted) and was graded (`evaluation`, else `score`), False: its log stops midway.
    `graded=False`: an ending that grades nothing (no submission, the user's quit)."""
    run_dir = runs / name
    log = EventLog(run_dir / EVENTS_FILE)
    state = RunState()
    log.subscribe(state.apply)

    def append(t: float, event: ev.Event) -> None:
        event.t = t
        log.append(event)

    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    append(
        0,
        ev.RunStarted(
            run_id=name,
            task=task,
            task_title="A task",
            model=model,
            limits=ev.Limits(time_limit_s=time_limit_s, max_steps=50),
            sandbox=sandbox,
            config={**CONFIG, **(config or {})},
            mlra_version="0.1.0",
        ),
    )
    append(1, ev.StepStarted(agent="worker", step=1, turn=1, prompt=prompt))
    losses_pts = [
        ev.MetricPoint(name="loss", value=v, step=100 * (i + 1), wall=10.0 * (i + 1))
        for i, v in enumerate(losses)
    ]
    append(50, ev.Metrics(source="job:j1", job="j1", points=losses_pts))
    acc = [
        ev.MetricPoint(name="acc", value=v, step=100 * (i + 1), wall=15.0 * (i + 1))
        for i, v in enumerate(accs)
    ]
    append(60, ev.Metrics(source="job:j1", job="j1", points=acc))
    for event in more:  # series of other names
        append(65, event)
    for i, value in enumerate(validations):
        append(
            70.0 + 10 * i,
            ev.Validation(
                artifact="answer.txt",
                ok=True,
                metric="accuracy",
                score=value,
                higher_is_better=higher_is_better,
            ),
        )
    append(
        90,
        ev.ModelCall(agent="worker", model=model, input_tokens=tokens, cost_usd=cost),
    )
    (run_dir / "submission").mkdir(parents=True, exist_ok=True)
    (run_dir / "submission" / "answer.txt").write_text(answer, encoding="utf-8")
    if finished and graded:
        append(100, ev.Submission(path="answer.txt"))
        append(
            100,
            evaluation
            or ev.EvaluationFinished(
                ok=True,
                metric=metric,
                higher_is_better=higher_is_better,
                score=score,
                normalized=score,
            ),
        )
    if finished:
        append(100, ending or ev.RunFinished(status="finished", reason="submitted"))
    log.close()
    if finished:
        write_result(state, run_dir)
    return run_dir
