"""A message the user sent that no agent read before the run ended is said, not lost in
silence: found in the console, where a message to the worker sent while its report
waited for approval was never read (the subtask ended, the supervisor submitted) and
nothing said so."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

MESSAGE = "how is it going?"


async def test_a_message_to_the_worker_sent_as_it_reports_is_said_unread_at_the_end(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("Write the answer.", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    seen: list[ev.Event] = []
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        cfg = RunConfig(
            task="answer",
            model="openai/test",
            runs_dir=tmp_path,
            isolation="none",
            breakpoints=["report"],
        )
        controller = RunController(cfg, load_task(answer_task), provider)
        controller.subscribe(seen.append)

        def user_writes_then_approves(event: ev.Event) -> None:
            # The worker's report waits at the breakpoint: the user writes to the
            # worker, then lets the report go, which ends the worker's subtask.
            if isinstance(event, ev.ApprovalRequested) and event.tool == "report":
                loop = asyncio.get_running_loop()
                loop.call_soon(controller.inject, "worker", MESSAGE)
                loop.call_soon(controller.approve, event.call_id)

        controller.subscribe(user_writes_then_approves)
        await controller.run(agent_for)
        await provider.aclose()

    assert not [e for e in seen if isinstance(e, ev.StepStarted) and e.delivered]
    notices = [e for e in seen if isinstance(e, ev.Notice) and MESSAGE in e.message]
    assert len(notices) == 1
    # The console's transcript and the headless lines show a notice as `! ` and its words.
    assert notices[0].message == (
        "your message to the worker went unread: the run ended before the worker took "
        f'another step ("{MESSAGE}")'
    )
    finished = [e for e in seen if isinstance(e, ev.RunFinished)]
    assert finished and finished[0].status == "finished"
    assert seen.index(notices[0]) < seen.index(finished[0])


async def test_a_message_the_worker_read_is_not_said_unread(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("Write the answer.", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    seen: list[ev.Event] = []
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        cfg = RunConfig(task="answer", model="openai/test", runs_dir=tmp_path, isolation="none")
        controller = RunController(cfg, load_task(answer_task), provider)
        controller.subscribe(seen.append)

        def user_writes(event: ev.Event) -> None:
            if isinstance(event, ev.ToolCall) and event.tool == "bash":
                asyncio.get_running_loop().call_soon(controller.inject, "worker", MESSAGE)

        controller.subscribe(user_writes)
        await controller.run(agent_for)
        await provider.aclose()

    assert [e.delivered for e in seen if isinstance(e, ev.StepStarted) and e.delivered] == [
        [MESSAGE]
    ]
    assert not [e for e in seen if isinstance(e, ev.Notice) and MESSAGE in e.message]
