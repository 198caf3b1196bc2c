"""The small-model path (issue 40): what a model of 135M-1.5B writes, and what it is told.

Such models write calls as text and loosely, name tools that do not exist, and as
supervisors never hand the worker a subtask. Each test checks what the user (and the
model) sees: the next prompt, the notices, the headless lines, result.json and
`mlra runs`, against the fake OpenAI-compatible server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.providers.base import ModelSettings
from mlra.agent.providers.text_calls import read_text_calls
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.conftest import mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, supervisor_answering, turn

TOOLS = ["bash", "python", "read_file", "submit"]
SOLVE = [
    turn("I will write the answer.", call("bash", command="echo 42 > answer.txt")),
    turn("", call("submit", path="answer.txt", note="42")),
]
"""The worker, alone, doing the answer task: the answer, then `submit`."""


# --- loose calls, read where they can be and told where not ------------------------------


def test_loose_shapes_of_a_call_are_read() -> None:
    for text in (
        '{"tool": "bash", "parameters": {"command": "ls"}}',
        '{"name": "bash", "command": "ls"}',  # the arguments beside the name
        '{"action": "bash", "action_input": {"command": "ls"}}',  # LangChain's
        '{"tool_name": "bash", "tool_input": {"command": "ls"}}',
    ):
        read = read_text_calls(text, TOOLS)
        assert [(c.name, c.arguments) for c in read.calls] == [("bash", {"command": "ls"})], text
        assert read.problems == []


def test_what_cannot_be_read_is_said_only_where_no_call_was_made() -> None:
    """Said where the model was told the text format (the tools in its prompt)."""
    unknown = read_text_calls(
        'I will train. {"name": "pretrain", "arguments": {"n": 3}}', TOOLS, tools_in_prompt=True
    )
    assert unknown.calls == [] and unknown.problems == ["there is no tool named 'pretrain'"]
    fenced = read_text_calls(
        '```json\n{"name": "pretrain", "arguments": {"n": 3}\n```', TOOLS, tools_in_prompt=True
    )
    assert fenced.problems and "not valid JSON" in fenced.problems[0]
    code = read_text_calls("Run this:\n```bash\nls -la\n```", TOOLS, tools_in_prompt=True)
    assert code.problems == ["a ```bash block is text, not a call: nothing ran it"]
    # Beside a call, JSON about something else is prose; so is a name with no arguments.
    beside = 'Config: {"name": "resnet", "arguments": {"depth": 18}}. ' + (
        '{"name": "bash", "arguments": {"command": "ls"}}'
    )
    assert read_text_calls(beside, TOOLS, tools_in_prompt=True).problems == []
    resnet = 'The model is {"name": "resnet", "depth": 18}.'
    assert read_text_calls(resnet, TOOLS, tools_in_prompt=True).problems == []


async def _text_mode_run(
    tmp_path: Path, answer_task: Path, supervisor: list[Any], worker: list[Any]
) -> list[ev.Event]:
    """A `--tool-calls text` run of the answer task on a local server, which it solves:
    its log."""
    with ScriptedModelServer({"supervisor": supervisor, "worker": worker}) as server:
        settings = ModelSettings(tool_calls="text")
        url = server.url_for("openai")
        provider = resolve_model("openai/local", base_url=url, env={}, settings=settings)
        config = RunConfig(
            task="answer",
            model="openai/local",
            runs_dir=tmp_path,
            isolation="none",
            tool_calls="text",
        )
        controller = RunController(config, load_task(answer_task), provider)
        result = await controller.run(agent_for)
        await provider.aclose()
    assert result.score == 1.0
    return read_events(controller.run_dir / "events.jsonl")


async def test_a_tool_that_does_not_exist_is_named_with_the_tools_there_are(
    tmp_path: Path, answer_task: Path
) -> None:
    supervisor = [
        'First I pretrain. {"name": "pretrain", "arguments": {"epochs": 3}}',
        turn("", call("pretrain", epochs=3)),  # the same, as a native call
        *supervisor_answering(),
    ]
    worker = [turn("", call("bash", command="echo 42 > answer.txt")), turn("", call("report"))]
    # `--tool-calls text`: the model is told the format, so what it meant is said.
    events = await _text_mode_run(tmp_path, answer_task, supervisor, worker)
    prompts = [
        e.prompt for e in events if isinstance(e, ev.StepStarted) and e.agent == "supervisor"
    ]
    told = prompts[1]
    assert "there is no tool named 'pretrain'" in told
    assert "assign_subtask" in told and "update_plan" in told and "submit" in told
    assert '{"name": "<tool>", "arguments": {...}} inside <tool_call></tool_call>' in told
    notices = [e.message for e in events if isinstance(e, ev.Notice)]
    assert any("supervisor's answer" in n and "'pretrain'" in n for n in notices), notices
    # The native call gets an error observation in the same words, and the run goes on.
    native = next(e for e in events if isinstance(e, ev.ToolResult) and e.tool == "pretrain")
    assert not native.ok and "there is no tool named 'pretrain'; the tools are: " in native.output
    assert "assign_subtask" in native.output


async def test_the_same_missing_tool_is_told_to_the_model_each_time_and_the_person_once(
    tmp_path: Path, answer_task: Path
) -> None:
    """A small model names the same missing tool turn after turn (4 times in one run on a
    real llama-server): each of its next prompts says so, one notice tells the person."""
    meant = '{"name": "pretrain", "arguments": {"epochs": 3}}'
    supervisor = [meant, meant, *supervisor_answering()]
    worker = [turn("", call("bash", command="echo 42 > answer.txt")), turn("", call("report"))]
    events = await _text_mode_run(tmp_path, answer_task, supervisor, worker)
    prompts = [
        e.prompt for e in events if isinstance(e, ev.StepStarted) and e.agent == "supervisor"
    ]
    assert all("there is no tool named 'pretrain'" in p for p in prompts[1:3])
    notices = [e.message for e in events if isinstance(e, ev.Notice) and "'pretrain'" in e.message]
    assert len(notices) == 1 and "each time it happens" in notices[0], notices


async def test_a_loosely_written_plan_is_the_plan_and_the_run_goes_on(
    tmp_path: Path, answer_task: Path
) -> None:
    """A plan as small models write it (steps as strings, a status word of its own) is
    the plan, not a refused call the supervisor spends its next turns rewriting."""
    loose = {
        "name": "update_plan",
        "arguments": {"steps": ["Answer the question", {"task": "Submit", "status": "todo"}]},
    }
    supervisor = [
        f"<tool_call>{json.dumps(loose)}</tool_call>",
        *supervisor_answering()[1:],
    ]
    worker = [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    events = await _text_mode_run(tmp_path, answer_task, supervisor, worker)
    first = next(e for e in events if isinstance(e, ev.PlanUpdated))
    assert [(s.id, s.title, s.status) for s in first.steps] == [
        ("1", "Answer the question", "pending"),
        ("2", "Submit", "pending"),
    ]
    plans = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "update_plan"]
    assert plans and all(e.ok for e in plans)
    assigned = next(
        e for e in events if isinstance(e, ev.ToolResult) and e.tool == "assign_subtask"
    )
    assert assigned.ok, assigned.output


# --- the worker alone ----------------------------------------------------------------------


def _run_cli(
    tmp_path: Path, task: Path, script: dict[str, Any], *extra: str
) -> tuple[Any, Path, int]:
    """A headless run against the fake server: the process, its run folder, and how many
    requests the supervisor made."""
    with ScriptedModelServer(script) as server:
        args = ["run", str(task), "--model", "openai/small", "--no-tui", "--runs-dir"]
        args += [str(tmp_path / "runs"), "--base-url", server.url_for("openai"), *extra]
        proc = mlra_cli(args, cwd=tmp_path, timeout=120)
        supervisor_requests = len(server.requests_for("supervisor"))
    (run_dir,) = (tmp_path / "runs").iterdir()
    return proc, run_dir, supervisor_requests


def _replayed(tmp_path: Path, task: Path, run_dir: Path) -> tuple[Any, dict[str, Any]]:
    """The run again from its log (`--model replay:RUN`): it must reach the same end."""
    out = tmp_path / "replay"
    args = ["run", str(task), "--model", f"replay:{run_dir}", "--no-tui", "--runs-dir", str(out)]
    proc = mlra_cli(args, cwd=tmp_path, timeout=120)
    (again,) = out.iterdir()
    return proc, json.loads((again / "result.json").read_text())


def test_a_supervisor_that_never_delegates_hands_the_worker_the_whole_task(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {"supervisor:fallback": turn("The answer is probably 42."), "worker": SOLVE}
    proc, run_dir, supervisor_requests = _run_cli(tmp_path, answer_task, script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert supervisor_requests == 4  # MAX_NUDGES + 1 answers, then no more turns
    result = json.loads((run_dir / "result.json").read_text())
    assert result["reason"] == "submitted" and result["score"] == 1.0
    assert result["worker_alone"] == "supervisor_idle"
    events = read_events(run_dir / "events.jsonl")
    (alone,) = [e for e in events if isinstance(e, ev.WorkerAlone)]
    assert alone.reason == "supervisor_idle" and alone.supervisor_turns == 4
    notice = (
        "the supervisor answered without a tool 4 turns in a row and never handed the worker "
        "a subtask: the worker takes the whole task alone"
    )
    assert sum(notice in line for line in proc.stdout.splitlines()) == 1, proc.stdout
    worker_steps = [e for e in events if isinstance(e, ev.StepStarted) and e.agent == "worker"]
    assert worker_steps and all(e.seq > alone.seq for e in worker_steps)
    listed = mlra_cli(["runs", "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path)
    assert "openai/small (worker alone)" in listed.stdout
    replay, again = _replayed(tmp_path, answer_task, run_dir)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert again["reason"] == "submitted" and again["worker_alone"] == "supervisor_idle"


def test_a_worker_alone_that_stops_calling_tools_says_both_parts(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {"supervisor:fallback": turn("Hmm."), "worker:fallback": turn("I am thinking.")}
    proc, run_dir, _ = _run_cli(tmp_path, answer_task, script)
    assert proc.returncode == 1
    result = json.loads((run_dir / "result.json").read_text())
    assert result["reason"] == "no_tool_calls" and result["score"] is None
    assert (
        "never handed the worker a subtask; then the worker, given the whole task"
        in (result["message"])
    )
    assert "never called submit, so nothing was submitted" in result["message"]


def test_agent_worker_runs_the_worker_alone_from_the_start(
    tmp_path: Path, answer_task: Path
) -> None:
    proc, run_dir, supervisor_requests = _run_cli(
        tmp_path, answer_task, {"worker": SOLVE}, "--agent", "worker"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert supervisor_requests == 0
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score"] == 1.0 and result["worker_alone"] == "chosen"
    assert "the worker takes the whole task alone, with no supervisor (--agent worker)" in (
        proc.stdout
    )
    events = read_events(run_dir / "events.jsonl")
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert started.config["agent"] == "worker"
    # The replay follows the recorded --agent without being told it.
    replay, again = _replayed(tmp_path, answer_task, run_dir)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert again["reason"] == "submitted" and again["worker_alone"] == "chosen"


def test_agent_worker_with_what_it_cannot_go_with_is_one_line(
    tmp_path: Path, answer_task: Path
) -> None:
    with ScriptedModelServer({}) as server:
        model = ["--model", "openai/small", "--base-url", server.url_for("openai")]
        for extra, said in (
            (["--model", "baseline"], "--agent worker needs a model"),
            ([*model, "--search", "greedy"], "do not go together"),
        ):
            args = ["run", str(answer_task), "--agent", "worker", "--no-tui", *extra]
            proc = mlra_cli(args, cwd=tmp_path)
            assert proc.returncode == 2 and said in proc.stderr, proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1


def test_a_resumed_run_meets_the_hand_over_in_its_log(tmp_path: Path, answer_task: Path) -> None:
    from tests.agent.test_resume import _env, _kill_when

    held = {**SOLVE[1], "hang": 300}
    script = {"supervisor:fallback": turn("Hmm, 42?"), "worker": [SOLVE[0], held]}
    runs = tmp_path / "runs"
    log = runs / "r" / "events.jsonl"
    with ScriptedModelServer(script, turn_by_history=True) as server:
        args = ["run", str(answer_task), "--model", "openai/small", "--no-tui", "--runs-dir"]
        args += [str(runs), "--run-id", "r", "--base-url", server.url_for("openai")]
        # Killed while the worker alone waits for its second answer (held back).
        _kill_when(args, log, lambda logged: b'"type":"tool_result"' in logged, tmp_path)
        killed = read_events(log)
        assert any(isinstance(e, ev.WorkerAlone) for e in killed)
        server.script["worker"][-1] = SOLVE[1]
        proc = mlra_cli(["resume", str(runs / "r"), "--no-tui"], cwd=tmp_path, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = read_events(log)
    assert events[: len(killed)] == killed
    assert [e.reason for e in events if isinstance(e, ev.WorkerAlone)] == ["supervisor_idle"]
    handed = [e for e in events if isinstance(e, ev.Notice) and "takes the whole task" in e.message]
    assert len(handed) == 1
    result = json.loads((runs / "r" / "result.json").read_text())
    assert result["reason"] == "submitted" and result["worker_alone"] == "supervisor_idle"


# --- messages when the worker works alone ------------------------------------------------


def test_a_message_to_the_supervisor_of_a_worker_alone_is_refused(
    tmp_path: Path, answer_task: Path
) -> None:
    """No supervisor reads it: one line says so, and a message to the worker is read."""
    import subprocess
    import sys
    import time

    from mlra.control_socket import socket_path
    from tests.agent.test_resume import _env

    runs = tmp_path / "runs"
    run_dir = runs / "w"
    log = run_dir / "events.jsonl"
    with ScriptedModelServer({"worker": SOLVE}) as server:
        args = ["run", str(answer_task), "--model", "openai/small", "--agent", "worker"]
        args += ["--no-tui", "--paused", "--runs-dir", str(runs), "--run-id", "w"]
        args += ["--base-url", server.url_for("openai")]
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlra", *args],
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 300  # a guard only: the hand-over is awaited
            while not (
                socket_path(run_dir).exists()
                and log.exists()
                and any(isinstance(e, ev.WorkerAlone) for e in read_events(log))
            ):
                assert proc.poll() is None and time.monotonic() < deadline, "no worker_alone"
                time.sleep(0.01)
            ctl = ["ctl", str(run_dir), "inject"]
            told = mlra_cli([*ctl, "--to", "supervisor", "use 42"], cwd=tmp_path)
            assert told.returncode == 1, told.stdout
            assert told.stderr.strip().splitlines() == [
                "refused: the worker does the task alone and no supervisor reads messages: "
                "send it to the worker"
            ]
            assert mlra_cli([*ctl, "--to", "worker", "use 42"], cwd=tmp_path).returncode == 0
            assert mlra_cli(["ctl", str(run_dir), "resume"], cwd=tmp_path).returncode == 0
            assert proc.wait(timeout=120) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    events = read_events(log)
    injected = [(e.target, e.text) for e in events if isinstance(e, ev.Control)]
    assert ("supervisor", "use 42") not in injected and ("worker", "use 42") in injected
    first = next(e for e in events if isinstance(e, ev.StepStarted) and e.agent == "worker")
    assert first.delivered == ["use 42"]


async def test_messages_to_the_supervisor_at_the_hand_over_go_to_the_worker(
    tmp_path: Path, answer_task: Path
) -> None:
    """Queued after the supervisor's last turn, before it hands the task over: the worker
    reads them, and a notice says where they went."""
    script = {"supervisor:fallback": turn("The answer is probably 42."), "worker": SOLVE}
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/local", base_url=server.url_for("openai"), env={})
        config = RunConfig(task="answer", model="openai/local", runs_dir=tmp_path, isolation="none")
        controller = RunController(config, load_task(answer_task), provider)
        turns = 0

        def queue_at_the_last_turn(event: ev.Event) -> None:
            nonlocal turns
            if isinstance(event, ev.ModelCall) and event.agent == "supervisor":
                turns += 1
                if turns == 4:  # MAX_NUDGES + 1: the hand-over comes next
                    controller.inject("supervisor", "the answer is 42")

        controller.subscribe(queue_at_the_last_turn)
        result = await controller.run(agent_for)
        await provider.aclose()
    assert result.score == 1.0
    events = read_events(controller.run_dir / "events.jsonl")
    alone = next(e for e in events if isinstance(e, ev.WorkerAlone))
    queued = next(e for e in events if isinstance(e, ev.Control) and e.action == "inject")
    assert queued.seq < alone.seq
    notices = [e.message for e in events if isinstance(e, ev.Notice)]
    assert "1 message to the supervisor, unread at the hand-over, goes to the worker" in notices
    first = next(e for e in events if isinstance(e, ev.StepStarted) and e.agent == "worker")
    assert first.delivered == ["the answer is 42"]
    assert "[message from the user] the answer is 42" in first.prompt
    supervisor_steps = [
        e for e in events if isinstance(e, ev.StepStarted) and e.agent == "supervisor"
    ]
    assert all("the answer is 42" not in e.prompt for e in supervisor_steps)


def test_a_supervisor_stuck_on_its_plan_hands_the_worker_the_whole_task(
    tmp_path: Path, answer_task: Path
) -> None:
    """Qwen2.5-Coder-0.5B on a real llama-server: the supervisor wrote the same plan
    again and again and never assigned a subtask, and the run ended stuck."""
    script = {"supervisor:fallback": turn("", plan("Read question.txt")), "worker": SOLVE}
    proc, run_dir, supervisor_requests = _run_cli(tmp_path, answer_task, script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert supervisor_requests == 6  # stuck at 6 in a row, then no more turns
    result = json.loads((run_dir / "result.json").read_text())
    assert result["reason"] == "submitted" and result["score"] == 1.0
    assert result["worker_alone"] == "supervisor_stuck"
    notice = (
        "the supervisor made the same update_plan call 6 times in a row and never handed the "
        "worker a subtask: the worker takes the whole task alone"
    )
    assert sum(notice in line for line in proc.stdout.splitlines()) == 1, proc.stdout
