"""Faults a review of issue 15 found, each pinned by a run through the real SDKs
against the scripted model server (tests/fakes/model_server.py)."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.providers import resolve_model
from mlra.agent.providers.anthropic import AnthropicProvider
from mlra.agent.providers.base import Message, ModelProvider, retries_told_to
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.agent.setup.prompts import status_note
from mlra.batch.state import RUNS, run_status
from mlra.console.cli.cli import main
from mlra.console.text.headless import TranscriptDisplay
from mlra.tasks.spec import load_task
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


# --- 1. a small window never ends the run with an HTTP 400 -------------------------------


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


# --- 2. the supervisor's ending says what happened ----------------------------------------


async def test_a_supervisor_whose_submit_failed_is_not_said_never_to_have_called_it(
    tmp_path: Path, answer_task: Path
) -> None:
    supervisor = [turn("", call("submit", path="missing.txt", note="done"))]
    supervisor += ["I am done."] * 4
    finished, _, _ = await _run({"supervisor": supervisor}, tmp_path, answer_task)
    assert finished is not None and finished.reason == "no_tool_calls"
    assert "never called submit" not in finished.message
    assert "submit call failed" in finished.message and "missing.txt" in finished.message


# --- 3. no silent retries or adaptations -----------------------------------------------------


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


# --- 4. a replay that diverges says what differs, and is no provider failure ----------------


async def test_a_replay_whose_prompt_changed_shows_the_difference(
    tmp_path: Path, answer_task: Path
) -> None:
    script = {"supervisor": supervisor_answering(), "worker": worker_answering()}
    finished, _, _ = await _run(script, tmp_path / "rec", answer_task)
    assert finished is not None and finished.reason == "submitted"
    recorded = next((tmp_path / "rec").iterdir())

    provider = ReplayProvider.from_spec(f"replay:{recorded}")
    out = tmp_path / "batch"
    config = RunConfig(
        task="answer",
        model=f"replay:{recorded}",
        runs_dir=out / RUNS,
        run_id="again",
        isolation="none",
        time_limit_s=360,  # the recording ran under the default
    )
    controller = RunController(config, load_task(answer_task), provider)
    await controller.run(agent_for)
    events = read_events(controller.run_dir / "events.jsonl")
    ended = events[-1]
    assert isinstance(ended, ev.RunFinished) and ended.reason == "replay_diverged"
    assert "replay diverged at model call 1 (supervisor" in ended.message
    assert "time limit 6m00s (recorded 5m00s)" in ended.message  # what changed, shown
    assert not any(isinstance(e, ev.ModelError) for e in events)
    # A batch does not try it again: it would diverge the same way.
    assert run_status(out, "again").kind == "unscored"


# --- 5. the deadline is no model error --------------------------------------------------------


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


# --- 6. small things ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "$nan"])
@pytest.mark.parametrize("flag", ["--max-cost", "--temperature"])
def test_float_flags_refuse_nan_and_inf(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    if flag == "--temperature" and value.startswith("$"):
        return
    with pytest.raises(SystemExit) as exited:
        main(["run", "answer", "--model", "baseline", flag, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and len(err.splitlines()) == 1


def test_the_status_note_says_an_unpriced_cost_budget_cannot_be_enforced() -> None:
    common = dict(elapsed_s=0.0, limit_s=60.0, steps=0, max_steps=None, tokens=0, max_tokens=None)
    priced = status_note(cost_usd=0.0, max_cost_usd=1.0, **common)  # pyright: ignore[reportArgumentType]
    unpriced = status_note(cost_usd=0.0, max_cost_usd=1.0, cost_enforced=False, **common)  # pyright: ignore[reportArgumentType]
    assert "Cost: $0.00 of $1.00." in priced
    assert "of $1.00" not in unpriced and "cannot be enforced" in unpriced


def test_the_transcript_names_a_retry_after_an_invalid_answer() -> None:
    stream = io.StringIO()
    TranscriptDisplay(stream, rich=False).on_event(
        ev.ModelRetry(agent="worker", model="m", attempt=1, max_retries=2, status=200)
    )
    assert "model retry 1/2 after an invalid answer" in stream.getvalue()
