"""The Curves view (issue 31): the numbers a run's jobs print, folded from `metrics`
events into series (bounded), overlaid, on a log scale, with the validation scores on
the same axes; `v` opens it in the live console and in a replay, where it shows the
curves as of the cursor."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import SelectionList, Static
from textual_plotext import PlotextPlot

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import EventLog
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.apps.app import MlraApp
from mlra.console.apps.attach_app import AttachApp
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.screens.curves_screen import CurvesScreen
from mlra.console.text import curves_data
from mlra.console.text.attach_run import RemoteRun
from mlra.console.text.curves_data import (
    CurveSet,
    curves_upto,
    decimated,
    drawn,
    validations_drawn,
)
from mlra.console.text.replay import ReplayModel
from mlra.tasks.spec import load_task
from tests.console.console_fixtures import EPOCH, recorded_run
from tests.console.test_attach import HELD, LiveRun, _start_run, pilot_wait
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, supervisor_answering, turn


def metrics(source: str, *points: tuple[str, float, int | None, float]) -> ev.Metrics:
    job = source.split(":", 1)[1] if source.startswith("job:") else None
    return ev.Metrics(
        source=source,
        job=job,
        points=[ev.MetricPoint(name=n, value=v, step=s, wall=w) for n, v, s, w in points],
    )


def numbered(events: list[ev.Event]) -> list[ev.Event]:
    for i, event in enumerate(events, 1):
        event.seq = i
    return events


def training_run() -> list[ev.Event]:
    """The console fixtures' running run, then a job whose loss falls from 4.0 step by
    step, read a few points an event as the recorder flushes them, and a validation
    between (val_loss 2.9 at t=160)."""
    events = recorded_run("running")

    def add(t: float, event: ev.Event) -> None:
        event.seq, event.t, event.ts = len(events) + 1, t, EPOCH + t
        events.append(event)

    add(100, ev.JobStarted(job="job-1", command="python train.py", log="jobs/job-1.log"))
    for flush in range(6):
        points = []
        for k in range(5):
            step = (flush * 5 + k + 1) * 20
            points.append(("loss", 4.0 * math.exp(-step / 250) + 0.5, step, 100 + step / 2))
        add(100 + (flush + 1) * 50, metrics("job:job-1", *points))
        if flush == 2:
            add(
                260,
                ev.Validation(
                    artifact="submission",
                    ok=True,
                    metric="val_loss",
                    score=2.9,
                    higher_is_better=False,
                ),
            )
    return events


# --- the fold ------------------------------------------------------------------------


def test_events_fold_into_series_by_source_and_name() -> None:
    events = numbered(
        [
            metrics("job:j1", ("loss", 3.0, 1, 1.0), ("lr", 0.1, 1, 1.0)),
            metrics("job:j2", ("loss", 5.0, 1, 2.0)),
            metrics("job:j1", ("loss", 2.0, 2, 3.0)),
            ev.Validation(artifact="s", ok=True, metric="acc", score=0.7),
            ev.Validation(artifact="s", ok=False, metric="acc", error="missing"),
            metrics("file:metrics.jsonl", ("acc", math.nan, None, 4.0)),
        ]
    )
    curves = CurveSet().feed_all(events)
    assert sorted(curves.series) == [("job:j1", "loss"), ("job:j1", "lr"), ("job:j2", "loss")]
    loss = curves.series[("job:j1", "loss")]
    assert [(p.step, p.value) for p in loss.shown()] == [(1, 3.0), (2, 2.0)]
    assert curves.last_source == "job:j1"  # the NaN-only event added nothing
    assert [v.score for v in curves.validations] == [0.7]  # a failed one has no score
    # overlaid: both jobs' loss drawn, each its own line
    lines = drawn(
        [curves.series[("job:j1", "loss")], curves.series[("job:j2", "loss")]],
        by_step=True,
        log=False,
    )
    assert [(d.label, d.x, d.y) for d in lines] == [
        ("job:j1 loss", [1.0, 2.0], [3.0, 2.0]),
        ("job:j2 loss", [1.0], [5.0]),
    ]


def test_series_are_named_after_the_program_not_the_id_the_log_knows() -> None:
    events = numbered(
        [
            ev.JobStarted(job="job-1", command="python train.py --steps 600", log="j.log"),
            ev.JobStarted(job="job-2", command="python train.py --lr 1e-3", log="k.log"),
            ev.ToolCall(
                call_id="bas-0001",
                agent="worker",
                tool="bash",
                arguments={"command": "cd src && uv run python eval.py"},
            ),
            metrics("job:job-1", ("loss", 3.0, 1, 1.0)),
            metrics("job:job-2", ("loss", 3.5, 1, 1.0)),
            metrics("command:bas-0001", ("val_accuracy", 0.7, None, 2.0)),
            metrics("file:out/metrics.jsonl", ("lr", 0.1, 1, 1.0)),
            metrics("job:job-3", ("loss", 2.0, 1, 1.0)),
        ]
    )
    curves = CurveSet().feed_all(events)
    attempt = CurveSet("a2").feed_all(numbered([metrics("job:job-1", ("loss", 2.5, 1, 1.0))]))
    assert list(curves.merged([attempt]).names().values()) == [
        "train.py loss (job-1)",  # the same script twice: the job's id says which
        "train.py loss (job-2)",
        "eval.py val_accuracy",
        "metrics.jsonl lr",
        "job-3 loss",  # no command seen: the job's id
        "a2 loss",
    ]


def test_a_replay_cut_shows_only_points_up_to_its_seq() -> None:
    events = training_run()
    val = next(e for e in events if isinstance(e, ev.Validation))
    cut = curves_upto(events, val.seq)
    loss = cut.series[("job:job-1", "loss")]
    assert all(p.seq <= val.seq for p in loss.shown()) and len(loss.shown()) == 15
    assert [v.score for v in cut.validations] == [2.9]
    before = curves_upto(events, val.seq - 1)
    assert before.validations == [] and len(before.series[("job:job-1", "loss")].shown()) == 15
    assert len(curves_upto(events, events[-1].seq).series[("job:job-1", "loss")].shown()) == 30


def test_log_scale_leaves_out_non_positive_values_and_says_how_many() -> None:
    curves = CurveSet().feed_all(
        numbered(
            [
                metrics(
                    "job:j",
                    ("reward", -1.0, 1, 1.0),
                    ("reward", 0.0, 2, 2.0),
                    ("reward", 10.0, 3, 3.0),
                ),
                ev.Validation(artifact="s", ok=True, metric="r", score=0.0),
            ]
        )
    )
    series = list(curves.series.values())
    [line] = drawn(series, by_step=False, log=True)
    assert (line.x, line.y, line.left_out) == ([3.0], [10.0], 2)
    [linear] = drawn(series, by_step=False, log=False)
    assert linear.y == [-1.0, 0.0, 10.0] and linear.left_out == 0
    checks = validations_drawn(curves, series, by_step=False, log=True)
    assert checks is not None and checks.x == [] and checks.left_out == 1


def test_validation_on_the_step_axis_sits_at_the_step_reached_by_then() -> None:
    events = training_run()
    curves = CurveSet().feed_all(events)
    series = list(curves.series.values())
    checks = validations_drawn(curves, series, by_step=True, log=False)
    # t=260: the job had logged step 320 at wall 260, step 340 at 270
    assert checks is not None and checks.x == [320.0] and checks.y == [2.9]


def test_memory_stays_bounded_on_a_long_chatty_run(monkeypatch: Any) -> None:
    monkeypatch.setattr(curves_data, "MAX_POINTS", 100)
    monkeypatch.setattr(curves_data, "MAX_SERIES", 3)
    curves = CurveSet()
    for i in range(1000):
        curves.feed(metrics("job:j", ("loss", 1000.0 - i, i, float(i))))
    for name in ("a", "b", "c", "d"):
        curves.feed(metrics("job:k", (name, 1.0, 1, 1.0)))
    loss = curves.series[("job:j", "loss")]
    assert len(loss.shown()) <= 101
    assert loss.shown()[0].value == 1000.0 and loss.shown()[-1].value == 1.0  # first and newest
    assert len(curves.series) == 3 and curves.left_out_series == 2


def test_a_long_series_is_drawn_as_its_envelope_in_the_room_given() -> None:
    xs = [float(i) for i in range(1000)]
    ys = [1.0 + (9.0 if i == 500 else 0.0) - i / 1000 for i in range(1000)]  # one spike
    dx, dy = decimated(xs, ys, 100)
    assert len(dx) <= 100 and dx == sorted(dx)
    assert max(dy) == 10.0 - 0.5 and min(dy) == ys[-1]  # the spike and the end kept
    assert decimated(xs[:50], ys[:50], 100) == (xs[:50], ys[:50])


# --- the console -------------------------------------------------------------------------


def plotted(app: Any) -> str:
    screen = app.screen
    assert isinstance(screen, CurvesScreen)
    return "\n".join(p.plt.build() for p in screen.query(PlotextPlot) if p.display)


async def test_v_opens_and_escape_closes_the_view_live_with_the_falling_loss() -> None:
    events = training_run()
    app = MlraApp(events=events)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        assert [s.label for s in screen.shown_series()] == ["job:job-1 loss"]
        assert screen.query_one(SelectionList).selected == ["job:job-1 loss"]
        plot = plotted(app)
        assert "train.py loss" in plot and "validation val_loss" in plot  # one panel
        await pilot.press("t")  # every point has a step: the axis is the step
        assert "step" in plotted(app)
        await pilot.press("l")
        assert "y: log" in str(screen.query_one("#curves-title").render())
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, CurvesScreen)
        # live: new points reach the open view through the console's batched path
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        before = len(screen.curve_set.series[("job:job-1", "loss")].shown())
        extra = metrics("job:job-1", ("loss", 0.6, 700, 450.0))
        extra.seq, extra.t = len(events) + 1, 450.0
        app.display_.on_event(extra)
        await pilot.pause(0.1)
        screen.redraw(only_if_changed=True)
        assert len(screen.curve_set.series[("job:job-1", "loss")].shown()) == before + 1
        listing = screen.query_one(SelectionList[str])
        assert str(listing.get_option_at_index(0).prompt) == "train.py loss 0.6"  # the newest
        await pilot.press("v")
        await pilot.pause()
        assert not isinstance(app.screen, CurvesScreen)


async def test_space_picks_the_series_overlaid() -> None:
    """Two jobs: the view opens on the newest one's loss; Space on the other's adds it,
    both drawn on the same axes; Space again takes it off."""
    events = training_run()
    second = metrics("job:job-2", ("loss", 3.0, 20, 400.0), ("loss", 2.0, 40, 420.0))
    second.seq = len(events) + 1
    events = [*events[:-1], second, events[-1]]  # job-1's last flush is still the newest
    events[-1].seq = len(events)
    app = MlraApp(events=events)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        assert [s.label for s in screen.shown_series()] == ["job:job-1 loss"]
        await pilot.press("down", "space")
        await pilot.pause()
        assert [s.label for s in screen.shown_series()] == ["job:job-1 loss", "job:job-2 loss"]
        plot = plotted(app)
        assert "train.py loss" in plot and "job-2 loss" in plot
        await pilot.press("space")
        await pilot.pause()
        assert [s.label for s in screen.shown_series()] == ["job:job-1 loss"]
        assert "job-2" not in plotted(app)


async def test_a_scripts_one_off_numbers_are_listed_but_not_picked_over_its_loss() -> None:
    """tiny-lm's train.py prints `tokenizer: 2048 tokens` and `model: d=128, layers=2`
    before its loss: each a one-point series of the same job. Picked beside the loss
    they set the axis to 2048 and flatten the curve; the view opens on the loss alone,
    and keeps following the run until the person picks."""
    events = training_run()
    one_offs = metrics(
        "job:job-1",
        ("tokenizer", 2048.0, None, 1.0),
        ("d", 128.0, None, 1.0),
        ("layers", 2.0, None, 1.0),
    )
    events = numbered([events[0], one_offs, *events[1:]])
    app = MlraApp(events=events)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        assert [s.label for s in screen.shown_series()] == ["job:job-1 loss"]
        listed = [str(o.prompt) for o in screen.query_one(SelectionList).options]
        assert any("tokenizer" in line for line in listed), listed


async def test_opened_before_any_loss_it_says_no_curve_yet_not_the_one_off_numbers() -> None:
    """The script has printed its sizes (`tokenizer: 2048 tokens`, `d=128, layers=2`)
    and no loss yet: the view drew those one-off numbers as dots at 2048, 128 and 2, a
    chart of nothing. It lists them with their values, draws nothing, and says no curve
    has come yet; the loss is drawn once it has moved, without a key pressed."""
    events = recorded_run("running")
    start = ev.JobStarted(job="job-1", command="python train.py", log="jobs/job-1.log")
    one_offs = metrics(
        "job:job-1",
        ("tokenizer", 2048.0, None, 1.0),
        ("d", 128.0, None, 1.0),
        ("layers", 2.0, None, 1.0),
    )
    events = numbered([*events, start, one_offs])
    app = MlraApp(events=events)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        assert screen.shown_series() == []
        assert not screen.query_one("#curves-plots").display
        said = str(screen.query_one("#curves-empty", Static).render())
        assert screen.query_one("#curves-empty").display
        assert said.startswith("No curve yet: 3 numbers read so far have not changed"), said
        listed = [str(o.prompt) for o in screen.query_one(SelectionList).options]
        assert [" ".join(line.split()[:2]) for line in listed] == [
            "train.py tokenizer",
            "train.py d",
            "train.py layers",
        ]
        for loss, step in ((4.1, 10), (3.2, 20)):  # the first reading, then one that moved
            point = metrics("job:job-1", ("loss", loss, step, 2.0 + step))
            point.seq = len(events) + 1
            events.append(point)
            app.display_.on_event(point)
            await pilot.pause(0.1)
            screen.redraw(only_if_changed=True)
        assert [s.label for s in screen.shown_series()] == ["job:job-1 loss"]
        assert screen.query_one("#curves-plots").display
        assert not screen.query_one("#curves-empty").display
        assert "train.py loss" in plotted(app) and "tokenizer" not in plotted(app)


async def test_a_series_named_with_terminal_controls_is_shown_escaped() -> None:
    """Names come from what runs in the sandbox: shown, never obeyed by the terminal."""
    events = training_run()
    hostile = metrics("job:job-1", ("loss\x1b]52;c;aGk=\x07", 1.0, 1, 100.0))
    hostile.seq = len(events) + 1
    app = MlraApp(events=[*events, hostile])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        await pilot.press("down", "space")
        await pilot.pause()
        listing = screen.query_one(SelectionList[str])
        prompts = [str(listing.get_option_at_index(i).prompt) for i in range(2)]
        assert "\x1b" not in "".join(prompts) and "loss\\x1b]52" in prompts[1]
        assert "\x1b]52" not in plotted(app)


async def test_the_view_in_replay_shows_the_curves_as_of_the_cursor() -> None:
    events = training_run()
    val = next(i for i, e in enumerate(events) if isinstance(e, ev.Validation))
    app = ReplayApp(ReplayModel(events))
    async with app.run_test(size=(80, 24)) as pilot:
        app.model.go(val - 1)
        app.show_cursor()
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        loss = screen.curve_set.series[("job:job-1", "loss")]
        assert len(loss.shown()) == 15 and screen.curve_set.validations == []
        await pilot.press("right")  # the replay's own key moves the cursor beneath
        await pilot.pause()
        screen.redraw(only_if_changed=True)
        assert [v.score for v in screen.curve_set.validations] == [2.9]
        await app.run_action("last")  # (End itself moves in the series list)
        await pilot.pause()
        screen.redraw(only_if_changed=True)
        assert len(screen.curve_set.series[("job:job-1", "loss")].shown()) == 30
        await app.run_action("first")
        await pilot.pause()
        screen.redraw(only_if_changed=True)
        assert screen.curve_set.series == {}
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, CurvesScreen)


async def test_a_replays_series_are_named_after_the_program_as_the_live_consoles() -> None:
    """The replay read only the metrics and validation events, never the job or call
    that printed them, so its series read `job loss` (`command loss` for a baseline's
    recipe step) where the live console read `train.py loss`."""
    events = training_run()
    app = ReplayApp(ReplayModel(events))
    async with app.run_test(size=(80, 24)) as pilot:
        await app.run_action("last")
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        listed = [str(o.prompt) for o in screen.query_one(SelectionList).options]
        assert [line.split()[:2] for line in listed] == [["train.py", "loss"]], listed
        (plot, *_) = screen.query(PlotextPlot)
        assert "train.py loss" in plot.plt.build()


async def test_an_attempts_log_gives_its_own_series(tmp_path: Path) -> None:
    """A search: each attempt's log gives its own series, named after the attempt, and
    every attempt's loss is overlaid when the view opens."""
    events = training_run()
    for k, attempt in enumerate(("a1", "a2")):
        start = ev.AttemptStarted(attempt=attempt, folder=f"attempts/{attempt}", instructions="try")
        start.seq, start.t, start.ts = len(events) + 1, 500.0 + k, EPOCH + 500 + k
        events.append(start)
        folder = tmp_path / "attempts" / attempt
        folder.mkdir(parents=True)
        own = numbered([metrics("job:job-1", ("loss", 3.0 + k, 10, 5.0), ("loss", 1.0, 20, 9.0))])
        (folder / "events.jsonl").write_text("".join(e.model_dump_json() + "\n" for e in own))
    app = MlraApp(events=events, run_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        assert ("a1 job:job-1", "loss") in screen.curve_set.series
        listing = screen.query_one(SelectionList[str])
        labels = [listing.get_option_at_index(i).value for i in range(listing.option_count)]
        assert labels == ["job:job-1 loss", "a1 job:job-1 loss", "a2 job:job-1 loss"]
        assert {s.label for s in screen.shown_series()} >= {
            "a1 job:job-1 loss",
            "a2 job:job-1 loss",
        }
        prompts = [str(listing.get_option_at_index(i).prompt) for i in range(3)]
        assert [p.rsplit(" ", 1)[0] for p in prompts] == ["train.py loss", "a1 loss", "a2 loss"]
        plot = plotted(app)
        assert "a1 loss" in plot and "a2 loss" in plot


def _listed(app: Any) -> list[str]:
    listing = app.screen.query_one(SelectionList)
    return [str(o.prompt).rsplit(" ", 1)[0] for o in listing.options]


async def test_an_attempts_series_are_named_after_its_jobs_and_calls_live_and_in_replay(
    tmp_path: Path,
) -> None:
    """An attempt whose job and whose command both print a loss: each is named after the
    program that printed it, in the live console and in the replay alike, as the run's
    own are. The attempt's log, as its run writes it, keeps a call's arguments in the
    answer that asked for it: read without them, the command's loss was `a1 command loss`."""
    events = training_run()
    start = ev.AttemptStarted(attempt="a1", folder="attempts/a1", instructions="try")
    start.seq, start.t, start.ts = len(events) + 1, 500.0, EPOCH + 500
    events.append(start)
    log = EventLog(tmp_path / "attempts" / "a1" / "events.jsonl")
    log.append(ev.JobStarted(job="job-1", command="python train.py --steps 9", log="j.log"))
    log.append(metrics("job:job-1", ("loss", 3.0, 1, 1.0), ("loss", 2.0, 2, 2.0)))
    bash = {"command": "python eval.py"}
    asked = {"id": "c1", "name": "bash", "arguments": bash}
    log.append(ev.ModelCall(agent="worker", model="m", turn=1, tool_calls=[asked]))
    log.append(ev.ToolCall(call_id="c1", agent="worker", tool="bash", arguments=bash, step=1))
    log.append(metrics("command:c1", ("loss", 5.0, 1, 3.0), ("loss", 4.0, 2, 4.0)))
    log.close()
    later = ev.Notice(message="the attempt has run")
    later.seq, later.t, later.ts = len(events) + 1, 900.0, time.time() + 60
    events.append(later)
    names = ["train.py loss", "a1 train.py loss", "a1 eval.py loss"]
    live = MlraApp(events=events, run_dir=tmp_path)
    async with live.run_test(size=(120, 40)) as pilot:
        await _open_view(pilot)
        assert _listed(live) == names
    replay = ReplayApp(ReplayModel(events, run_dir=tmp_path))
    async with replay.run_test(size=(120, 40)) as pilot:
        await replay.run_action("last")
        await _open_view(pilot)
        assert _listed(replay) == names
        assert "a1 eval.py loss" in plotted(replay)


async def test_a_replay_shows_an_attempts_curve_up_to_the_cursors_time(tmp_path: Path) -> None:
    events = training_run()

    def add(t: float, event: ev.Event) -> int:
        event.seq, event.t, event.ts = len(events) + 1, t, EPOCH + t
        events.append(event)
        return len(events) - 1

    started = add(500, ev.AttemptStarted(attempt="a1", folder="attempts/a1", instructions="try"))
    first = add(650, ev.Notice(message="later"))
    second = add(750, ev.Notice(message="later still"))
    own = numbered(
        [
            metrics("job:job-1", ("loss", 3.0, 10, 5.0)),
            metrics("job:job-1", ("loss", 1.0, 20, 9.0)),
        ]
    )
    own[0].ts, own[1].ts = EPOCH + 600, EPOCH + 700
    folder = tmp_path / "attempts" / "a1"
    folder.mkdir(parents=True)
    (folder / "events.jsonl").write_text("".join(e.model_dump_json() + "\n" for e in own))
    app = ReplayApp(ReplayModel(events, run_dir=tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        app.model.go(started - 1)
        app.show_cursor()
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        assert ("a1 job:job-1", "loss") not in screen.curve_set.series  # not started yet
        for index, points in ((first, [3.0]), (second, [3.0, 1.0])):
            app.model.go(index)
            app.show_cursor()
            screen.redraw(only_if_changed=True)
            series = screen.curve_set.series[("a1 job:job-1", "loss")]
            assert [p.value for p in series.shown()] == points


# --- snapshots -----------------------------------------------------------------------------


async def _open_view(pilot: Any) -> None:
    await pilot.pause()
    await pilot.press("v")
    await pilot.pause()


def test_snapshot_curves_80x24(snap_compare: Any) -> None:
    assert snap_compare(
        MlraApp(events=training_run()), terminal_size=(80, 24), run_before=_open_view
    )


def test_snapshot_curves_wide(snap_compare: Any) -> None:
    assert snap_compare(
        MlraApp(events=training_run()), terminal_size=(140, 40), run_before=_open_view
    )


def loss_and_accuracy_run() -> list[ev.Event]:
    """tiny-lm's shape: `python train.py` prints a loss falling from 4 and an accuracy
    rising to 0.78, and a validation scores 0.78: a loss and an accuracy on one axis
    squash the loss into one row, so they are drawn in two panels."""
    events = training_run()
    start = ev.JobStarted(job="job-1", command="python train.py --steps 600", log="j.log")
    accuracy = metrics(
        "job:job-1",
        *[("val_accuracy", 0.78 - 0.5 * math.exp(-i / 8), i * 20, 100 + i * 10) for i in range(30)],
    )
    check = ev.Validation(
        artifact="submission", ok=True, metric="accuracy", score=0.78, higher_is_better=True
    )
    kept = [e for e in events if not isinstance(e, (ev.JobStarted, ev.Validation))]
    out = numbered([*kept[:-1], start, accuracy, check, kept[-1]])
    for event in out[-4:]:
        event.t = max(event.t, 400.0)
        event.ts = EPOCH + event.t
    return out


async def test_a_loss_and_an_accuracy_are_drawn_in_two_panels_named_after_the_script() -> None:
    app = MlraApp(events=loss_and_accuracy_run())
    async with app.run_test(size=(80, 24)) as pilot:
        await _open_view(pilot)
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        loss, score = screen.query(PlotextPlot)
        assert loss.display and score.display
        assert "train.py loss" in loss.plt.build()
        assert "val_accuracy" not in loss.plt.build()
        assert "train.py val_accuracy" in score.plt.build()
        assert "validation accuracy" in score.plt.build()
        listed = [str(o.prompt) for o in screen.query_one(SelectionList).options]
        assert [line.split()[:2] for line in listed] == [
            ["train.py", "loss"],
            ["train.py", "val_accuracy"],
        ]


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_snapshot_curves_loss_and_accuracy(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(
        MlraApp(events=loss_and_accuracy_run()), terminal_size=size, run_before=_open_view
    )


# --- a whole scripted run ------------------------------------------------------------------

TRAINER = (
    "for i in $(seq 0 29); do "
    'echo "step $i loss $(awk -v i=$i \'BEGIN { printf "%.4f", 5 * exp(-i / 10) }\')"; '
    "done"
)


async def test_a_live_run_whose_job_prints_a_falling_loss_shows_a_falling_curve(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", {"name": "job_start", "arguments": {"command": TRAINER, "name": "train"}}),
            turn("", call("job_wait", job="train", timeout=120)),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("validate", path="answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer", model="openai/test", runs_dir=tmp_path, run_id="c", isolation="none"
        )
        controller = RunController(config, load_task(answer_task), provider)
        controller.prepare()
        finished = asyncio.Event()
        controller.subscribe(lambda e: finished.set() if isinstance(e, ev.RunFinished) else None)
        app = MlraApp(controller=controller, make_agent=agent_for)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("v")  # open before anything was read: it fills as points come
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, CurvesScreen)
            await asyncio.wait_for(finished.wait(), 60)
            while app.state.finished is None:  # the last batch reaches the console
                await pilot.pause(0.05)
            screen.redraw(only_if_changed=True)
            assert [s.label for s in screen.shown_series()] == ["job:job-1 loss"]
            [line] = drawn(screen.shown_series(), by_step=True, log=False)
            assert line.x == [float(i) for i in range(30)]
            assert line.y[0] == 5.0 and line.y == sorted(line.y, reverse=True)
            assert [(v.metric, v.score) for v in screen.curve_set.validations] == [
                ("exact_match", 0.5)
            ]
            plot = plotted(app)
            # the job's loss above, the validation's exact_match (a score) below
            assert "job-1 loss" in plot and "validation exact_match" in plot
            await pilot.press("escape")
            await pilot.pause()
            assert not isinstance(app.screen, CurvesScreen)


@pytest.fixture
def trained_and_held(tmp_path: Path, answer_task: Path) -> Iterator[LiveRun]:
    """A headless run (a child process) whose job printed a falling loss, held on a
    later command."""
    script = {
        "supervisor": [
            turn("", plan("Answer the question")),
            turn("", call("assign_subtask", step_id="1", instructions="Train, then answer.")),
            turn("", call("submit", path="answer.txt", note="the answer")),
        ],
        "worker": [
            turn("", {"name": "job_start", "arguments": {"command": TRAINER, "name": "train"}}),
            turn("", call("job_wait", job="train", timeout=120)),
            turn("", call("bash", command=HELD)),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    yield from _start_run(tmp_path, answer_task, script=script)


async def test_an_attached_console_draws_the_curves_of_a_run_in_another_process(
    trained_and_held: LiveRun,
) -> None:
    """A console attached to a run in another process reads the curves from the run's
    past, and `v` shows them."""
    run = trained_and_held
    app = AttachApp(RemoteRun(run.run_dir))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_wait(pilot, "the job's curve", lambda: app.curves.series)
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        [line] = drawn(screen.shown_series(), by_step=True, log=False)
        assert line.label == "job:job-1 loss" and line.x == [float(i) for i in range(30)]
        assert line.y == sorted(line.y, reverse=True)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, CurvesScreen)
    code = run.finish()
    assert code == 0, run.proc.stderr.read().decode()[-3000:] if run.proc.stderr else ""


def _y_ticks(built: str) -> list[float]:
    """The numbers plotext writes left of a plot's frame: its y axis's ticks."""
    ticks: list[float] = []
    for line in re.sub(r"\x1b\[[0-9;]*m", "", built).splitlines():
        left = re.split(r"[┤│┼├]", line, maxsplit=1)[0].strip()
        with contextlib.suppress(ValueError):
            ticks.append(float(left))
    return ticks


async def test_an_accuracys_axis_stays_within_0_and_1() -> None:
    """The validation panel ran 0.65 to 1.17 for an accuracy of at most 0.78 (plotext's
    own padding): an axis of values in [0, 1] now stays within [0, 1]."""
    events = training_run()
    for event in events:  # the search's shape: a loss, and one validation of an accuracy
        if isinstance(event, ev.Validation):
            event.metric, event.score, event.higher_is_better = "accuracy", 0.91, True
    app = MlraApp(events=events)
    async with app.run_test(size=(80, 24)) as pilot:
        await _open_view(pilot)
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        _, score = screen.query(PlotextPlot)
        ticks = _y_ticks(score.plt.build())
        assert ticks and 0.0 <= min(ticks) and max(ticks) <= 1.0, ticks
        title = str(screen.query_one("#curves-title", Static).render())
        assert title.startswith("Curves · 1 shown of 1"), title
