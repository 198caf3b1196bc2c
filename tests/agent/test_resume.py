"""Resume after SIGKILL, fork with an edited action, and deterministic re-execution.

Runs go through the real command line, the real SDKs and the scripted model
server (answering by the length of the conversation, as a stateless model
does, so a resumed run that asks again gets the same answer).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import fold
from tests.conftest import ANSWER_RECIPE, ANSWER_TASK, SECRET_ENV, answer_copy, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, turn

MODEL = "openai/test-model"


def research_script() -> dict[str, Any]:
    """A supervisor with one subtask; a worker taking six steps, one of them held.

    answer.txt is written twice (steps 2 and 5): the scripted worker does not redo a
    call a kill cut short, as a model reading "interrupted" would, so a kill inside
    either write still leaves the answer for the submit. Step 2's command waits while
    `.hold` exists in the workspace: only the mid-command run's task has one, so that
    run is surely killed inside the command, however slowly the machine runs.
    """
    return {
        "supervisor": [
            turn("Plan first.", plan("Answer the question", "Submit")),
            turn("", call("assign_subtask", step_id="1", instructions="Answer question.txt.")),
            turn("Done; marking it.", plan("Answer the question", "Submit", done=1)),
            turn("", call("submit", path="answer.txt", note="the answer")),
        ],
        # Asked once more (a resumed run whose submit was cut short): submit again.
        "supervisor:fallback": turn("", call("submit", path="answer.txt", note="the answer")),
        "worker": [
            turn("Read the question.", call("read_file", path="question.txt")),
            turn("Look around.", call("bash", command=LOOK_AROUND)),
            turn(
                "Draft.", call("write_file", path="notes.md", content="# notes\nthe answer is 42\n")
            ),
            turn("Think slowly.", call("bash", command="sleep 0.2; echo 41 > draft.txt")),
            turn(
                "Write the answer.",
                call("bash", command="echo 42 > answer.txt && echo yes > checked.txt"),
            ),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }


# Prints first (the kill waits for that output), then writes the answer, then waits.
LOOK_AROUND = "ls && echo 42 > answer.txt && while [ -e .hold ]; do sleep 0.05; done && echo looked"


def held_script() -> dict[str, Any]:
    """The script with the supervisor's last answer held back: a run killed before it
    is killed before it could end, whatever the kill's delay. Release with `release`."""
    script = research_script()
    script["supervisor"][-1] = {**script["supervisor"][-1], "hang": 300}
    return script


def release(server: ScriptedModelServer) -> None:
    """Answer the held turn at once from now on (the resumed run asks for it again)."""
    last = server.script["supervisor"][-1]
    server.script["supervisor"][-1] = {k: v for k, v in last.items() if k != "hang"}


def _cmd(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "mlra", *args]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env["OPENAI_API_KEY"] = "sk-test-not-a-secret"
    return env


def _run_args(server: ScriptedModelServer, runs: Path, run_id: str, task: Path) -> list[str]:
    return [
        "run",
        str(task),
        "--model",
        MODEL,
        "--base-url",
        server.url_for("openai"),
        "--no-tui",
        "--runs-dir",
        str(runs),
        "--run-id",
        run_id,
    ]


def _kill_when(args: list[str], log: Path, ready: Callable[[bytes], bool], cwd: Path) -> None:
    """Start a run and SIGKILL it once its log satisfies `ready`.

    The run is held (a held model answer, or a command waiting on `.hold`) past every
    point the tests kill at, so a slow poll only kills later, never too late.
    """
    stderr = cwd / "killed-run.stderr"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            _cmd(args), cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if ready(_read(log)):
                break
            time.sleep(0.005)  # polling a file another process writes: nothing to await
        else:
            pytest.fail(
                f"the run never reached the kill point (exit {proc.poll()}): "
                + stderr.read_text()[-2000:]
            )
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _agent_trace(events: list[ev.Event]) -> list[tuple[Any, ...]]:
    """What the agent did, independent of timing: steps, calls, plans, subtasks."""
    trace: list[tuple[Any, ...]] = []
    for e in events:
        match e:
            case ev.StepStarted():
                trace.append(("step", e.agent, e.step))
            case ev.ToolCall():
                trace.append(("call", e.tool, e.arguments))
            case ev.PlanUpdated():
                trace.append(("plan", tuple((s.id, s.status) for s in e.steps)))
            case ev.SubtaskStarted() | ev.SubtaskFinished():
                trace.append((e.type, e.subtask))
            case ev.Submission():
                trace.append(("submission", e.path))
    return trace


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[ev.Event]:
    """The same scripted run, never interrupted."""
    tmp = tmp_path_factory.mktemp("reference")
    with ScriptedModelServer(research_script(), turn_by_history=True) as server:
        proc = mlra_cli(_run_args(server, tmp / "runs", "ref", ANSWER_TASK), cwd=tmp, env=_env())
    assert proc.returncode == 0, proc.stderr
    return read_events(tmp / "runs" / "ref" / "events.jsonl")


