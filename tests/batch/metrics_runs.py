"""Run folders whose logs hold `metrics` events, written with the real EventLog and
RunState as a run writes them: for the exports' and the report's curves tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.agent.record.run_result import write_result
from mlra.agent.record.state import RunState


def started_ts(run_dir: Path) -> float:
    """The run's start, wall-clock epoch seconds, as its log stamped it."""
    line = (run_dir / EVENTS_FILE).read_text(encoding="utf-8").splitlines()[0]
    return float(json.loads(line)["ts"])


def metrics_run(
    runs: Path,
    name: str,
    *,
    task: str = "answer",
    model: str = "m",
    seed: int = 1,
    losses: tuple[float, ...] = (2.5, 1.5, 0.9, 0.6),
    score: float | None = 0.5,
    search: str = "none",
    more: tuple[ev.Metrics, ...] = (),
    config: dict[str, Any] | None = None,
) -> Path:
    """A finished run: job j1 printed `loss` at steps 100, 200..., metrics.jsonl gave
    `acc` with no steps, two validations, a graded submission (`score` None: graded with
    no score); `more` metrics events
    after those (series of other names); `config`: more of `run_started`'s config."""
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
            limits=ev.Limits(time_limit_s=3600, max_steps=50),
            sandbox=sandbox,
            config={"seed": seed, "search": search, "observation_limit": 10000, **(config or {})},
        ),
    )
    points = [
        ev.MetricPoint(name="loss", value=v, step=100 * (i + 1), wall=10.0 * (i + 1))
        for i, v in enumerate(losses)
    ]
    half = len(points) // 2
    append(40, ev.Metrics(source="job:j1", job="j1", points=points[:half]))
    append(
        60,
        ev.Metrics(source="job:j1", job="j1", points=points[half:], thinned=3),
    )
    acc = [ev.MetricPoint(name="acc", value=0.2 * (i + 1), wall=15.0 * (i + 1)) for i in range(3)]
    append(
        70,
        ev.Metrics(source="file:metrics.jsonl", kind="jsonl", path="metrics.jsonl", points=acc),
    )
    for event in more:
        append(75, event)
    for t, value in ((80.0, 0.3), (90.0, 0.45)):
        append(
            t,
            ev.Validation(artifact="answer.txt", ok=True, metric="accuracy", score=value),
        )
    append(100, ev.Submission(path="answer.txt"))
    graded = (
        ev.EvaluationFinished(ok=True, metric="exact_match", score=score, normalized=score)
        if score is not None
        else ev.EvaluationFinished(ok=False, metric="exact_match", error="answer.txt is empty")
    )
    append(100, graded)
    append(100, ev.RunFinished(status="finished", reason="submitted"))
    log.close()
    write_result(state, run_dir)
    return run_dir
