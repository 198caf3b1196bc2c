"""Search over attempts (agent/loop/attempts.py, agent/agents/search.py): scripted models and the
baseline agent's recipe variants on the small `answer` task, real sandboxes and real
grading."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.run_result import RunResult
from mlra.agent.record.state import fold
from mlra.agent.run.controller import RunController
from mlra.agent.run.resume import load_run, resume_controller
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import TaskSpec, load_task
from tests.conftest import answer_copy, answer_task_as
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, turn


def _variant_task(answer_task: Path, tmp_path: Path) -> Path:
    """The answer task with a recipe that takes a variable, and variants of it: 41 is
    wrong on the validation split (0.0), 42 half right (0.5), 24 half right too."""
    return answer_task_as(
        answer_task,
        tmp_path,
        "answer-variants",
        (
            'submit = "answer.txt"',
            'submit = "answer.txt"\nvars = { n = "41" }\n'
            'variants = [{}, { n = "40" }, { n = "42" }, { n = "43" }]',
        ),
        ('python -c \\"print(6 * 7)\\"', "echo {n}"),
    )


def _events(run_dir: Path) -> list[ev.Event]:
    return read_events(run_dir / "events.jsonl")


def greedy_search(task: TaskSpec, tmp_path: Path, attempts: int, **settings: Any) -> RunController:
    """The baseline's greedy search of `task`, unisolated, in tmp_path/runs."""
    cfg = RunConfig(
        task=task.name,
        model="baseline",
        runs_dir=tmp_path / "runs",
        isolation="none",
        search="greedy",
        attempts=attempts,
        **settings,
    )
    return RunController(cfg, task, None)


def sleeping_variant_task(answer_task: Path, tmp_path: Path, vars_: str, variants: str) -> TaskSpec:
    """The variant task whose recipe sleeps {s} seconds before it answers {n}: `vars_`
    and `variants` replace its defaults (TOML inline tables)."""
    task_dir = _variant_task(answer_task, tmp_path)
    toml = (task_dir / "task.toml").read_text()
    toml = toml.replace('vars = { n = "41" }', f"vars = {vars_}")
    toml = toml.replace(
        'variants = [{}, { n = "40" }, { n = "42" }, { n = "43" }]', f"variants = {variants}"
    )
    toml = toml.replace('"echo {n}', '"sleep {s}; echo {n}')
    (task_dir / "task.toml").write_text(toml)
    return load_task(task_dir)


async def _scripted_search(
    runs: Path,
    answer_task: Path,
    script: Mapping[str, object],
    *,
    during: Callable[[RunController], Awaitable[None]] | None = None,
    release: tuple[str, Callable[[RunController], bool]] | None = None,
    **settings: object,
) -> tuple[RunController, RunResult, ScriptedModelServer]:
    """A run of the answer task with a scripted model, to its end, in `runs`: its
    controller, its result and the server (what each role was sent stays readable).
    `during` acts on the run while it goes; `release` is a hold of the script (`{"hold":
    name}`) and when to let it go (polled each millisecond, at most 2 min), let go at
    the run's end in any case, so a run that failed early does not leave it held.
    `settings` are the run's (isolation none unless given; `sandbox="docker"`,
    `image=...` for a Docker run)."""
    config: dict[str, object] = {"isolation": "none", **settings}
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        cfg = RunConfig.model_validate(
            {"task": "answer", "model": "openai/test", "runs_dir": runs, **config}
        )
        controller = RunController(cfg, load_task(answer_task), provider)

        async def let_go(name: str, ready: Callable[[RunController], bool]) -> None:
            async with asyncio.timeout(120):
                while not ready(controller):  # noqa: ASYNC110
                    await asyncio.sleep(0.001)
            server.release(name)

        side = asyncio.ensure_future(during(controller)) if during is not None else None
        held = asyncio.ensure_future(let_go(*release)) if release is not None else None
        try:
            result = await controller.run(agent_for)
        finally:
            if release is not None:
                server.release(release[0])
            early = held is not None and not held.done()
            for task in (side, held):
                if task is not None and not task.done():
                    task.cancel()
        if early:
            await provider.aclose()
            pytest.fail(f"the run ended before its hold {release} was let go")
        for task in (side, held):
            if task is not None:
                await task  # its failure is the test's
        await provider.aclose()
    return controller, result, server


