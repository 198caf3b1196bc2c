"""The headless transcript's heartbeats: a command that runs for minutes gets a line at
least every minute of run clock, with its elapsed time, its newest metric, its count
and the time left; timed by the events' own run clock (a replay of the same log prints
the same lines), so these tests feed a run's events as its log holds them, 90 s of run
clock in no time at all."""

from __future__ import annotations

import io
import itertools
import re
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import encode_event
from mlra.console.text.headless import TranscriptDisplay

COMMAND = "python train.py --steps 600"


def _training_run(seconds: int = 90) -> list[ev.Event]:
    """A command that trains for `seconds` of run clock: it prints `step N/600 loss X`
    every 10 s, mlra reads the loss into `metrics`, and the run samples its resources
    every second, as a live run's log does."""
    events: list[ev.Event] = [
        ev.ToolCall(
            call_id="c1", agent="worker", tool="bash", arguments={"command": COMMAND}, t=5.0
        )
    ]
    for second in range(6, 5 + seconds):
        events.append(_sample(second))
        if second % 10 == 0:
            step = (second - 5) * 200 // 30  # 200 steps every 30 s: 600 in 90 s
            loss = round(6.0 - step / 145, 2)
            events.append(
                ev.ToolOutput(call_id="c1", text=f"step {step}/600 loss {loss}\n", t=second)
            )
            events.append(
                ev.Metrics(
                    source="command:c1",
                    call_id="c1",
                    points=[ev.MetricPoint(name="loss", value=loss, step=step, wall=second)],
                    t=second,
                )
            )
    events.append(
        ev.ToolResult(
            call_id="c1",
            tool="bash",
            agent="worker",
            ok=True,
            output="done",
            exit_code=0,
            duration_s=seconds,
            t=5.0 + seconds,
        )
    )
    return events


def _sample(t: float) -> ev.ResourceSample:
    return ev.ResourceSample(
        cpu_percent=90, ram_used_mb=1, ram_total_mb=8, disk_workspace_mb=1, t=float(t)
    )


def _lines(events: list[ev.Event], heartbeat_s: float | None = 30.0) -> list[str]:
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False, heartbeat_s=heartbeat_s)
    for event in events:
        display.on_event(event)
    return out.getvalue().splitlines()


def _clock(line: str) -> float:
    """The run clock a transcript line is stamped with (`[1m05s] ...`)."""
    stamp = re.match(r"\[(?:(\d+)m)?(\d+)s\]", line)
    assert stamp is not None, line
    return int(stamp[1] or 0) * 60 + int(stamp[2])


def test_a_90s_command_gets_a_line_at_least_every_minute_with_its_progress() -> None:
    lines = _lines(_training_run(90))
    stamped = [line for line in lines if line.startswith("[")]
    assert stamped[0].endswith(f"$ {COMMAND}")
    times = [_clock(line) for line in stamped] + [95]  # the ✓ line ends it at 95 s
    assert max(b - a for a, b in itertools.pairwise(times)) <= 60
    beats = [line for line in stamped if "still running" in line]
    assert len(beats) >= 2, lines
    # Its elapsed time, its count against the total, its newest loss and the time left.
    assert beats[0] == (
        f"[35s] … $ {COMMAND} still running, 30s · step 166/600 loss 4.86 · ETA 1m00s"
    ), beats
    assert re.search(r"step \d+/600 loss \d\.\d+ · ETA \d", beats[-1])
    assert lines[-2:] == ["    ✓ exit 0 · 90.0s", "    │ done"]


def test_no_heartbeat_while_lines_come_or_once_the_command_ended() -> None:
    """A command shorter than the interval gets none; after it ends, the run's ticks
    alone (nothing running) print nothing."""
    short = _training_run(20)
    idle = [_sample(s) for s in range(26, 200)]
    assert not [line for line in _lines(short + idle) if "…" in line]


def test_the_interval_is_a_setting_and_a_replay_prints_the_same_lines() -> None:
    events = _training_run(90)
    every_10 = [line for line in _lines(events, heartbeat_s=10) if "still running" in line]
    assert len(every_10) >= 5
    assert _lines(events) == _lines(events)  # timed by the log alone: no clock of its own
    assert not [line for line in _lines(events, heartbeat_s=0) if "still running" in line]


def test_waiting_for_attempts_is_said_in_words() -> None:
    events: list[ev.Event] = [
        ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=1.0),
        ev.ToolCall(
            call_id="w1", agent="worker", tool="attempt_wait", arguments={"timeout": 3600.0}, t=2.0
        ),
    ]
    events += [_sample(s) for s in range(3, 125)]
    beats = [line for line in _lines(events) if "…" in line]
    assert beats[0] == "[32s] … waiting for a1 (30s of up to 60m) · running: a1 31s"
    assert len(beats) == 4


