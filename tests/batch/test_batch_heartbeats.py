"""A batch's plain lines while its runs go on with nothing starting or ending: each
running run's clock and newest progress, read from its log, at least every
`every_s` of the batch's time (before: `[0/2 done · 1 running … 6s]` for minutes)."""

from __future__ import annotations

import io
import time

from mlra.agent.record.run_progress import glance
from mlra.batch.progress import PlainProgress
from mlra.batch.runner import Progress
from mlra.batch.state import RunStatus
from tests.console.test_heartbeats import _training_run


def test_a_running_runs_glance_is_its_clock_and_newest_progress() -> None:
    events = [e for e in _training_run(90) if e.t <= 65]  # at 65 s, still running
    assert glance(events, 65.0) == "1m05s · step 366/600 loss 3.48 · ETA 30s"
    assert glance(events[:5], 9.0) == "9s"  # nothing read yet: the clock alone


def test_the_plain_display_says_how_each_running_run_goes_while_nothing_happens() -> None:
    out = io.StringIO()
    display = PlainProgress(out, every_s=30)
    p = Progress(total=2)
    p.events.append("start r1")
    p.statuses["r1"] = RunStatus("r1", "running", glance="1m05s · step 366/600 loss 3.48")
    p.statuses["r2"] = RunStatus("r2", "pending")
    display(p)
    display(p)  # nothing new, and not yet 30 s: nothing printed
    assert len(out.getvalue().splitlines()) == 1
    p.started_at = time.monotonic() - 31  # the batch's clock, 31 s on
    display(p)
    display(p)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[1].endswith("] r1 running 1m05s · step 366/600 loss 3.48")
    assert "1 running" in lines[1]


def test_a_grading_run_says_so_with_its_count() -> None:
    """The run clock stands still while it grades: the line says what goes on instead."""
    from mlra import events as ev

    events = [
        *_training_run(90),
        ev.EvaluationStarted(evaluator="lm-eval", artifact="submission", t=95.0),
        ev.EvaluationProgress(
            line="", what="Running loglikelihood requests", done=781, total=1720, t=95.0
        ),
    ]
    assert glance(events, 95.0) == (
        "1m35s · grading: 45% (781/1,720) Running loglikelihood requests"
    )
    events.append(ev.EvaluationFinished(ok=True, metric="acc", score=0.8, t=95.0))
    assert glance(events, 95.0) == "1m35s"
