"""The scripted search of the tests of an attempt's raised time limit
(agent/loop/attempt_time.py): on the small `answer` task, in a 40 s run, a1 and a2 start
with 20 s each; a3 starts as a1 ends, with all the time left, and raises a2 to it; a2
is submitted. Each attempt's worker runs the commands its test gives, then reports.
The search gives an attempt 5 s at least (`--attempt-min-time`, 30 s by default), so
it fits in a 40 s limit."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.run_result import RunResult
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

LIMIT_S = 40.0


def raising_script(*commands: str) -> dict[str, object]:
    """The supervisor's turns of the search above; each worker runs `commands` in
    `bash`, in order, and reports."""
    start = call("attempt_start", instructions="Write 42 into answer.txt")
    return {
        "supervisor": [
            turn("", start),
            turn("", start),
            turn("", call("attempt_wait", attempt="a1", timeout=600)),
            turn("", start),
            turn("", call("attempt_wait", attempt="a2", timeout=600)),
            turn("", call("attempt_wait", attempt="a3", timeout=600)),
            turn("", call("submit", attempt="a2")),
        ],
        "worker": [
            *(turn("", call("bash", command=command, timeout=600)) for command in commands),
            turn("", call("report", summary="wrote 42")),
        ],
    }


def search_config(runs: Path, model: str, **more: object) -> RunConfig:
    """Three attempts, two at a time, in LIMIT_S, with no isolation."""
    return RunConfig.model_validate(
        {
            "task": "answer",
            "model": model,
            "runs_dir": runs,
            "isolation": "none",
            "search": "llm",
            "attempts": 3,
            "attempts_parallel": 2,
            "time_limit_s": LIMIT_S,
            "attempt_min_s": 5.0,
            **more,
        }
    )


async def run_scripted(
    runs: Path, task: Path, script: dict[str, object]
) -> tuple[RunResult, RunController]:
    """The search, its model answered by `script`: each attempt's worker by its own
    history, the script from its start."""
    with ScriptedModelServer(script, turn_by_history=True) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        controller = RunController(search_config(runs, "openai/test"), load_task(task), provider)
        result = await asyncio.wait_for(controller.run(agent_for), 120)
        await provider.aclose()
    return result, controller