async def test_the_baseline_searches_the_recipes_variants_greedily(
    tmp_path: Path, answer_task: Path
) -> None:
    """Two drafts (41, 40: both wrong), then no validated best to improve, so the policy
    drafts on: 42 validates at 0.5 and is submitted; graded on the test split (1.0)."""
    task = load_task(_variant_task(answer_task, tmp_path))
    controller = greedy_search(task, tmp_path, 3)
    result = await controller.run(agent_for)
    events = _events(controller.run_dir)
    started = [e for e in events if isinstance(e, ev.AttemptStarted)]
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    assert [s.variant for s in started] == [{}, {"n": "40"}, {"n": "42"}]
    assert [finished[a].score for a in ("a1", "a2", "a3")] == [0.0, 0.0, 0.5]
    assert all(finished[a].status == "validated" for a in finished)
    # What each tried, the plain recipe too (its summary was empty: "attempt a1" alone in
    # the Experiments pane, a blank "what" in the diff beside "recipe with n=40").
    assert [finished[a].summary for a in ("a1", "a2")] == [
        "the recipe as it is",
        "recipe with n=40",
    ]
    submission = next(e for e in events if isinstance(e, ev.Submission))
    assert submission.attempt == "a3" and submission.frozen == finished["a3"].kept
    assert result.score == 1.0 and result.reason == "submitted"
    assert result.attempts is not None
    assert (result.attempts.tried, result.attempts.submitted) == (3, "a3")
    assert result.attempts.validation_to_test_gap == 0.5
    # Each attempt is a run of its own, never graded on the test split.
    for attempt in ("a1", "a2", "a3"):
        own = _events(controller.run_dir / "attempts" / attempt)
        assert not any(isinstance(e, ev.EvaluationFinished) for e in own)
        assert any(isinstance(e, ev.Validation) for e in own)


async def test_more_attempts_than_the_time_holds_each_get_the_least_an_attempt_needs(
    tmp_path: Path, answer_task: Path
) -> None:
    """--attempts 40 in the task's 5 minutes: a share of 7.5 s each was refused ("less
    than the 30 s one needs") with the whole run's time left, so the search ran nothing
    and ended "none of the 0 attempts"; each now gets 30 s while the run has them."""
    task = load_task(_variant_task(answer_task, tmp_path))
    controller = greedy_search(task, tmp_path, 40)
    result = await controller.run(agent_for)
    started = [e for e in _events(controller.run_dir) if isinstance(e, ev.AttemptStarted)]
    assert len(started) == 4  # every variant the recipe declares
    assert started[0].time_limit_s == 30.0
    assert result.reason == "submitted" and result.score == 1.0


async def test_a_search_that_could_start_no_attempt_says_why(
    tmp_path: Path, answer_task: Path
) -> None:
    """20 s for the whole run, less than an attempt needs: it ended "none of the 0
    attempts ended with a validated artifact", as if attempts had run and failed."""
    task = load_task(_variant_task(answer_task, tmp_path))
    result = await greedy_search(task, tmp_path, 3, time_limit_s=20).run(agent_for)
    assert result.reason == "no_submission"
    assert re.fullmatch(
        r"no attempt could start \(attempt_start: \d+ s of the run's time are left, less than "
        r"the 30 s an attempt needs\), so nothing was submitted",
        result.message,
    ), result.message


def _search_script(worker_turns: list[list[dict[str, object]]]) -> dict[str, object]:
    supervisor = [
        turn("Plan.", plan("Draft three answers", "Improve the best", "Submit")),
        turn("", call("attempt_start", instructions="Write 41 into answer.txt")),
        turn("", call("attempt_wait", attempt="a1")),
        turn("", call("attempt_start", instructions="Write 40 into answer.txt")),
        turn("", call("attempt_wait", attempt="a2")),
        turn("", call("attempt_start", instructions="Write 24 into answer.txt")),
        turn("", call("attempt_wait", attempt="a3")),
        turn(
            "",
            call(
                "attempt_start",
                parent="a3",
                operator="improve",
                instructions="Try 42 instead",
            ),
        ),
        turn("", call("attempt_wait", attempt="a4")),
        turn("", call("attempts")),
        turn("", call("submit", attempt="a4", note="the improved one")),
    ]
    worker: list[dict[str, object]] = []
    for turns in worker_turns:
        worker += turns
    return {"supervisor": supervisor, "worker": worker}


