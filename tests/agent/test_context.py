"""A long run keeps within the model's context window: older worker steps are
summarized by the model, the instructions are never cut, and the log says so."""

from __future__ import annotations

import json
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

NOISY = "print('x' * 6000)"


async def test_old_steps_are_summarized_and_instructions_kept(
    tmp_path: Path, answer_task: Path
) -> None:
    # Each call its own (the same call again and again would be a loop: agent/loop/loops.py).
    worker = [turn(f"step {n}", call("python", code=f"{NOISY}  # {n}")) for n in range(8)]
    worker += [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="ok")),
    ]
    script = {
        "supervisor": supervisor_answering(),
        "worker": worker,
        "summarizer": ["SUMMARY-OF-EARLY-STEPS: printed x many times"],
    }
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        provider.context_window = 14_000
        config = RunConfig(
            task="answer",
            model="openai/test",
            runs_dir=tmp_path,
            isolation="none",
            max_output_tokens=512,
            keep_recent_turns=2,
            observation_limit=7000,
        )
        controller = RunController(config, load_task(answer_task), provider)
        result = await controller.run(agent_for)
        await provider.aclose()
        worker_requests = server.requests_for("worker")
        summarizer_requests = server.requests_for("summarizer")

    assert result.score == 1.0
    events = read_events(controller.run_dir / "events.jsonl")
    summaries = [e for e in events if isinstance(e, ev.HistorySummarized)]
    assert summaries and summaries[0].agent == "worker" and summaries[0].first_turn == 1
    assert summaries[0].tokens_before > 0.8 * 14_000 - 512
    assert summarizer_requests and "step 0" in json.dumps(summarizer_requests[0].body)

    after = json.dumps(worker_requests[-1].body)
    assert "SUMMARY-OF-EARLY-STEPS" in after
    assert "Read question.txt in the workspace" in after  # the pinned task is still there
    assert "step 0" not in after  # the summarized turns are gone
    # Each later request stays under the window the provider declared.
    assert all(len(json.dumps(r.body)) // 4 < 14_000 for r in worker_requests[-3:])