def test_a_wait_is_bounded_by_the_runs_time_left() -> None:
    """An hour's wait asked of a 20-minute run lasts at most its 18 minutes left."""
    started = ev.RunStarted(
        run_id="r",
        task="tiny-lm",
        task_title="t",
        model="baseline",
        limits=ev.Limits(time_limit_s=1200),
        sandbox=ev.SandboxInfo(
            kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/r/w"
        ),
        t=0.0,
    )
    events: list[ev.Event] = [
        started,
        ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=1.0),
        ev.ToolCall(
            call_id="w1", agent="baseline", tool="attempt_wait", arguments={"timeout": 3600.0},
            t=120.0,
        ),
    ]  # fmt: skip
    events += [_sample(s) for s in range(121, 160)]
    beats = [line for line in _lines(events) if "…" in line]
    assert beats[0].startswith("[2m30s] … waiting for a1 (30s of up to 18m) · running: a1"), beats


def test_a_resumed_runs_wait_line_and_its_heartbeats_say_one_bound() -> None:
    """A resumed run's printer sees no `run_started`, only the resume's `--time-limit`:
    the wait's line said it waits up to the 8 minutes left, its heartbeats "up to 60m",
    the hour asked (each folded the run's limit its own way)."""
    events: list[ev.Event] = [
        ev.RunResumed(interrupted_calls=[], settings={"time_limit_s": 600.0}, t=100.0),
        ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=101.0),
        ev.ToolCall(
            call_id="w1", agent="supervisor", tool="attempt_wait",
            arguments={"attempt": "a1", "timeout": 3600.0}, t=120.0,
        ),
    ]  # fmt: skip
    events += [_sample(s) for s in range(121, 160)]
    lines = _lines(events)
    assert "[2m00s] supervisor attempt_wait for a1, up to 8m" in lines, lines
    beats = [line for line in lines if "…" in line]
    assert beats and all("(30s of up to 8m)" in line for line in beats), beats


def test_a_resumed_runs_heartbeats_say_the_limit_its_past_recorded() -> None:
    """`mlra resume` with no `--time-limit`: its printer, subscribed as the run goes on,
    saw neither the `run_started` that set 20 minutes nor the wait the resume takes up
    under its call id; it is given the run's past, and the wait's heartbeats say its
    bound, the 18 minutes the run had left as it began."""
    started = ev.RunStarted(
        run_id="r",
        task="tiny-lm",
        task_title="t",
        model="baseline",
        limits=ev.Limits(time_limit_s=1200),
        sandbox=ev.SandboxInfo(
            kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/r/w"
        ),
        t=0.0,
    )
    past: list[ev.Event] = [
        started,
        ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=1.0),
        ev.ToolCall(
            call_id="w1", agent="supervisor", tool="attempt_wait",
            arguments={"attempt": "a1", "timeout": 3600.0}, t=120.0,
        ),
    ]  # fmt: skip
    live: list[ev.Event] = [ev.RunResumed(interrupted_calls=["w1"], t=125.0)]
    live += [_sample(s) for s in range(126, 190)]
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    display.took_up(past)
    for event in live:
        display.on_event(event)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[2m05s] ── the run was resumed here ──", lines
    beats = [line for line in lines if "…" in line]
    assert beats[0].startswith("[2m35s] … waiting for a1 (35s of up to 18m)"), beats


def test_a_resumed_search_says_it_waits_again_for_its_attempts() -> None:
    """A search killed while it waited for its attempts is resumed: the wait is run again
    under its call id (no new `tool_call`), and the resumed run's transcript said nothing
    more until the search ended. A command the kill cut short is answered "interrupted"
    at once: no heartbeat for it."""
    events: list[ev.Event] = [
        ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=1.0),
        ev.ToolCall(call_id="c1", agent="worker", tool="bash", arguments={"command": "x"}, t=2),
        ev.ToolCall(
            call_id="w1", agent="worker", tool="attempt_wait", arguments={"timeout": 3600.0}, t=2.0
        ),
        _sample(3),
        ev.RunResumed(interrupted_calls=["c1", "w1"], t=3.0),
        ev.ToolResult(
            call_id="c1",
            tool="bash",
            agent="worker",
            ok=False,
            error="interrupted",
            output="",
            t=3.0,
        ),
    ]
    events += [_sample(s) for s in range(4, 70)]
    beats = [line for line in _lines(events) if "…" in line]
    assert beats, _lines(events)
    assert all("waiting for a1" in line for line in beats), beats