def _writes(value: str, summary: str) -> list[dict[str, object]]:
    return [
        turn("", call("bash", command=f"echo {value} > answer.txt")),
        turn("", call("report", summary=summary)),
    ]


async def test_three_drafts_and_an_improvement_of_the_best_each_validated(
    tmp_path: Path, answer_task: Path
) -> None:
    script = _search_script(
        [
            _writes("41", "wrote 41"),
            _writes("40", "wrote 40"),
            _writes("24", "wrote 24"),
            [
                turn("", call("bash", command="cat answer.txt > parent.txt")),
                *_writes("42", "changed 24 to 42"),
            ],
        ]
    )
    controller, result, server = await _scripted_search(
        tmp_path / "runs", answer_task, script, search="llm", attempts=4
    )
    supervisor_requests = [json.dumps(r.body) for r in server.requests_for("supervisor")]
    events = _events(controller.run_dir)
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    assert {a: f.score for a, f in finished.items()} == {
        "a1": 0.0,
        "a2": 0.0,
        "a3": 0.5,
        "a4": 0.5,
    }
    assert finished["a4"].parent == "a3" and finished["a4"].summary == "changed 24 to 42"
    # a4 started as a copy of a3's workspace: its worker read a3's answer.
    a4 = controller.run_dir / "attempts" / "a4" / "workspace"
    assert (a4 / "parent.txt").read_text().strip() == "24"
    # The supervisor read the tree, best first, with lineage and what each tried.
    table = supervisor_requests[-1]
    assert "a3 > a4" in table and "changed 24 to 42" in table
    # submit(attempt=a4) grades a4's frozen artifact on the test split.
    submission = next(e for e in events if isinstance(e, ev.Submission))
    assert submission.attempt == "a4"
    assert result.score == 1.0 and result.attempts is not None
    assert result.attempts.submitted == "a4"
    state = fold(events)
    assert [n.id for n in state.attempts.ranked()][:2] == ["a3", "a4"]


async def test_one_attempt_cannot_read_another_attempts_files(
    tmp_path: Path, answer_task: Path
) -> None:
    """Attempts run in sandboxes of their own: a1's secret is out of a2's reach, by its
    path in the run folder or by any path up from its own workspace, and so are the
    searching run's log and the runs folder. The runs folder lies where the sandbox
    shows the host (inside the interpreter's prefix), so hiding is what keeps it out."""
    import sys
    import uuid

    runs = Path(sys.prefix) / f"mlra-test-runs-{uuid.uuid4().hex[:8]}"
    try:
        await _probe_the_other_attempt(runs, answer_task)
    finally:
        shutil.rmtree(runs, ignore_errors=True)


async def _probe_the_other_attempt(runs: Path, answer_task: Path) -> None:
    secret_probe = (
        "cat ../../a1/workspace/secret.txt; cat "
        f"{runs}/search/attempts/a1/workspace/secret.txt; "
        f"ls {runs}/search/attempts; cat {runs}/search/events.jsonl; ls {runs}; "
        "echo 42 > answer.txt"
    )
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Keep a secret")),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("attempt_start", instructions="Look around")),
            turn("", call("attempt_wait", attempt="a2")),
            turn("", call("submit", attempt="a2")),
        ],
        "worker": [
            turn("", call("bash", command="echo s3cr3t-a1 > secret.txt; echo 42 > answer.txt")),
            turn("", call("report", summary="kept a secret")),
            turn("", call("bash", command=secret_probe)),
            turn("", call("report", summary="looked")),
        ],
    }
    controller, _, _ = await _scripted_search(
        runs, answer_task, script, isolation="auto", run_id="search", search="llm", attempts=2
    )
    a2 = _events(controller.run_dir / "attempts" / "a2")
    outputs = [e for e in a2 if isinstance(e, ev.ToolResult) and e.tool == "bash"]
    assert outputs, "a2's worker ran its probe"
    assert "s3cr3t-a1" not in outputs[0].output
    # Nor the searching run's own log (a1's instructions and summary), nor the runs folder.
    assert "Keep a secret" not in outputs[0].output and "run_started" not in outputs[0].output
    assert "search" not in outputs[0].output.splitlines()  # `ls` of the runs folder
    assert f"{runs}/search/events.jsonl: No such file" in outputs[0].output
    assert (controller.run_dir / "attempts" / "a1" / "workspace" / "secret.txt").exists()


