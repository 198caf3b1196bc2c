"""bench/small_models.py counts what a run's log says: a scripted run with every kind of
bad call (broken JSON, a tool that does not exist, arguments the tool does not take)
gives the shares a person would count by reading its transcript."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import answering_script

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import small_models as bench


async def test_the_bench_counts_valid_calls_subtasks_and_the_ending(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ScriptedModelServer(answering_script()) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer",
            model="openai/test",
            runs_dir=tmp_path,
            run_id="scripted",
            isolation="none",
            context_window=32_768,
            context_window_from="setting",
            review_every=1000,
        )
        controller = RunController(config, load_task(answer_task), provider)
        await controller.run(agent_for)
        await provider.aclose()
    run = bench.read_run(tmp_path / "scripted")
    assert run is not None
    # The worker: read_file, broken JSON, teleport, list_files with bash's argument,
    # bash, report: three of its six turns made a valid call.
    assert run.by_agent == {"supervisor": [4, 4], "worker": [6, 3]}
    assert (run.turns, run.valid, run.text) == (10, 7, 0)
    assert (run.subtasks, run.worker_alone, run.ending) == (1, False, "submitted")
    assert run.solved
    assert bench.main([str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "openai/test | supervisor | 1 | 7/10 (70%) | 1 | 0 | 1 | 1" in printed
