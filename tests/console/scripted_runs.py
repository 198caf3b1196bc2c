"""A whole run `r` on the small `answer` task (no isolation) against the scripted model
server, for the console tests that read what it recorded: its supervisor and worker
answered by their scripts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.providers.base import ModelSettings, ToolCallsMode
from mlra.agent.record.run_result import RunResult
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer


async def scripted_run(
    runs: Path,
    task: Path,
    supervisor: list[dict[str, Any]],
    worker: list[dict[str, Any]],
    *,
    tool_calls: ToolCallsMode | None = None,
) -> RunResult:
    """The run, in `runs`/r; `tool_calls`: the `--tool-calls` the user gave (with the
    server's `--base-url`), if any."""
    with ScriptedModelServer({"supervisor": supervisor, "worker": worker}) as server:
        url = server.url_for("openai")
        settings = None if tool_calls is None else ModelSettings(tool_calls=tool_calls)
        given = {} if tool_calls is None else {"base_url": url, "tool_calls": tool_calls}
        provider = resolve_model("openai/test", base_url=url, env={}, settings=settings)
        config = RunConfig.model_validate(
            {
                "task": "answer",
                "model": "openai/test",
                "runs_dir": runs,
                "run_id": "r",
                "isolation": "none",
                **given,
            }
        )
        return await RunController(config, load_task(task), provider).run(agent_for)