async def test_the_deadline_stops_every_attempt_within_2_s(
    tmp_path: Path, answer_task: Path
) -> None:
    """Two attempts sleep far past the run's time limit; the deadline ends both, each
    recorded as out of time (not stopped: no person stopped them); nothing validated,
    nothing is graded, and the ending says so."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Sleep")),
            turn("", call("attempt_start", instructions="Sleep too")),
            turn("", call("attempt_wait", timeout=600)),
        ],
        "worker": [
            turn("", call("bash", command="sleep 300", timeout=600)),
            turn("", call("bash", command="sleep 300", timeout=600)),
        ],
    }
    limit: list[float] = []

    async def deadline_once_both_sleep(controller: RunController) -> None:
        """The deadline falls while both attempts sleep, however long their start took
        on a busy machine (a fixed limit had to be 35 s for that): 6 s from when both
        are inside their command, past the deadline watcher's longest nap (5 s)."""
        async with asyncio.timeout(120):
            while not _both_sleep(controller.run_dir):  # noqa: ASYNC110 (the logs' state)
                await asyncio.sleep(0.02)
        limit.append(controller.clock.elapsed() + 6.0)
        controller.clock.limit_s = limit[0]

    controller, _, _ = await _scripted_search(
        tmp_path / "runs",
        answer_task,
        script,
        during=deadline_once_both_sleep,
        search="llm",
        attempts=2,
        attempts_parallel=2,
        time_limit_s=600,
    )
    events = _events(controller.run_dir)
    deadline = next(e for e in events if isinstance(e, ev.RunFinished))
    assert deadline.reason == "deadline"
    finished = [e for e in events if isinstance(e, ev.AttemptFinished)]
    # Each ended with the run (by its deadline, or by its own share of the time, which
    # ends with the run's), within 2 s of the run clock's deadline, with nothing to grade.
    assert len(finished) == 2 and all(f.status == "out of time" for f in finished), finished
    assert all(f.t <= limit[0] + 2 for f in finished), ([f.t for f in finished], limit)
    assert all(f.score is None for f in finished)
    assert not any(isinstance(e, ev.Submission) for e in events)
    assert deadline.message == (
        "the time limit was reached: none of its 2 attempts was validated, so nothing was graded"
    )
    for attempt in ("a1", "a2"):
        own = _events(controller.run_dir / "attempts" / attempt)
        assert isinstance(own[-1], ev.RunFinished)
        sleeps = [e for e in own if isinstance(e, ev.ToolResult) and e.tool == "bash"]
        assert sleeps and not sleeps[0].ok  # the sleep was killed, not let run