@pytest.mark.parametrize("point", ["random-0", "random-1", "random-2", "mid-command"])
def test_resume_after_sigkill_loses_and_repeats_nothing(
    tmp_path: Path, answer_task: Path, reference: list[ev.Event], point: str
) -> None:
    runs = tmp_path / "runs"
    log = runs / "r" / "events.jsonl"
    ready: Callable[[bytes], bool]
    if point == "mid-command":  # while step 2's command waits on `.hold`: cut short
        answer_task = answer_copy(tmp_path / "task", files={"starter/.hold": ""})
        ready = lambda logged: b'"type":"tool_output"' in logged  # noqa: E731
    else:
        # Any point before the held answer: every event the reference logged before
        # asking for it but its periodic resource samples, which come as time passes.
        held = max(i for i, e in enumerate(reference) if isinstance(e, ev.StepStarted))
        before = sum(1 for e in reference[:held] if not isinstance(e, ev.ResourceSample))
        points = sorted(random.Random(2026).sample(range(3, before + 1), 3))
        kill_at = points[int(point.split("-")[1])]
        ready = lambda logged: logged.count(b"\n") >= kill_at  # noqa: E731
    with ScriptedModelServer(held_script(), turn_by_history=True) as server:
        _kill_when(_run_args(server, runs, "r", answer_task), log, ready, tmp_path)
        release(server)
        before_resume = log.read_bytes()
        torn = not before_resume.endswith(b"\n")
        killed = read_events(log)
        assert not any(isinstance(e, ev.RunFinished) for e in killed), "killed too late"
        proc = mlra_cli(["resume", str(runs / "r"), "--no-tui"], cwd=tmp_path, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "resuming r after" in proc.stdout

    events = read_events(log)
    # Nothing recorded is lost, nothing is duplicated: the killed log is a prefix.
    assert events[: len(killed)] == killed
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    resumed = [e for e in events if isinstance(e, ev.RunResumed)]
    assert len(resumed) == 1 and resumed[0].dropped_torn_line == torn
    cut_t = max(e.t for e in killed)
    # Every call has exactly one result; a call cut short says so.
    calls = [e.call_id for e in events if isinstance(e, ev.ToolCall)]
    results = [e.call_id for e in events if isinstance(e, ev.ToolResult)]
    assert sorted(calls) == sorted(results) and len(set(calls)) == len(calls)
    if point == "mid-command":
        assert resumed[0].interrupted_calls
    # The transcript marks where the run went on, as the console's does.
    assert "── the run was resumed here ──" in proc.stdout
    for call_id in resumed[0].interrupted_calls:
        result = next(e for e in events if isinstance(e, ev.ToolResult) and e.call_id == call_id)
        assert result.error == "interrupted" and "resumed" in result.output
        # It says what the call had printed and how long it had run by the dead run's
        # last event (before, "0.0s" and no output, whatever it had done).
        asked = next(e for e in killed if isinstance(e, ev.ToolCall) and e.call_id == call_id)
        printed = "".join(
            e.text for e in killed if isinstance(e, ev.ToolOutput) and e.call_id == call_id
        )
        assert printed in result.output
        assert round(cut_t - asked.t, 3) <= result.duration_s <= resumed[0].t - asked.t + 0.001
    # The agent went on exactly where it was: the same actions as the run never killed.
    # A kill inside the submit left nothing submitted, so the supervisor submits again:
    # that repeat is the same action, not a new one.
    cut_submits = [
        e
        for e in events
        if isinstance(e, ev.ToolCall)
        and e.tool == "submit"
        and e.call_id in resumed[0].interrupted_calls
    ]
    assert _agent_trace([e for e in events if e not in cut_submits]) == _agent_trace(reference)
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    # The clock counted the time already spent, and went on from there.
    assert all(e.t >= cut_t for e in events[len(killed) :])


def test_resume_refuses_a_submitted_run_and_a_live_one(
    tmp_path: Path, answer_task: Path, reference: list[ev.Event]
) -> None:
    with ScriptedModelServer(research_script(), turn_by_history=True) as server:
        done = mlra_cli(
            _run_args(server, tmp_path / "runs", "done", answer_task), cwd=tmp_path, env=_env()
        )
    assert done.returncode == 0
    proc = mlra_cli(
        ["resume", str(tmp_path / "runs" / "done"), "--no-tui"], cwd=tmp_path, env=_env()
    )
    assert proc.returncode == 2
    assert "ended with a submission" in proc.stderr and "mlra fork" in proc.stderr
    proc = mlra_cli(["resume", str(tmp_path / "nowhere")], cwd=tmp_path)
    assert proc.returncode == 2 and "not a run folder" in proc.stderr


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished scripted run to fork and replay."""
    tmp = tmp_path_factory.mktemp("recorded")
    with ScriptedModelServer(research_script(), turn_by_history=True) as server:
        proc = mlra_cli(_run_args(server, tmp / "runs", "src", ANSWER_TASK), cwd=tmp, env=_env())
    assert proc.returncode == 0, proc.stderr
    return tmp / "runs" / "src"


def test_fork_with_an_edited_action_and_a_message(tmp_path: Path, recorded: Path) -> None:
    source = read_events(recorded / "events.jsonl")
    edit = '{"tool": "write_file", "arguments": {"path": "notes.md", "content": "edited\\n"}}'
    with ScriptedModelServer(research_script(), turn_by_history=True) as server:
        proc = mlra_cli(
            [
                "fork",
                str(recorded),
                "--at",
                "3",
                "--edit-action",
                edit,
                "--message",
                "keep notes short",
                "--run-id",
                "f",
                "--runs-dir",
                str(tmp_path),
                "--base-url",
                server.url_for("openai"),
                "--no-tui",
            ],
            cwd=tmp_path,
            env=_env(),
        )
        worker_requests = server.requests_for("worker")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "forked src at step 3 into f" in proc.stdout
    events = read_events(tmp_path / "f" / "events.jsonl")
    cut = next(
        i
        for i, e in enumerate(source)
        if isinstance(e, ev.StepStarted) and e.agent == "worker" and e.step == 3
    )
    # The new log starts with the source's, as it was, up to the step.
    assert events[:cut] == source[:cut]
    forked = next(e for e in events if isinstance(e, ev.RunForked))
    assert (forked.source_run, forked.at_step, forked.missing_files) == ("src", 3, [])
    # The edited action ran in place of the recorded one, and the run went on to the end.
    step3 = next(e for e in events[cut:] if isinstance(e, ev.ToolCall))
    assert step3.tool == "write_file" and step3.arguments == {
        "path": "notes.md",
        "content": "edited\n",
    }
    assert (tmp_path / "f" / "workspace" / "notes.md").read_text() == "edited\n"
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    result = (tmp_path / "f" / "result.json").read_text()
    assert '"forked_from": "src@3"' in result and '"score": 1.0' in result
    # Only the live part asked the model; the message reached the worker once.
    assert len(worker_requests) == 3
    assert "keep notes short" in str(worker_requests[0].body["messages"][-1])
    assert "keep notes short" not in str(worker_requests[1].body["messages"][-1])


def test_fork_restores_the_workspace_as_it_was(tmp_path: Path, recorded: Path) -> None:
    # Forking at step 5 with a model that has nothing more to say: the workspace is
    # that of the start of step 5, before checked.txt was written.
    script = {"supervisor": [], "worker": [], "default": []}
    with ScriptedModelServer(script) as server:
        server.set_fallback("worker", turn("", call("report", summary="stopping here")))
        server.set_fallback("supervisor", turn("", call("submit", path="notes.md")))
        proc = mlra_cli(
            [
                "fork",
                str(recorded),
                "--at",
                "5",
                "--run-id",
                "g",
                "--runs-dir",
                str(tmp_path),
                "--base-url",
                server.url_for("openai"),
                "--no-tui",
            ],
            cwd=tmp_path,
            env=_env(),
        )
    assert proc.returncode in (0, 1), proc.stderr
    workspace = tmp_path / "g" / "workspace"
    assert (workspace / "notes.md").read_text() == "# notes\nthe answer is 42\n"
    assert (workspace / "draft.txt").read_text() == "41\n"
    assert (workspace / "answer.txt").read_text() == "42\n"  # step 2's
    assert (workspace / "question.txt").exists() and not (workspace / "checked.txt").exists()


def _mlflow_reader(dest: Path) -> Any:
    """MLflow's own reader of the file store `mlra export` (another process) wrote: it
    refuses a file store unless told (the export tells its own process only)."""
    from mlflow.tracking import MlflowClient

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    return MlflowClient(tracking_uri=dest.resolve().as_uri())


def test_a_fork_of_a_fork_is_named_by_its_own_id_everywhere(tmp_path: Path, recorded: Path) -> None:
    """A fork's log opens with its source's run_started: `mlra fork` of a fork said it
    came from the first run (`src@3`, not `f@3`), `mlra compare src f` named both
    columns `src`, and `mlra export` gave the fork `config.run_id = src`."""
    script = {"supervisor": [], "worker": [], "default": []}
    with ScriptedModelServer(script) as server:
        server.set_fallback("worker", turn("", call("report", summary="stopping here")))
        server.set_fallback("supervisor", turn("", call("submit", path="answer.txt")))
        for source, at, run_id in ((recorded, "3", "f"), (tmp_path / "f", "3", "g")):
            proc = mlra_cli(
                [
                    "fork", str(source), "--at", at, "--run-id", run_id, "--runs-dir",
                    str(tmp_path), "--base-url", server.url_for("openai"), "--no-tui",
                ],
                cwd=tmp_path,
                env=_env(),
            )  # fmt: skip
            assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "forked f at step 3 into g" in proc.stdout, proc.stdout
    forked = [
        e for e in read_events(tmp_path / "g" / "events.jsonl") if isinstance(e, ev.RunForked)
    ]
    assert [(e.run_id, e.source_run) for e in forked] == [("f", "src"), ("g", "f")]
    listed = mlra_cli(["runs", "--runs-dir", str(tmp_path), "--json"], cwd=tmp_path)
    rows = {r["id"]: r for r in map(json.loads, listed.stdout.splitlines())}
    assert (rows["f"]["forked_from"], rows["g"]["forked_from"]) == ("src@3", "f@3")
    compared = mlra_cli(
        ["compare", str(recorded), "f", "g", "--runs-dir", str(tmp_path), "--json"], cwd=tmp_path
    )
    assert json.loads(compared.stdout)["runs"] == ["src", "f", "g"], compared.stdout
    pytest.importorskip("mlflow")
    dest = tmp_path / "mlruns"
    exported = mlra_cli(
        ["export", "g", "--runs-dir", str(tmp_path), "--to", "mlflow", "--dest", str(dest)],
        cwd=tmp_path,
    )
    assert exported.returncode == 0, exported.stderr
    client = _mlflow_reader(dest)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.run_name == "g" and run.data.tags["mlra.forked_from"] == "f@3"
    assert "config.run_id" not in run.data.params, run.data.params


def test_a_forks_new_limits_are_in_its_log_and_every_view(tmp_path: Path, recorded: Path) -> None:
    """`mlra fork --time-limit 9m --max-steps 8` ran under them, but only the process
    knew: its log kept the source's run_started (6 steps), so `mlra compare` and the
    exports said `max_steps 6` of a run that ended 'step budget used up (8 of 8)', the
    console counted its time left from the old limit, and `mlra resume` of it went back
    to the old ones."""
    script = {"supervisor": [], "worker": [], "default": []}
    with ScriptedModelServer(script) as server:
        server.set_fallback("worker", turn("", call("report", summary="stopping here")))
        server.set_fallback("supervisor", turn("", call("submit", path="answer.txt")))
        proc = mlra_cli(
            [
                "fork", str(recorded), "--at", "3", "--run-id", "f", "--runs-dir",
                str(tmp_path), "--base-url", server.url_for("openai"), "--no-tui",
                "--time-limit", "9m", "--max-steps", "8",
            ],
            cwd=tmp_path,
            env=_env(),
        )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    events = read_events(tmp_path / "f" / "events.jsonl")
    forked = next(e for e in events if isinstance(e, ev.RunForked))
    assert forked.settings == {"time_limit_s": 540.0, "max_steps": 8, "start_paused": False}
    state = fold(events)
    assert state.limits is not None and state.limits.time_limit_s == 540.0
    assert state.limits.max_steps == 8
    compared = mlra_cli(
        ["compare", str(recorded), str(tmp_path / "f"), "--json", "--all"], cwd=tmp_path
    )
    rows = {r["name"]: r["cells"] for r in json.loads(compared.stdout)["rows"]}
    assert rows["time_limit"][1] == "9m00s (--time-limit on resume or fork)", rows
    assert rows["max_steps"][1] == "8", rows
    assert rows["max_steps"][0] != "8"
    replay = mlra_cli(["replay", str(tmp_path / "f"), "--no-tui"], cwd=tmp_path).stdout
    assert "limit 9m00s" in replay.splitlines()[1], replay  # the header, not the source's
    assert "given --time-limit 9m00s --max-steps 8" in replay, replay
    pytest.importorskip("mlflow")
    dest = tmp_path / "mlruns"
    exported = mlra_cli(
        ["export", str(tmp_path / "f"), "--to", "mlflow", "--dest", str(dest)], cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr
    client = _mlflow_reader(dest)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    params = run.data.params
    assert (params["time_limit_s"], params["max_steps"]) == ("540.0", "8"), params


def test_fork_refuses_a_step_the_run_does_not_have(tmp_path: Path, recorded: Path) -> None:
    proc = mlra_cli(["fork", str(recorded), "--at", "99", "--no-tui"], cwd=tmp_path, env=_env())
    assert proc.returncode == 2 and "the run has steps 1 to 6" in proc.stderr
    proc = mlra_cli(
        ["fork", str(recorded), "--at", "2", "--edit-action", "{nope", "--no-tui"],
        cwd=tmp_path,
        env=_env(),
    )
    assert proc.returncode == 2 and "--edit-action is not JSON" in proc.stderr
    # A tool the worker lacks, or arguments its tool refuses: said, and no fork is made.
    for edit, said in (
        (
            '{"tool": "bsah", "arguments": {"command": "ls"}}',
            "--edit-action: no tool of this run's agents is named 'bsah' (did you mean bash?); "
            "the worker's tools: bash, python",
        ),
        (
            '{"tool": "bash", "arguments": {"cmd": "ls"}}',
            "--edit-action: invalid arguments for bash: unknown argument 'cmd'",
        ),
    ):
        proc = mlra_cli(
            [
                *("fork", str(recorded), "--at", "2", "--edit-action", edit),
                *("--no-tui", "--runs-dir", str(tmp_path / "forks")),
            ],
            cwd=tmp_path,
            env=_env(),
        )
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "forks").exists() or not any((tmp_path / "forks").iterdir())


def test_replaying_an_unchanged_run_does_not_diverge(tmp_path: Path, recorded: Path) -> None:
    proc = mlra_cli(
        [
            "run",
            str(ANSWER_TASK),
            "--model",
            f"replay:{recorded}",
            "--no-tui",
            "--runs-dir",
            str(tmp_path),
            "--run-id",
            "again",
        ],
        cwd=tmp_path,
        env=_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    again = read_events(tmp_path / "again" / "events.jsonl")
    assert not any(isinstance(e, ev.ModelError) for e in again)
    assert _agent_trace(again) == _agent_trace(read_events(recorded / "events.jsonl"))


async def test_replay_finds_the_step_where_a_changed_tool_diverges(
    tmp_path: Path, recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change to `read_file` (it now numbers lines) shows at the next model call."""
    from mlra.agent.agents.run import agent_for
    from mlra.agent.loop.replay_provider import ReplayProvider
    from mlra.agent.run.controller import RunController
    from mlra.agent.setup.config import RunConfig
    from mlra.tasks.spec import find_task
    from mlra.tools.files import ReadFile

    original = ReadFile.run

    async def numbered(self: ReadFile, args: Any, ctx: Any) -> Any:
        outcome = await original(self, args, ctx)
        outcome.output = "\n".join(
            f"{i}: {line}" for i, line in enumerate(outcome.output.splitlines(), 1)
        )
        return outcome

    monkeypatch.setattr(ReadFile, "run", numbered)
    provider = ReplayProvider.from_spec(f"replay:{recorded}")
    config = RunConfig(task="answer", model=provider.name, runs_dir=tmp_path, run_id="changed")
    result = await RunController(config, find_task(str(ANSWER_TASK)), provider).run(agent_for)
    assert result.status == "error"
    # read_file ran at worker step 1; the model is next asked at step 2.
    assert "replay diverged at model call 4 (worker, step 2)" in result.message
    assert "the result of read_file call" in result.message and "1: " in result.message


def test_a_fork_goes_on_with_the_model_settings_of_its_source(tmp_path: Path) -> None:
    settings = ["--temperature", "0.3", "--seed", "11", "--max-output-tokens", "1000"]
    with ScriptedModelServer(research_script(), turn_by_history=True) as server:
        args = _run_args(server, tmp_path / "runs", "src", ANSWER_TASK) + settings
        assert mlra_cli(args, cwd=tmp_path, env=_env()).returncode == 0
    with ScriptedModelServer(research_script(), turn_by_history=True) as server:
        proc = mlra_cli(
            [
                "fork", str(tmp_path / "runs" / "src"), "--at", "2", "--run-id", "f",
                "--base-url", server.url_for("openai"), "--no-tui",
            ],
            cwd=tmp_path,
            env=_env(),
        )  # fmt: skip
        sent = [r.body for r in server.requests_for("worker")]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sent, "the fork asked the model nothing"
    assert all((b["temperature"], b["seed"], b["max_tokens"]) == (0.3, 11, 1000) for b in sent)


def _began(log: Path, marker: bytes) -> bool:
    """Whether the log holds the call whose command has `marker` and then a
    `tool_started`: its command began."""
    data = log.read_bytes() if log.exists() else b""
    at = data.find(marker)
    return at >= 0 and b'"type":"tool_started"' in data[at:]


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_baseline_run_ended_during_a_recipe_step_runs_the_step_again_on_resume(
    tmp_path: Path, how: signal.Signals
) -> None:
    """The recipe step the run ended under did not fail: the resumed baseline runs it
    again and submits, where it used to skip the rest and end with nothing submitted
    (a batch then counted the run as final and unscored)."""
    slow = "for i in $(seq 1200); do [ -f go-B5 ] && break; sleep 0.05; done; echo 42 > answer.txt"
    task = answer_copy(
        tmp_path / "answer-slow",
        (ANSWER_RECIPE, f'command = "{slow}"'),
    )
    runs = tmp_path / "runs"
    log = runs / "r" / "events.jsonl"
    args = ["run", str(task), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    proc = subprocess.Popen(
        _cmd([*args, "--run-id", "r", "--isolation", "none"]),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        # Begun, not only asked for: a call the run ended under before it began is run
        # as that same call on resume (one `tool_call`), not again as a second.
        while not _began(log, b"go-B5"):
            assert proc.poll() is None and time.monotonic() < deadline, "the step never started"
            time.sleep(0.01)  # polling a file another process writes: nothing to await
        proc.send_signal(how)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["pkill", "-f", "go-B5"], check=False)
    (runs / "r" / "workspace" / "go-B5").touch()
    resumed = mlra_cli(["resume", str(runs / "r"), "--no-tui"], cwd=tmp_path, env=_env())
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    events = read_events(log)
    commands = [e for e in events if isinstance(e, ev.ToolCall) and e.tool == "bash"]
    assert len(commands) == 2  # the step the run ended under, and the same step again
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"
    result = json.loads((runs / "r" / "result.json").read_text())
    assert result["score"] == 1.0


def test_a_run_whose_grading_printed_progress_resumes(tmp_path: Path) -> None:
    """A baseline run ended by its step budget, graded by an evaluator that printed a
    line (an `evaluation_progress` event, as every lm-eval and classifier grading
    writes), then resumed with more steps: the catch-up took that event for one the
    agent emits and the resume ended `error` (Divergence) at once. The resumed run is
    graded again; the first grading is kept as the earlier one."""
    check = (ANSWER_TASK / "hidden" / "check.py").read_text()
    check += 'print("checking 1/1", flush=True)\nimport time\ntime.sleep(1)\n'
    task = answer_copy(tmp_path / "answer-progress", files={"hidden/check.py": check})
    runs = tmp_path / "runs"
    args = ["run", str(task), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    first = mlra_cli([*args, "--run-id", "r", "--isolation", "none", "--max-steps", "1"],
                     cwd=tmp_path, env=_env())  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    log = runs / "r" / "events.jsonl"
    assert any(isinstance(e, ev.EvaluationProgress) for e in read_events(log))
    ended = fold(read_events(log)).finished
    assert ended is not None and ended.reason == "budget"
    resumed = mlra_cli(["resume", str(runs / "r"), "--no-tui", "--max-steps", "3"],
                       cwd=tmp_path, env=_env())  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "Divergence" not in resumed.stdout + resumed.stderr
    state = fold(read_events(log))
    assert state.finished is not None and state.finished.reason == "submitted"
    assert state.earlier_evaluation is not None and state.evaluation is not None


def test_the_baseline_agent_and_a_models_agent_do_not_take_up_each_others_runs(
    tmp_path: Path, recorded: Path
) -> None:
    """`--model baseline` on a model's run (or a model on a baseline run) is refused in one
    line, with nothing written: its catch-up stopped at the log's first event with an
    internal error, and a resume wrote that error into the run's own log."""
    half = tmp_path / "runs" / "half"  # the recorded run cut before its submission
    shutil.copytree(recorded, half)
    lines = (half / "events.jsonl").read_bytes().splitlines(keepends=True)
    (half / "events.jsonl").write_bytes(b"".join(lines[: len(lines) // 2]))
    (half / "result.json").unlink(missing_ok=True)
    before = (half / "events.jsonl").read_bytes()
    forks = tmp_path / "forks"
    for args in (
        ["resume", str(half), "--model", "baseline", "--no-tui"],
        ["fork", str(recorded), "--at", "2", "--model", "baseline", "--runs-dir", str(forks)],
    ):
        proc = mlra_cli([*args, "--no-tui"], cwd=tmp_path, env=_env())
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"mlra: --model baseline: the run was made by a model ({MODEL}), and the baseline "
            f"agent runs the task's recipe, not a model's log: it cannot {args[0]} it "
            "(`mlra run TASK --model baseline` runs the recipe afresh)"
        ]
    assert (half / "events.jsonl").read_bytes() == before
    assert not forks.exists()
    base = mlra_cli(
        [*("run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--isolation", "none"),
         *("--runs-dir", str(tmp_path / "runs"), "--run-id", "base")],
        cwd=tmp_path,
        env=_env(),
    )  # fmt: skip
    assert base.returncode == 0, base.stdout + base.stderr
    proc = mlra_cli(
        [*("fork", str(tmp_path / "runs" / "base"), "--at", "1", "--model", MODEL),
         *("--base-url", "http://127.0.0.1:9/v1", "--runs-dir", str(forks), "--no-tui")],
        cwd=tmp_path,
        env=_env(),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the run was made by the baseline agent" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not forks.exists()