def test_a_call_that_waited_for_approval_when_the_run_was_killed_runs_on_told_after_resume() -> (
    None
):
    """A call held at a breakpoint when the run was killed is asked again under its id
    after the resume (no new `tool_call`), approved, and run: it was dropped from what
    runs, so its long command had no heartbeat."""
    events: list[ev.Event] = [
        ev.ToolCall(call_id="c1", agent="worker", tool="bash", arguments={"command": "train"}, t=2),
        _sample(3),
        ev.RunResumed(interrupted_calls=[], t=3.0),
    ]
    events += [_sample(s) for s in range(4, 70)]
    beats = [line for line in _lines(events) if "…" in line]
    assert beats and all("train" in line for line in beats), beats


def test_waiting_for_attempts_gives_each_ones_progress_from_its_own_log(tmp_path: Path) -> None:
    """A search's attempt trains in a run of its own: the wait's line reads its log
    (`attempts/a1/events.jsonl`) as it was at the time (by the events' wall clock)."""
    attempt_log = tmp_path / "attempts" / "a1" / "events.jsonl"
    attempt_log.parent.mkdir(parents=True)
    trained = [
        ev.ToolCall(call_id="c1", agent="worker", tool="bash", arguments={"command": "x"}, t=1),
        ev.ToolOutput(call_id="c1", text="step 200/600 loss 4.62\n", t=20.0, ts=1020.0),
        ev.ToolOutput(call_id="c1", text="step 400/600 loss 4.1\n", t=40.0, ts=1040.0),
    ]
    for seq, event in enumerate(trained, 1):
        event.seq = seq
    attempt_log.write_bytes(b"".join(encode_event(e) for e in trained))
    events: list[ev.Event] = [
        ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=1.0, ts=1001),
        ev.ToolCall(call_id="w1", agent="worker", tool="attempt_wait",
                    arguments={"timeout": 3600.0}, t=2.0, ts=1002.0),
    ]  # fmt: skip
    for s in range(3, 70):
        sample = _sample(s)
        sample.ts = 1000.0 + s
        events.append(sample)
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    display.attempts_in(tmp_path)
    for event in events:
        display.on_event(event)
    beats = [line for line in out.getvalue().splitlines() if "…" in line]
    assert beats[0] == (
        "[32s] … waiting for a1 (30s of up to 60m) · running: a1 31s (step 200/600 loss 4.62 · ETA 38s)"
    )
    assert beats[1].endswith("a1 1m01s (step 400/600 loss 4.1 · ETA 20s)")


def test_an_attempt_wait_call_reads_in_words() -> None:
    from mlra.console.text.event_lines import describe_call

    assert describe_call("attempt_wait", {"timeout": 3600.0}) == (
        "attempt_wait for any attempt, up to 60m"
    )
    assert describe_call("attempt_wait", {"attempt": "a2", "timeout": 90}) == (
        "attempt_wait for a2, up to 1m30s"
    )


def test_a_bar_after_the_training_steps_does_not_stand_for_its_progress() -> None:
    """tiny-lm's train.py prints `step 300/300 ...`, then transformers saves the model
    under a tqdm bar: the heartbeat said `1/1 loss 4.444`, the bar's count."""
    events = _training_run(60)[:-1]  # still running: no result yet
    shards = "Writing model shards:   0%|          | 0/1 [00:00<?, ?it/s]\r"
    shards += "Writing model shards: 100%|##########| 1/1 [00:00<00:00, 579.32it/s]\n"
    events.append(ev.ToolOutput(call_id="c1", text=shards, t=61.0))
    events += [_sample(s) for s in range(62, 100)]
    beats = [line for line in _lines(events) if "still running" in line]
    assert "1/1" not in beats[-1] and "step 366/600 loss 3.48" in beats[-1], beats


def test_waiting_for_attempts_says_which_attempt_leads() -> None:
    """A headless reader of a long wait is told the best attempt so far, as the console's
    status line tells it."""
    events: list[ev.Event] = [
        ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=1.0),
        ev.AttemptFinished(attempt="a1", status="validated", score=0.7802, metric="acc", t=2.0),
        ev.AttemptStarted(attempt="a2", operator="draft", folder="attempts/a2", t=2.0),
        ev.ToolCall(
            call_id="w1", agent="worker", tool="attempt_wait", arguments={"timeout": 3600.0}, t=2.0
        ),
    ]
    events += [_sample(s) for s in range(3, 40)]
    beats = [line for line in _lines(events) if "…" in line]
    assert (
        beats[0] == "[32s] … waiting for a2 (30s of up to 60m) · best a1 0.7802 · running: a2 30s"
    )


