"""A recording whose plan its tools refused replays as it ran: `update_plan` reads loose
plans now, and a replay of a run recorded before must not depart from it there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.providers.base import ModelSettings
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from mlra.tools.plan import PlanStepArgs, UpdatePlan
from tests.conftest import mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn


class StrictPlanArgs(BaseModel):
    """`update_plan`'s arguments as mlra read them before it read loose plans."""

    steps: list[PlanStepArgs]
    reason: str = ""


async def test_a_plan_refused_in_the_recording_is_refused_in_its_replay(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loose = {"name": "update_plan", "arguments": {"steps": ["Answer the question", "Submit"]}}
    supervisor = [f"<tool_call>{json.dumps(loose)}</tool_call>", *supervisor_answering()]
    worker = [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    with monkeypatch.context() as older:
        older.setattr(UpdatePlan, "Args", StrictPlanArgs)
        with ScriptedModelServer({"supervisor": supervisor, "worker": worker}) as server:
            url = server.url_for("openai")
            settings = ModelSettings(tool_calls="text")
            provider = resolve_model("openai/local", base_url=url, env={}, settings=settings)
            config = RunConfig(
                task="answer",
                model="openai/local",
                runs_dir=tmp_path / "runs",
                isolation="none",
                tool_calls="text",
            )
            controller = RunController(config, load_task(answer_task), provider)
            recorded = await controller.run(agent_for)
            await provider.aclose()
    assert recorded.score == 1.0
    run_dir = controller.run_dir
    then = [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, ev.ToolResult)]
    assert [e.ok for e in then if e.tool == "update_plan"] == [False, True, True]

    out = tmp_path / "replay"
    args = ["run", str(answer_task), "--model", f"replay:{run_dir}", "--no-tui"]
    proc = mlra_cli([*args, "--runs-dir", str(out), "--isolation", "none"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (again,) = out.iterdir()
    result = json.loads((again / "result.json").read_text())
    assert result["reason"] == "submitted" and result["score"] == 1.0, result
    now = [e for e in read_events(again / "events.jsonl") if isinstance(e, ev.ToolResult)]
    first = next(e for e in now if e.tool == "update_plan")
    assert not first.ok and first.output == next(e for e in then if e.tool == "update_plan").output
