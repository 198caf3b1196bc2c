"""A batch's plain lines while its runs go on with nothing starting or ending: each
running run's clock and newest progress, read from its log, at least every
`every_s` of the batch's time (before: `[0/2 done · 1 running … 6s]` for minutes)."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.agent.record.run_progress import glance
from mlra.batch.progress import PlainProgress
from mlra.batch.runner import Progress
from mlra.batch.state import RunStatus, run_status
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


def test_a_run_waiting_for_its_model_server_says_so_not_only_its_stuck_clock(
    tmp_path: Path,
) -> None:
    """A run whose model server died waits for it with its clock paused: its line said
    "running 51s" every 30 s for the whole wait (minutes), as if it went on. It says it
    waits, for how long and why, and no longer once the server answers again."""
    from mlra import events as ev

    run_dir = tmp_path / "runs" / "r1"
    log = EventLog(run_dir / EVENTS_FILE)  # held open: the run is live
    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    log.append(ev.RunStarted(run_id="r1", task="t", task_title="T", model="openai/m",
                             limits=ev.Limits(time_limit_s=600), sandbox=sandbox))  # fmt: skip
    log.append(ev.ModelCall(agent="supervisor", model="openai/m", t=40.0))
    for attempt in (1, 2):
        log.append(ev.ModelRetry(agent="supervisor", model="openai/m", attempt=attempt,
                                 cause="not_answering", wait_s=1.0, t=51.0))  # fmt: skip
    log.append(ev.ModelRetry(agent="supervisor", model="openai/m", attempt=1, t=51.0))
    status = run_status(tmp_path, "r1")
    assert status.kind == "running"
    assert re.fullmatch(
        r"\d+s \(clock paused\) · waiting \d+s for its model server: "
        r"the server is not answering \(retry 2\)",
        status.glance,
    ), status.glance
    log.append(ev.ModelCall(agent="supervisor", model="openai/m", t=52.0))  # it came back
    assert "waiting" not in run_status(tmp_path, "r1").glance
    log.close()


def test_a_server_waits_length_is_wall_time_since_its_first_retry() -> None:
    from mlra import events as ev

    retries: list[ev.Event] = [
        ev.ModelRetry(
            agent="worker", model="m", attempt=n, cause="loading_model", t=9.0, ts=1000.0 + 30 * n
        )
        for n in (1, 2, 3)
    ]
    assert glance(retries, 9.0, now_ts=1160.0) == (
        "9s (clock paused) · waiting 2m10s for its model server: "
        "the server is still loading its model (retry 3)"
    )


def test_a_searching_runs_line_says_how_its_running_attempts_go(tmp_path: Path) -> None:
    """A run that searches only waits for its attempts, each with a log of its own: its
    line read "running 1m30s · attempt_wait" for the whole search. It gives each running
    attempt's clock and newest progress, read from the attempt's log."""
    from mlra import events as ev

    run_dir = tmp_path / "runs" / "r1"
    log = EventLog(run_dir / EVENTS_FILE)
    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    log.append(ev.RunStarted(run_id="r1", task="t", task_title="T", model="baseline",
                             limits=ev.Limits(time_limit_s=600), sandbox=sandbox))  # fmt: skip
    for attempt in ("a1", "a2"):
        log.append(ev.AttemptStarted(attempt=attempt, folder=f"attempts/{attempt}", t=10.0))
    log.append(ev.ToolCall(call_id="w1", agent="supervisor", tool="attempt_wait", t=10.0))
    a1 = EventLog(run_dir / "attempts" / "a1" / EVENTS_FILE)
    for event in _training_run(90):
        if event.t <= 65:
            a1.append(event)
    # a2 has not begun its log yet: named alone
    glance_now = run_status(tmp_path, "r1").glance
    assert "attempt_wait" not in glance_now
    assert re.search(r" · a1 1m05s · step 366/600 loss 3.48 · ETA \d+s; a2$", glance_now), (
        glance_now
    )
    a1.close()
    log.close()


def test_the_bars_keep_their_count_whatever_the_line_beside_them() -> None:
    """On a terminal, a long line of what happened (two run ids) squeezed the bar away and
    cut the count to "1…": the line gives way instead, cut with "…"."""
    from rich.console import Console

    from mlra.batch.progress import RichProgress

    out = io.StringIO()
    for width in (160, 100):
        console = Console(file=out, width=width, force_terminal=False)
        display = RichProgress(console)
        p = Progress(total=2)
        run = "merge-models__baseline__s2-7c553291eddb832d"
        p.events.append(f"running {run}")
        p.statuses["a"] = RunStatus("a", "finished")
        glance = "0s · " + "step 100/300 loss 5.201 valid 5.231 · " * 4 + "ETA 1m04s"
        p.statuses[run] = RunStatus(run, "running", glance=glance)
        display(p)
        display.close()
        out.truncate(0)
        out.seek(0)
        console.print(display.bars.get_renderable())
        done, failed = out.getvalue().splitlines()[:2]
        assert done.startswith("done     ━") and " 1/2 " in done, done
        assert done.rstrip().endswith("…") and len(done.rstrip()) <= width
        assert failed.startswith("failed ") and " 0/2" in failed


def test_one_running_runs_progress_fits_a_160_column_line() -> None:
    """tiny-lm's batch on a terminal showed `running tiny-lm__baseline__s1-<mac> ·
    tiny-lm__baseline…`: the run's start and its progress each named it whole, and the
    progress, the one sign it was working, was cut off. Named once, readably, it fits."""
    from rich.console import Console

    from mlra.batch.progress import RichProgress

    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=False)
    display = RichProgress(console)
    p = Progress(total=2)
    run = "tiny-lm__baseline__s1-14e11dbdf2c302a5"
    p.events.append(f"running {run}")
    glance = "1m20s · step 100/300 loss 5.201 valid 5.231 · ETA 1m04s"
    p.statuses[run] = RunStatus(run, "running", glance=glance)
    display(p)
    display.close()
    out.truncate(0)
    out.seek(0)
    console.print(display.bars.get_renderable())
    done = out.getvalue().splitlines()[0]
    assert done.rstrip().endswith(f"tiny-lm__baseline__s1 running {glance}"), done
    assert done.count("tiny-lm__baseline") == 1, done