async def test_attempts_started_side_by_side_share_the_time_alike(
    tmp_path: Path, answer_task: Path
) -> None:
    """Three attempts, two at a time, in 600 s: the two started together get half the
    time each (two waves), so the third has its half; the second got all 600 s."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="One")),
            turn("", call("attempt_start", instructions="Two")),
            turn("", call("attempt_wait", timeout=60)),
        ],
        "worker": [
            turn("", call("bash", command="echo one")),
            turn("", call("bash", command="echo two")),
        ],
    }
    controller, _, _ = await _scripted_search(
        tmp_path / "runs",
        answer_task,
        script,
        search="llm",
        attempts=3,
        attempts_parallel=2,
        time_limit_s=600,
    )
    started = [e for e in _events(controller.run_dir) if isinstance(e, ev.AttemptStarted)]
    assert [e.attempt for e in started][:2] == ["a1", "a2"]
    assert all(250 < e.time_limit_s <= 300 for e in started[:2]), [e.time_limit_s for e in started]


def _both_sleep(run_dir: Path) -> bool:
    """Both attempts have called their `sleep 300` (the call is logged as it starts)."""
    logs = [run_dir / "attempts" / a / "events.jsonl" for a in ("a1", "a2")]
    return all(log.is_file() and b"sleep 300" in log.read_bytes() for log in logs)


def _both_held(run_dir: Path) -> bool:
    """Both attempts are inside their held command (each printed before waiting)."""
    logs = [run_dir / "attempts" / a / "events.jsonl" for a in ("a1", "a2")]
    return all(log.is_file() and b'"type":"tool_output"' in log.read_bytes() for log in logs)


def test_a_kill_during_two_running_attempts_resumes_with_nothing_lost(
    tmp_path: Path, answer_task: Path
) -> None:
    """SIGKILL while two attempts run (each inside a command): `mlra resume` takes both up
    from their own logs, nothing they did is lost or done again, and the search goes on
    to submit."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import SECRET_ENV, mlra_cli

    task = answer_copy(tmp_path / "task", files={"starter/.hold": ""}, source=answer_task)
    held = "echo 42 > answer.txt && echo held && while [ -e .hold ]; do sleep 0.05; done"
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Answer, slowly")),
            turn("", call("attempt_start", instructions="Answer, slowly too")),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("attempt_wait", attempt="a2")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command=held)),
            turn("", call("report", summary="wrote 42")),
        ],
    }
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env["OPENAI_API_KEY"] = "sk-test-not-a-secret"
    runs = tmp_path / "runs"
    run_dir = runs / "s"
    with ScriptedModelServer(script, turn_by_history=True) as server:
        args = [
            sys.executable, "-m", "mlra", "run", str(task), "--model", "openai/test",
            "--base-url", server.url_for("openai"), "--no-tui", "--runs-dir", str(runs),
            "--run-id", "s", "--search", "llm", "--attempts", "2", "--attempts-parallel", "2",
        ]  # fmt: skip
        proc = subprocess.Popen(
            args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        assert proc.stderr is not None
        try:
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                if _both_held(run_dir):
                    break
                time.sleep(0.01)  # polling files another process writes: nothing to await
            else:
                pytest.fail(f"never held (exit {proc.poll()}): {proc.stderr.read()[-2000:]!r}")
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait()
            proc.stderr.close()
        killed = _events(run_dir)
        killed_children = {a: _events(run_dir / "attempts" / a) for a in ("a1", "a2")}
        assert not any(isinstance(e, ev.RunFinished) for e in killed)
        resumed = mlra_cli(["resume", str(run_dir), "--no-tui"], cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    events = _events(run_dir)
    assert events[: len(killed)] == killed  # nothing recorded is lost or rewritten
    started = [e.attempt for e in events if isinstance(e, ev.AttemptStarted)]
    assert started == ["a1", "a2"]  # taken up, not started again
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    assert {a: f.status for a, f in finished.items()} == {"a1": "validated", "a2": "validated"}
    for attempt, before in killed_children.items():
        after = _events(run_dir / "attempts" / attempt)
        assert after[: len(before)] == before
        assert any(isinstance(e, ev.RunResumed) for e in after[len(before) :])
    submission = next(e for e in events if isinstance(e, ev.Submission))
    assert submission.attempt == "a1"
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


async def test_the_greedy_policy_drafts_debugs_the_buggy_one_and_submits_the_best(
    tmp_path: Path, answer_task: Path
) -> None:
    """AIDE's greedy policy with a model: two drafts (the first leaves no answer, so it
    is buggy, with why), then a debug of the buggy one from its workspace, then the best
    validated attempt is submitted, with no supervisor model turn at all."""
    script = {
        "worker": [
            *_writes("", "forgot the answer"),
            *_writes("24", "wrote 24"),
            turn("", call("bash", command="test -e answer.txt && echo found || echo missing")),
            *_writes("42", "fixed: wrote 42"),
        ]
    }
    script["worker"][0] = turn("", call("bash", command="rm -f answer.txt"))
    controller, result, server = await _scripted_search(
        tmp_path / "runs", answer_task, script, search="greedy", attempts=3
    )
    assert not server.requests_for("supervisor")
    first_prompt = json.dumps(server.requests_for("worker")[0].body)
    events = _events(controller.run_dir)
    started = {e.attempt: e for e in events if isinstance(e, ev.AttemptStarted)}
    finished = {e.attempt: e for e in events if isinstance(e, ev.AttemptFinished)}
    assert [(s.operator, s.parent) for s in started.values()] == [
        ("draft", None),
        ("draft", None),
        ("debug", "a1"),
    ]
    assert "[attempt a1] Write a complete solution" in first_prompt
    assert finished["a1"].status == "buggy"
    assert "could not be validated" in finished["a1"].why and "answer.txt" in finished["a1"].why
    assert (
        "failed" in started["a3"].instructions and finished["a1"].why in started["a3"].instructions
    )
    assert (finished["a2"].score, finished["a3"].score) == (0.5, 0.5)
    # Equal scores: the earlier one is the best, and is what is submitted.
    assert result.attempts is not None and result.attempts.submitted == "a2"
    assert result.score == 0.0  # 24 is right on the validation split only
    assert result.attempts.validation_to_test_gap == -0.5
    # The plan says how the search went: never a search that ran shown "not started".
    plans = [e for e in events if isinstance(e, ev.PlanUpdated)]
    plan = plans[-1]
    assert [(s.id, s.status) for s in plans[-2].steps] == [
        ("search", "done"),
        ("submit", "in_progress"),
    ]
    # Once submitted, the plan says so: a finished run's plan has no step under way.
    assert [(s.id, s.status) for s in plan.steps] == [("search", "done"), ("submit", "done")]
    assert plan.steps[0].title.startswith("Searched: 3 attempts, best a2")
    # The attempts' model calls are the run's: its token totals (result.json, `mlra
    # runs`) are theirs, not 0 (issue 40).
    used = sum(f.tokens for f in finished.values())
    assert used > 0 and result.input_tokens + result.output_tokens == used


async def test_attempt_tools_refuse_what_cannot_be_done_with_one_line(
    tmp_path: Path, answer_task: Path
) -> None:
    """Bad calls are error observations: an unknown parent, a submit of a running or
    unknown attempt, more attempts than allowed; stopping a running one works."""
    script = {
        "supervisor": [
            turn("", call("attempt_start", parent="a9", instructions="x")),
            turn("", call("attempt_start", instructions="Sleep")),
            turn("", call("submit", attempt="a1")),
            turn("", call("attempt_start", instructions="one too many")),
            turn("", call("attempt_stop", attempt="a1")),
            turn("", call("submit", attempt="a1")),
            turn("", call("submit", path="answer.txt")),
        ],
        "worker": [turn("", call("bash", command="sleep 300", timeout=600))],
    }
    controller, _, _ = await _scripted_search(
        tmp_path / "runs", answer_task, script, search="llm", attempts=1
    )
    events = _events(controller.run_dir)
    results = [e for e in events if isinstance(e, ev.ToolResult)]
    said = [(r.tool, r.ok, r.output.splitlines()[0]) for r in results]
    assert said[0][:2] == ("attempt_start", False) and "no attempt 'a9'" in said[0][2]
    assert said[1][:2] == ("attempt_start", True)
    assert said[2][:2] == ("submit", False) and "still running" in said[2][2]
    assert said[3][:2] == ("attempt_start", False) and "--attempts" in said[3][2]
    assert said[4][:2] == ("attempt_stop", True)
    assert said[5][:2] == ("submit", False) and "no validated artifact" in said[5][2]
    finished = next(e for e in events if isinstance(e, ev.AttemptFinished))
    assert (finished.status, finished.why) == ("stopped", "stopped by the supervisor")


async def test_a_wait_with_nothing_to_wait_for_says_so_at_once(
    tmp_path: Path, answer_task: Path
) -> None:
    """A wait for any attempt while none runs (a fork whose running ones were lost) was
    answered at once with "Nothing ended within 300 s", a wait it had not made; a wait
    for an attempt that has ended says it ended."""
    script = {
        "supervisor": [
            turn("", call("attempt_wait", timeout=600)),
            turn("", call("attempt_start", instructions="Sleep")),
            turn("", call("attempt_stop", attempt="a1")),
            turn("", call("attempt_wait", attempt="a1", timeout=600)),
        ],
        "worker": [turn("", call("bash", command="sleep 300", timeout=600))],
    }
    controller, _, _ = await _scripted_search(
        tmp_path / "runs", answer_task, script, search="llm", attempts=1
    )
    waits = [
        r
        for r in _events(controller.run_dir)
        if isinstance(r, ev.ToolResult) and r.tool == "attempt_wait"
    ]
    assert [(r.ok, r.output.splitlines()[0]) for r in waits] == [
        (True, "No attempt is running: there was nothing to wait for."),
        (True, "Ended: a1."),
    ]
    assert all(r.duration_s < 60 for r in waits)


def test_a_batch_runs_each_run_as_a_search(tmp_path: Path, answer_task: Path) -> None:
    """`mlra batch --search greedy --attempts 3`: each run of the batch is an ordinary
    `mlra run` with the same flags, and its result says what the search did."""
    from tests.conftest import mlra_cli

    task = _variant_task(answer_task, tmp_path)
    args = [
        "batch", "--tasks", str(task), "--models", "baseline", "--search", "greedy",
        "--attempts", "3", "--out", str(tmp_path / "b"), "--isolation", "none", "--no-tui",
    ]  # fmt: skip
    proc = mlra_cli(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = list((tmp_path / "b" / "runs").glob("*/result.json"))
    assert len(results) == 1
    result = json.loads(results[0].read_text())
    assert result["attempts"]["tried"] == 3 and result["attempts"]["submitted"] == "a3"
    assert result["score"] == 1.0
    proc = mlra_cli(
        ["batch", "--tasks", str(task), "--models", "baseline", "--attempts", "0"], cwd=tmp_path
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--search", "llm"], "--search llm needs a model"),
        (["--attempts", "2"], "go with --search greedy or llm"),
        (["--attempt-min-time", "5s"], "--attempt-min-time goes with --search greedy or llm"),
        (["--search", "greedy"], "declares no recipe variants"),
        (["--search", "greedy", "--attempts-parallel", "0"], "'0' must be positive"),
    ],
)
def test_search_flags_that_cannot_go_together_are_one_line_and_exit_2(
    tmp_path: Path, answer_task: Path, flags: list[str], said: str
) -> None:
    from tests.conftest import mlra_cli

    args = ["run", str(answer_task), "--model", "baseline", "--no-tui", *flags]
    proc = mlra_cli([*args, "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--attempts", "2", "--attempts-parallel", "5"],
            "--attempts-parallel 5 is more than the 2 attempts this search can start "
            "(--attempts 2): each would get 1/5 of the run's budget and 3/5 of it would "
            "never be used; give --attempts-parallel 2 or less",
        ),
        (
            ["--attempts-parallel", "5"],
            "the 4 attempts this search can start (--attempts, default 4)",
        ),
        (
            ["--attempts", "9", "--attempts-parallel", "6"],
            "the 4 attempts this search can start (task answer-variants's recipe declares 4 variants)",
        ),
    ],
)
def test_more_attempts_at_once_than_the_search_can_start_is_refused(
    tmp_path: Path, answer_task: Path, flags: list[str], said: str
) -> None:
    """K above N would give each attempt 1/K of the run's memory, CPUs and processes,
    leaving the shares of those that can never start unused: refused like any flags that
    cannot go together, and `mlra batch` refuses it before any run starts."""
    from tests.conftest import mlra_cli

    task = _variant_task(answer_task, tmp_path)
    args = ["run", str(task), "--model", "baseline", "--no-tui", "--search", "greedy", *flags]
    proc = mlra_cli([*args, "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
    batch = ["batch", "--tasks", str(task), "--models", "baseline", "--search", "greedy", *flags]
    proc = mlra_cli([*batch, "--out", str(tmp_path / "b")], cwd=tmp_path)
    assert proc.returncode == 2 and said in proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "b").exists()


async def test_a_fork_of_a_search_keeps_the_attempts_ended_by_then(
    tmp_path: Path, answer_task: Path
) -> None:
    """Forked at the step after a2 started: a1 had ended and is shared with the fork (it
    can be built on and submitted); a2 was running, so the fork records it lost; the
    fork's search goes on from there and grades what it submits."""
    from mlra.agent.run.resume import fork_run

    task = load_task(_variant_task(answer_task, tmp_path))
    await greedy_search(task, tmp_path, 3, run_id="src").run(agent_for)
    source = load_run(tmp_path / "runs" / "src")
    a2_call = next(
        e for e in source.events if isinstance(e, ev.AttemptStarted) and e.attempt == "a2"
    ).call_id
    step = next(
        e.step for e in source.events if isinstance(e, ev.ToolCall) and e.call_id == a2_call
    )
    forked = fork_run(
        source, task, at_step=step + 1, run_dir=tmp_path / "runs" / "fork", model="baseline"
    )
    tree = fold(forked.events).attempts
    a1, a2 = tree.get("a1"), tree.get("a2")
    assert a1 is not None and a2 is not None
    assert (a1.status, a2.status) == ("validated", "lost")
    assert (tmp_path / "runs" / "fork" / "attempts" / "a1" / "workspace").is_dir()
    controller = resume_controller(forked, task, None)
    result = await controller.run(agent_for)
    events = _events(controller.run_dir)
    started = [e.attempt for e in events if isinstance(e, ev.AttemptStarted)]
    assert started == ["a1", "a2", "a3"]
    assert result.attempts is not None and result.attempts.submitted is not None
    assert result.score is not None


@pytest.mark.parametrize(
    ("ids", "k", "in_use", "share"),
    [
        (["0", "1", "2", "3"], 2, [], "0,1"),
        (["0", "1", "2", "3"], 2, ["0,1"], "2,3"),
        (["0", "1", "2", "3"], 4, ["0", "1"], "2"),
        (["0"], 2, ["0"], "0"),  # one GPU, two attempts at once: they share it
        ([], 2, [], None),
    ],
)
def test_attempts_running_at_once_get_their_own_share_of_the_gpus(
    ids: list[str], k: int, in_use: list[str], share: str | None
) -> None:
    from mlra.agent.agents.attempt_runs import gpu_share

    assert gpu_share(ids, k, in_use) == share


async def test_pausing_the_run_pauses_its_running_attempts_and_resuming_resumes_them(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Answer")),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt; sleep 1; echo slept")),
            turn("", call("report", summary="wrote 42")),
        ],
    }
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        cfg = RunConfig(
            task="answer",
            model="openai/test",
            runs_dir=tmp_path / "runs",
            isolation="none",
            search="llm",
            attempts=1,
        )
        controller = RunController(cfg, load_task(answer_task), provider)
        run = asyncio.create_task(controller.run(agent_for))
        while (child := controller.attempts.child("a1")) is None or not child.state.running:
            assert not run.done(), run
            await asyncio.sleep(0.01)  # the attempt's own run, seen from here: nothing to await
        controller.pause()
        assert child.controls.paused and child.state.paused
        controller.resume()
        assert not child.controls.paused
        result = await run
        await provider.aclose()
    own = _events(controller.run_dir / "attempts" / "a1")
    actions = [e.action for e in own if isinstance(e, ev.Control)]
    assert actions == ["pause", "resume"]
    assert result.score == 1.0 and result.attempts is not None


