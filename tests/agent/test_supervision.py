"""The supervisor's side of a run: periodic reviews of a running subtask, its
guidance reaching the worker, and the user's messages reaching the supervisor."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn


async def _run(
    tmp_path: Path, task: Path, script: dict, **config: object
) -> tuple[RunController, ScriptedModelServer, list[ev.Event]]:
    seen: list[ev.Event] = []
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        cfg = RunConfig(
            task="answer", model="openai/test", runs_dir=tmp_path, isolation="none", **config
        )  # type: ignore[arg-type]
        controller = RunController(cfg, load_task(task), provider)
        controller.subscribe(seen.append)

        def user_writes(event: ev.Event) -> None:
            if isinstance(event, ev.SubtaskStarted):
                asyncio.get_running_loop().call_soon(
                    controller.inject, "supervisor", "prefer small models"
                )

        controller.subscribe(user_writes)
        await controller.run(agent_for)
        await provider.aclose()
    return controller, server, seen


async def test_reviews_send_guidance_and_carry_the_users_messages(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("look", call("bash", command="ls")),
            turn("look again", call("bash", command="ls")),
            turn("answer", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="done")),
        ],
        "reviewer": [
            turn(
                "Write the answer now instead of listing files.",
                call(
                    "update_plan",
                    steps=[
                        {
                            "id": "1",
                            "title": "Answer the question",
                            "status": "in_progress",
                            "note": "nudged",
                        },
                        {"id": "2", "title": "Submit"},
                    ],
                ),
            ),
            "continue",
        ],
    }
    controller, server, seen = await _run(tmp_path, answer_task, script, review_every=2)

    reviews = [e for e in seen if isinstance(e, ev.Review)]
    assert [r.guidance for r in reviews] == ["Write the answer now instead of listing files."]
    assert reviews[0].after_steps == 2
    assert any(isinstance(e, ev.PlanUpdated) and e.steps[0].note == "nudged" for e in seen)

    reviewer_asked = json.dumps(server.requests_for("reviewer")[0].body)
    assert "[message from the user] prefer small models" in reviewer_asked
    assert "look again" in reviewer_asked or "bash" in reviewer_asked

    steps = [e for e in seen if isinstance(e, ev.StepStarted) and e.agent == "worker"]
    assert "[message from the supervisor] Write the answer now" in steps[2].prompt

    after_subtask = json.dumps(server.requests_for("supervisor")[2].body)
    assert "The user wrote to you during the subtask: prefer small models" in after_subtask
    assert "Your guidance during the subtask: Write the answer now" in after_subtask
    assert controller.state.evaluation is not None and controller.state.evaluation.score == 1.0


async def test_a_subtask_that_never_reports_goes_back_to_the_supervisor(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {
        "supervisor": supervisor_answering(),
        "worker": [turn("", call("bash", command="echo 42 > answer.txt"))]
        + [turn("still busy", call("bash", command="true"))] * 5,
    }
    _, server, seen = await _run(
        tmp_path, answer_task, script, subtask_max_steps=3, review_every=100
    )
    finished = next(e for e in seen if isinstance(e, ev.SubtaskFinished))
    assert finished.outcome == "step_limit" and finished.worker_steps == 3
    assert "still busy" in finished.report
    told = json.dumps(server.requests_for("supervisor")[2].body)
    assert "(step limit, 3 worker steps)" in told and "reached its limit of 3 steps" in told
