"""What a run makes of a model server's faults, each met through the real SDKs against
the scripted model server (tests/fakes/model_server.py): a window too small for an
output, or a request refused as too long, is summarized and sent again, never an HTTP
400 that ends the run; an HTTP 200 that is no answer is retried and the retries told
(the transcript names them); a server that refuses native tools is noticed once; a
call the run's deadline cut off is no model error."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.providers.anthropic import AnthropicProvider
from mlra.agent.providers.base import Message, ModelProvider, retries_told_to
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.text.headless import TranscriptDisplay
from mlra.tasks.spec import load_task
from tests.conftest import clock_from
from tests.fakes.model_server import Api, ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn, worker_answering

WORKER = "You are the worker of an ML research agent."
ASK = [Message(role="user", content="list the files")]


async def _run(
    script: Mapping[str, Any], tmp_path: Path, answer_task: Path, **server: Any
) -> tuple[ev.RunFinished | None, list[ev.Event], list[str]]:
    with ScriptedModelServer(script, **server) as fake:
        provider = resolve_model("openai/local", base_url=fake.url_for("openai"), env={})
        await provider.discover_limits()
        config = RunConfig(task="answer", model="openai/local", runs_dir=tmp_path, isolation="none")
        controller = RunController(config, load_task(answer_task), provider)
        await controller.run(agent_for)
        await provider.aclose()
        outcomes = [r.outcome for r in fake.requests]
    events = read_events(controller.run_dir / "events.jsonl")
    finished = next((e for e in events if isinstance(e, ev.RunFinished)), None)
    return finished, events, outcomes


async def test_a_long_numeric_output_in_a_small_window_is_no_http_400(
    tmp_path: Path, answer_task: Path
) -> None:
    worker = [
        turn("", call("bash", command="seq 100000 104000")),
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="ok")),
    ]
    script = {
        "supervisor": supervisor_answering(),
        "worker": worker,
        "summarizer:fallback": "SUMMARY: printed numbers",
    }
    finished, _, outcomes = await _run(
        script, tmp_path, answer_task, n_ctx=7000, context_limit=7000
    )
    assert finished is not None and finished.reason != "provider_error", finished
    assert "status 400" not in outcomes


async def test_a_server_that_refuses_a_request_as_too_long_gets_it_summarized_and_again(
    tmp_path: Path, answer_task: Path
) -> None:
    """The server's window is smaller than it says (n_ctx 9000, refusing past 6000): each
    refusal is mended by a summary and the request sent again, never a failed run."""
    noisy = "print('x' * 3000)"
    # Each call its own (the same call again and again would be a loop: agent/loop/loops.py).
    worker = [turn(f"step {n}", call("python", code=f"{noisy}  # {n}")) for n in range(6)]
    worker += [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="ok")),
    ]
    script = {
        "supervisor": supervisor_answering(),
        "worker": worker,
        "summarizer:fallback": "SUMMARY: printed x",
    }
    finished, events, outcomes = await _run(
        script, tmp_path, answer_task, n_ctx=9000, context_limit=6000
    )
    assert finished is not None and finished.reason == "submitted", finished
    assert "status 400" in outcomes  # the server did refuse
    refused = [e for e in events if isinstance(e, ev.Notice) and "too long" in e.message]
    assert refused and all("sent again" in n.message for n in refused)
    assert not any(isinstance(e, ev.ModelError) for e in events)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_retries_of_an_http_200_that_is_no_answer_are_told(api: Api) -> None:
    told: list[tuple[int, int | None]] = []
    script = {"worker": [{"broken": "html", "times": 2}, "fine"]}
    with ScriptedModelServer(script) as fake:
        url = fake.url_for(api)
        provider: ModelProvider
        if api == "anthropic":
            provider = AnthropicProvider("m", api_key="sk-test", base_url=url, retry_delay_s=0.0)
        else:
            provider = OpenAIProvider("m", api_key="sk-test", base_url=url, retry_delay_s=0.0)
        with retries_told_to(lambda attempt, status: told.append((attempt, status))):
            response = await provider.generate(system=WORKER, messages=ASK, tools=[])
        await provider.aclose()
    assert response.text == "fine"
    assert told == [(1, 200), (2, 200)]


async def test_a_server_that_refuses_native_tools_is_noticed_once(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {"supervisor": supervisor_answering(), "worker": worker_answering()}
    _, events, outcomes = await _run(
        script, tmp_path, answer_task, reject_tools="tools are not supported"
    )
    assert outcomes.count("status 400") == 1
    told = [e.message for e in events if isinstance(e, ev.Notice) and "native tool" in e.message]
    assert len(told) == 1 and "read from the model's text" in told[0]


async def test_a_call_the_deadline_cut_off_is_no_model_error(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {"supervisor": [{"hang": 30.0, "text": "too late"}]}
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/gpt-4o", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer",
            model="openai/gpt-4o",
            runs_dir=tmp_path,
            isolation="none",
            time_limit_s=1.0,
        )
        controller = RunController(config, load_task(answer_task), provider)
        # The second counts from the supervisor's first step, however long the run's
        # start took on a busy machine (it could use up the whole limit before the call).
        clock_from(controller, lambda e: isinstance(e, ev.StepStarted))
        result = await controller.run(agent_for)
        await provider.aclose()
    assert result.reason == "deadline"
    events = read_events(controller.run_dir / "events.jsonl")
    # The call is still counted (its estimated tokens), once, and is no model error.
    (cut,) = [e for e in events if isinstance(e, ev.ModelError)]
    assert "cut off" in cut.error
    assert cut.cut_off == "deadline" and not cut.fatal
    assert cut.input_tokens > 0 and cut.cost_usd > 0
    assert result.input_tokens == cut.input_tokens
    assert result.cost_usd == pytest.approx(cut.cost_usd, abs=1e-6)
    assert "run's time limit cut off" in cut.error and "may have been billed" in cut.error
    assert result.input_tokens == cut.input_tokens > 0  # still in the totals
    stream = io.StringIO()
    transcript = TranscriptDisplay(stream, rich=False)
    for event in events:
        transcript.on_event(event)
    shown = stream.getvalue()
    assert "model error" not in shown and "may have been billed" in shown


def test_the_transcript_names_a_retry_after_an_invalid_answer() -> None:
    stream = io.StringIO()
    TranscriptDisplay(stream, rich=False).on_event(
        ev.ModelRetry(agent="worker", model="m", attempt=1, max_retries=2, status=200)
    )
    assert "model retry 1/2 after an invalid answer" in stream.getvalue()