def test_attempts_running_while_the_supervisor_thinks_get_a_heartbeat() -> None:
    """An LLM supervisor starts an attempt and asks its model what next: the attempt ran
    for minutes with nothing printed, since only a wait for it had a heartbeat."""
    events: list[ev.Event] = [
        ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=1.0),
        ev.AttemptFinished(attempt="a1", status="validated", score=0.5, metric="acc", t=2.0),
        ev.AttemptStarted(attempt="a2", operator="draft", folder="attempts/a2", t=2.0),
        ev.StepStarted(agent="supervisor", step=3, turn=3, t=2.0),
    ]
    events += [_sample(s) for s in range(3, 40)]
    beats = [line for line in _lines(events) if "…" in line]
    assert beats[0] == "[32s] … attempts running: a2 30s · best a1 0.5"


def test_a_slow_model_call_gets_heartbeats_reading_then_writing() -> None:
    """A local model on a busy CPU read tiny-lm's prompt for a minute and wrote its plan
    for three more, and the headless transcript printed nothing all that time: a model
    call in flight with nothing else running gets the heartbeat, saying how it goes."""
    events: list[ev.Event] = [ev.StepStarted(agent="supervisor", step=1, turn=1, t=1.0)]
    for second in range(2, 130):
        events.append(_sample(second))
        if second == 66:
            events.append(ev.ModelAnswering(agent="supervisor", turn=1, first_token_s=65.0, t=66))
        if second >= 66 and second % 4 == 2:
            events.append(ev.TextDelta(agent="supervisor", turn=1, text="x" * 160, t=second))
    events.append(ev.ModelCall(agent="supervisor", model="openai/m", turn=1, t=130.0))
    beats = [line for line in _lines(events) if "model" in line]
    assert beats[:2] == [
        "[31s] … supervisor's model is still reading the prompt, 30s",
        "[1m01s] … supervisor's model is still reading the prompt, 1m00s",
    ], beats
    assert beats[2] == (
        "[1m31s] … supervisor's model still writing, 1m30s · ~11 tok/s (prompt read in 1m05s)"
    ), beats
    assert len(beats) == 4  # and none once its answer is in


def test_a_command_edited_at_its_breakpoint_is_named_as_it_runs() -> None:
    """Edited at its breakpoint (`e`, `mlra ctl RUN edit`), the call runs the user's
    command: its heartbeats name that one. Before, they named the model's unedited
    command (`… $ python train.py --steps 600 still running`), the transcript's own
    `user edit, runs:` line notwithstanding."""
    edited = "python train.py --steps 20"
    call, *rest = _training_run(90)
    events: list[ev.Event] = [
        call,
        ev.ApprovalRequested(call_id="c1", tool="bash", arguments={"command": COMMAND}, t=5.0),
        ev.Control(action="edit", call_id="c1", arguments={"command": edited}, t=5.0),
        ev.ToolStarted(call_id="c1", t=5.0),
        *rest,
    ]
    lines = _lines(events)
    beats = [line for line in lines if "still running" in line]
    assert beats and all(f"$ {edited} still running" in line for line in beats), lines
    assert not [line for line in beats if COMMAND in line]


def test_an_attempts_closing_validation_ticks_though_its_log_goes_quiet(
    tmp_path: Path,
) -> None:
    """At its time limit an attempt's commands stop and mlra validates what it left: its
    log then holds the `validate` call and nothing more until the grade, its run clock
    stopped, while the grading takes minutes on a busy machine. The wait's lines read
    `a1 6m32s (validate 0s)`, then `a1 7m03s (validate 0s)`: how long by the wall clock."""
    attempt_log = tmp_path / "attempts" / "a1" / "events.jsonl"
    attempt_log.parent.mkdir(parents=True)
    closing = [
        ev.ToolCall(call_id="v1", agent="baseline", tool="validate", t=360.5, ts=1360.5,
                    arguments={"path": "submission"}),
        ev.ToolStarted(call_id="v1", t=360.5, ts=1360.5),
    ]  # fmt: skip
    for seq, event in enumerate(closing, 1):
        event.seq = seq
    attempt_log.write_bytes(b"".join(encode_event(e) for e in closing))
    events: list[ev.Event] = [
        ev.AttemptStarted(attempt="a1", operator="draft", folder="attempts/a1", t=0.0, ts=1000),
        ev.ToolCall(call_id="w1", agent="baseline", tool="attempt_wait",
                    arguments={"timeout": 3600.0}, t=0.5, ts=1000.5),
    ]  # fmt: skip
    for s in range(361, 430):
        sample = _sample(s)
        sample.ts = 1000.0 + s
        events.append(sample)
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    display.attempts_in(tmp_path)
    for event in events:
        display.on_event(event)
    beats = [line for line in out.getvalue().splitlines() if "running: a1" in line]
    assert beats[-2].endswith("(validate 30s)") and beats[-1].endswith("(validate 1m00s)"), beats