def test_the_tree_as_the_supervisor_reads_it_and_its_fingerprint() -> None:
    """Best first with lineage and why the buggy failed; how long each ran is left out
    of the fingerprint a deterministic re-run compares (it differs between any two runs)."""
    from mlra.agent.loop.fingerprint import normalize
    from mlra.agent.record.attempt_tree import AttemptTree

    tree = AttemptTree()
    events: list[ev.Event] = [
        ev.AttemptStarted(t=1, seq=1, attempt="a1", operator="draft", folder="attempts/a1"),
        ev.AttemptFinished(t=50, seq=2, attempt="a1", status="buggy", why="NameError: x"),
        ev.AttemptStarted(t=2, seq=3, attempt="a2", operator="draft", folder="attempts/a2"),
        ev.AttemptFinished(
            t=90,
            seq=4,
            attempt="a2",
            status="validated",
            score=0.7,
            metric="acc",
            summary="bigger model",
            duration_s=88,
        ),
        ev.AttemptStarted(
            t=91,
            seq=5,
            attempt="a3",
            parent="a2",
            operator="improve",
            folder="attempts/a3",
            instructions="lower lr",
        ),
    ]
    for event in events:
        tree.apply(event)
    early, later = tree.render(now=100), tree.render(now=700)
    lines = early.splitlines()
    assert lines[0].startswith("Attempts (3; 1 running; acc, higher is better")
    assert lines[1].startswith("- a2 (best) [0.7] draft, from the starter, ")
    assert "a3 [running] improve, from a2 (a2 > a3)" in early and "lower lr" in early
    assert "a1 [buggy]" in early and "why: NameError: x" in early
    assert early != later and normalize(early) == normalize(later)
