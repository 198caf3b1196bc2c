"""`--model replay:RUN` compares honestly: output that differs between any two runs
(timings, rates, dates, `ls -la` times) is no divergence, a real divergence shows
the lines that differ, and a recording that ran out at its deadline ends the
replay the same way rather than as an error.

Recordings are made through the real command line (the one that runs out at its
deadline in-process, its clock held until the call it waits on), the real OpenAI SDK
and the scripted model server; replays run through the command line too.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.fingerprint import normalize, run_names
from mlra.agent.loop.replay_diff import short_diff, steady
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.conftest import ANSWER_TASK, SECRET_ENV, clock_from, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

VOLATILE = (
    "date +%Y-%m-%dT%H:%M:%S.%N; "
    "python -c \"import time; print(f'epoch 1 took {time.time():.6f}s, "
    "{time.time_ns() % 9000 + 1000}.5it/s')\"; "
    "ls -la; cat question.txt"
)
"""Prints what differs on every run (a nanosecond date, a timing, a rate) beside
what does not (the question)."""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env["OPENAI_API_KEY"] = "sk-test-not-a-secret"
    return env


def _record(
    tmp: Path, task: Path, worker: list[dict[str, Any]], *extra: str, run_id: str = "recorded"
) -> tuple[Path, list[ev.Event]]:
    script = {"supervisor": supervisor_answering(), "worker": worker}
    with ScriptedModelServer(script, turn_by_history=True) as server:
        proc = mlra_cli(
            [
                "run",
                str(task),
                "--model",
                "openai/test-model",
                "--base-url",
                server.url_for("openai"),
                "--no-tui",
                "--runs-dir",
                str(tmp / "runs"),
                "--run-id",
                run_id,
                *extra,
            ],
            cwd=tmp,
            env=_env(),
        )
    run_dir = tmp / "runs" / run_id
    assert (run_dir / "events.jsonl").is_file(), proc.stderr
    return run_dir, read_events(run_dir / "events.jsonl")


def _replay(tmp: Path, task: Path, recorded: Path) -> tuple[Any, list[ev.Event]]:
    proc = mlra_cli(
        [
            "run",
            str(task),
            "--model",
            f"replay:{recorded}",
            "--no-tui",
            "--runs-dir",
            str(tmp / "replays"),
            "--run-id",
            "again",
        ],
        cwd=tmp,
        env=_env(),
    )
    return proc, read_events(tmp / "replays" / "again" / "events.jsonl")


def _calls(events: list[ev.Event]) -> list[tuple[str, Any]]:
    return [(e.tool, e.arguments) for e in events if isinstance(e, ev.ToolCall)]


@pytest.fixture(scope="module")
def volatile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a copy of the answer task, a finished run of it whose bash output is volatile)."""
    tmp = tmp_path_factory.mktemp("volatile")
    task = tmp / "answer"
    shutil.copytree(ANSWER_TASK, task)
    worker = [
        turn("Look around.", call("bash", command=VOLATILE)),
        turn("Answer.", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    run_dir, events = _record(tmp, task, worker)
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    return task, run_dir


def test_timings_rates_and_dates_that_differ_are_no_divergence(
    tmp_path: Path, volatile: tuple[Path, Path]
) -> None:
    task, recorded = volatile
    proc, again = _replay(tmp_path, task, recorded)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not any(isinstance(e, ev.ModelError) for e in again)
    then = read_events(recorded / "events.jsonl")
    assert _calls(again) == _calls(then)
    # The outputs did differ, and only in what is volatile.
    outputs = [
        next(e.output for e in events if isinstance(e, ev.ToolResult) and e.tool == "bash")
        for events in (then, again)
    ]
    assert outputs[0] != outputs[1]
    assert steady(outputs[0]) == steady(outputs[1])


def test_a_divergence_shows_the_lines_that_differ(
    tmp_path: Path, volatile: tuple[Path, Path]
) -> None:
    """The task's question changed since the recording: the `cat question.txt` line
    differs, beside a date and a timing that differ too and are not shown."""
    _, recorded = volatile
    task = tmp_path / "answer"
    shutil.copytree(volatile[0], task)
    (task / "starter" / "question.txt").write_text("What is six times eight?\n")
    proc, again = _replay(tmp_path, task, recorded)
    assert proc.returncode == 1
    finished = again[-1]
    assert isinstance(finished, ev.RunFinished) and finished.status == "error"
    message = finished.message
    # model calls 1-2 are the supervisor's; the worker's bash ran at its step 1
    assert "replay diverged at model call 4 (worker, step 2)" in message
    assert "the result of bash call" in message
    assert "line 7: recorded 'What is six times seven?', now 'What is six times eight?'" in message
    assert "took" not in message and "it/s" not in message  # the volatile lines are not shown


def test_a_run_named_by_a_word_replays_under_another_name(tmp_path: Path) -> None:
    """A run named `answer` (`--run-id`) had every `answer` left out of its fingerprints,
    as if each named its folder: its replay, named otherwise, read `write the answer into
    answer.txt` as another request and diverged at its first model call."""
    worker = [
        turn("Answer.", call("bash", command="echo 42 > answer.txt && cat answer.txt")),
        turn("", call("report", summary="answer.txt holds the answer")),
    ]
    recorded, then = _record(tmp_path, ANSWER_TASK, worker, run_id="answer")
    assert isinstance(then[-1], ev.RunFinished) and then[-1].reason == "submitted"
    proc, again = _replay(tmp_path, ANSWER_TASK, recorded)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "diverged" not in proc.stdout + proc.stderr
    assert isinstance(again[-1], ev.RunFinished) and again[-1].reason == "submitted"
    assert _calls(again) == _calls(then)


def test_a_runs_folder_is_left_out_where_a_path_names_it_and_only_there() -> None:
    """The folder, named in full or from its runs folder on, is the same in a recording
    and in its replay; the id as a word, or inside another name, is the run's output."""
    then = run_names("/workspace", "/tmp/a/runs/answer/workspace")
    now = run_names("/workspace", "/tmp/b/replays/again/workspace")
    for text_then, text_now in [
        ("log: /tmp/a/runs/answer/jobs/j1.log", "log: /tmp/b/replays/again/jobs/j1.log"),
        ("see runs/answer/jobs/j1.log.", "see replays/again/jobs/j1.log."),
        ("/workspace/answer.txt holds 42", "/workspace/answer.txt holds 42"),
    ]:
        assert normalize(text_then, then) == normalize(text_now, now), text_then
    for text_then, text_now in [
        ("write the answer", "write the again"),
        ("runs/answer2/x", "replays/again2/x"),
        ("cat answer.txt", "cat again.txt"),
        ("/workspace/answer/x", "/workspace/again/x"),
    ]:
        assert normalize(text_then, then) != normalize(text_now, now), text_then


@pytest.mark.parametrize("workspace", ["answer/workspace", "./answer/workspace"])
def test_a_relative_workspace_leaves_no_bare_name_out(workspace: str) -> None:
    """A workspace named from a folder with no parent: its folder is a bare name, the
    id as a word, which `write the answer` holds."""
    names = run_names(None, workspace)
    assert normalize("write the answer", names) == "write the answer"
    assert normalize(f"ls {workspace}/x", names) == "ls <workspace>/x"


async def _record_to_its_deadline(
    tmp: Path, task: Path, worker: list[dict[str, Any]]
) -> tuple[Path, list[ev.Event]]:
    """A recording (in-process) whose deadline falls while its worker waits on its last
    model call, however long the steps before took on a busy machine: its clock stands
    at 8 s of its 10 s until that call's step starts (the replay, under the recorded
    limit, has 10 s for those steps; a 3 s limit could run out before them, in either)."""
    script = {"supervisor": supervisor_answering(), "worker": worker}

    def last_step(event: ev.Event) -> bool:
        return isinstance(event, ev.StepStarted) and (event.agent, event.step) == (
            "worker",
            len(worker),
        )

    with ScriptedModelServer(script, turn_by_history=True) as server:
        provider = resolve_model("openai/test-model", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer",
            model="openai/test-model",
            runs_dir=tmp / "runs",
            run_id="recorded",
            time_limit_s=10.0,
        )
        controller = RunController(config, load_task(task), provider)
        clock_from(controller, last_step, already=8.0)
        await controller.run(agent_for)
        await provider.aclose()
    run_dir = tmp / "runs" / "recorded"
    return run_dir, read_events(run_dir / "events.jsonl")


async def test_a_recording_that_ran_out_at_its_deadline_ends_the_replay_the_same_way(
    tmp_path: Path,
) -> None:
    """The recorded run reached its time limit while waiting for its model: the replay,
    given every recorded answer, ends there as a deadline, and grades what is there."""
    worker = [
        turn("Answer first.", call("bash", command="echo 42 > answer.txt")),
        {"hang": 60, "times": 1},
    ]
    recorded, then = await _record_to_its_deadline(tmp_path, ANSWER_TASK, worker)
    end = then[-1]
    assert isinstance(end, ev.RunFinished) and end.reason == "deadline"
    proc, again = _replay(tmp_path, ANSWER_TASK, recorded)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not any(isinstance(e, ev.ModelError) for e in again)
    finished = again[-1]
    assert isinstance(finished, ev.RunFinished)
    assert (finished.status, finished.reason) == ("finished", "deadline")
    assert "the recording ends here, after model call 3" in finished.message
    assert "reached its time limit" in finished.message
    graded = [e for e in again if isinstance(e, ev.EvaluationFinished)]
    assert graded and graded[-1].score == 1.0  # graded, as the recorded run was
    assert "run finished (deadline)" in proc.stdout


@pytest.mark.parametrize(
    ("line", "same_as"),
    [
        ("epoch 1 took 12.3s, 45 ms/step", "epoch 1 took 0.9s, 7 ms/step"),
        (
            " 45%|####5     | 45/100 [00:12<00:15, 3.61it/s]\r100%|##########| 100/100 "
            "[00:31<00:00, 3.20it/s]",
            "100%|##########| 100/100 [00:02<00:00, 41.2it/s]",
        ),
        (
            "-rw-r--r-- 1 root root 1234 Jan  2 12:34 train.py",
            "-rw-r--r-- 1 root root 1234 Nov 24  2023 train.py",
        ),
        ("2024-01-02 12:34:56,123 INFO loss 2.31", "2025-11-24 05:01:02,999 INFO loss 2.31"),
        ("real\t0m1.234s", "real\t0m0.010s"),
        ("<Model object at 0x7f3a2c1b2d40>", "<Model object at 0x7f00aa11bb22>"),
        ("850 tokens/s, 12.5 MB/s, 1.2s/it", "9 tokens/s, 1 MB/s, 0.3s/it"),
    ],
)
def test_volatile_output_is_masked(line: str, same_as: str) -> None:
    assert steady(line) == steady(same_as)


@pytest.mark.parametrize(
    ("line", "other"),
    [
        ("accuracy 0.8123", "accuracy 0.8124"),
        ("loss 2.31 at step 30", "loss 2.31 at step 31"),
        ('File "train.py", line 12', 'File "train.py", line 13'),
        (
            "-rw-r--r-- 1 root root 1234 Jan  2 12:34 a.py",
            "-rw-r--r-- 1 root root 1235 Jan  2 12:34 a.py",
        ),
    ],
)
def test_what_a_run_computed_is_not_masked(line: str, other: str) -> None:
    assert steady(line) != steady(other)


def test_a_short_diff_names_lines_and_cuts_long_ones() -> None:
    old = "took 1.2s\nacc 0.5\n" + "x" * 300 + "41" + "y" * 300
    new = "took 3.4s\nacc 0.6\n" + "x" * 300 + "42" + "y" * 300 + "\nextra"
    diff = short_diff(old, new)
    assert diff.startswith("line 2: recorded 'acc 0.5', now 'acc 0.6'")
    assert "41" in diff and "42" in diff and len(diff) < 400
    assert "line 4 'extra' is new" in diff
    assert "took" not in diff
