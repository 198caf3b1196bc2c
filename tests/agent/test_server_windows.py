"""The window as the server has it, and a local server's failures and speed told truly.

Against the scripted server speaking as each local server does (issue 25): the window
is read where the server tells it (vLLM, llama-server's /props, Ollama) and said to be
unknown, once, where it does not (llama-cpp-python); an empty stream from
llama-cpp-python for a request longer than its window is read as "too long", and the
run summarizes and goes on instead of sending the same request again and again; and
the displays tell the time the server read the prompt from the time it wrote.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.providers.anthropic import AnthropicProvider
from mlra.agent.providers.base import (
    Message,
    ModelSettings,
    ProviderError,
    is_context_overflow,
    stated_window,
)
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.state import RunState
from mlra.console.cli.cli import main
from mlra.console.panes.status import activity
from mlra.console.text.model_lines import model_speed
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

WORKER = "You are the worker of an ML research agent."


def provider_for(fake: ScriptedModelServer, **options: Any) -> OpenAIProvider:
    options.setdefault("max_retries", 4)
    options.setdefault("retry_delay_s", 0.0)
    return OpenAIProvider("scripted", api_key=None, base_url=fake.url_for("openai"), **options)


@pytest.mark.parametrize(
    "options",
    [
        {"max_model_len": 6000},
        {"n_ctx": 6000},
        {"ollama_num_ctx": 6000},
        {"ollama_loaded_ctx": 6000},
    ],
    ids=["vllm", "llama-server-props", "ollama-num_ctx", "ollama-loaded"],
)
async def test_each_local_server_s_window_is_read_where_it_tells_it(
    options: dict[str, int],
) -> None:
    with ScriptedModelServer(**options) as fake:  # pyright: ignore[reportArgumentType]
        provider = provider_for(fake)
        await provider.discover_limits()
        notices = provider.take_notices()
        await provider.aclose()
    assert (provider.context_window, provider.context_window_from) == (6000, "server")
    assert provider.max_output_tokens == 1500  # an answer's budget that fits the window
    assert notices == []


async def test_llama_server_s_training_window_is_not_taken_for_its_own() -> None:
    """llama-server's /v1/models gives `n_ctx_train` (131072 here): the window is /props'."""
    with ScriptedModelServer(n_ctx=4096) as fake:
        provider = provider_for(fake)
        await provider.discover_limits()
        await provider.aclose()
    assert provider.context_window == 4096


async def test_a_window_the_server_does_not_tell_is_said_once_with_how_to_set_it() -> None:
    with ScriptedModelServer(llama_cpp_python_window=8192) as fake:
        provider = provider_for(fake)
        await provider.discover_limits()
        await provider.discover_limits()  # asked once only
        notices = provider.take_notices()
        await provider.aclose()
    assert provider.context_window_from == "default"
    assert len(notices) == 1
    assert "llama-cpp-python" in notices[0] and "--context-window" in notices[0]
    assert "32,768" in notices[0]  # what mlra assumes meanwhile
    assert "\n" not in notices[0]


async def test_an_anthropic_compatible_local_server_s_window_is_read_too() -> None:
    with ScriptedModelServer(n_ctx=6000) as fake:
        told = AnthropicProvider("local", api_key="x", base_url=fake.url_for("anthropic"))
        await told.discover_limits()
        await told.aclose()
    with ScriptedModelServer() as fake:
        silent = AnthropicProvider("local", api_key="x", base_url=fake.url_for("anthropic"))
        await silent.discover_limits()
        notices = silent.take_notices()
        await silent.aclose()
    assert (told.context_window, told.context_window_from) == (6000, "server")
    assert (silent.context_window, silent.context_window_from) == (32_768, "default")
    assert len(notices) == 1 and "--context-window" in notices[0]


LONG = [Message(role="user", content="x" * 12_000)]
"""About 3,000 tokens by the server's count: more than a 2,000-token window."""


async def test_an_empty_stream_is_asked_again_unstreamed_once_to_read_the_server_s_reason() -> None:
    with ScriptedModelServer(llama_cpp_python_window=2000) as fake:
        provider = provider_for(fake)
        with pytest.raises(ProviderError) as failed:
            await provider.generate(system=WORKER, messages=LONG, tools=[])
        notices = provider.take_notices()
        await provider.aclose()
        outcomes = [(r.outcome, r.stream) for r in fake.requests]
    # Not the same request five times: one empty stream, then the same body unstreamed.
    assert outcomes == [("empty stream", True), ("status 400", False)]
    assert is_context_overflow(failed.value) and stated_window(failed.value) == 2000
    assert "context_length_exceeded" in str(failed.value)
    assert any("without streaming" in n for n in notices)


async def test_an_empty_stream_for_a_request_larger_than_a_known_window_is_too_long_at_once() -> (
    None
):
    with ScriptedModelServer(llama_cpp_python_window=2000) as fake:
        provider = provider_for(fake, settings=ModelSettings(context_window=2000))
        with pytest.raises(ProviderError) as failed:
            await provider.generate(system=WORKER, messages=LONG, tools=[])
        await provider.aclose()
        outcomes = [r.outcome for r in fake.requests]
    assert outcomes == ["empty stream"]
    assert is_context_overflow(failed.value)
    assert "2,000 tokens, from the setting" in str(failed.value)


async def test_an_empty_stream_that_was_no_window_s_fault_gets_its_answer_unstreamed() -> None:
    with ScriptedModelServer({"worker": [{"broken": "cut"}, "fine"]}) as fake:
        provider = provider_for(fake)
        response = await provider.generate(
            system=WORKER, messages=[Message(role="user", content="hi")], tools=[]
        )
        await provider.aclose()
        outcomes = [(r.outcome, r.stream) for r in fake.requests]
    assert response.text == "fine"
    assert outcomes == [("broken cut", True), ("text", False)]


async def test_a_streamed_answer_tells_how_long_the_prompt_took_to_read() -> None:
    with ScriptedModelServer({"worker": ["a few words of an answer"]}) as fake:
        provider = provider_for(fake)
        response = await provider.generate(
            system=WORKER, messages=[Message(role="user", content="hi")], tools=[]
        )
        await provider.aclose()
    assert response.first_token_s is not None
    assert 0 <= response.first_token_s <= response.latency_s


# --- a whole run against a streaming llama-cpp-python server with a small window --------


def test_a_run_whose_request_outgrows_a_llama_cpp_python_window_summarizes_and_goes_on(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each step's output (3,000 characters) grows the worker's request, while mlra takes
    # the window for 32k (the server does not tell it): the server's 9,000 is reached.
    worker = [turn(f"step {n}", call("python", code=f"print('{n}' * 3000)")) for n in range(1, 8)]
    worker += [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    script = {
        "supervisor": supervisor_answering(),
        "worker": worker,
        "summarizer:fallback": "SUMMARY: printed digits",
    }
    with ScriptedModelServer(script, llama_cpp_python_window=9000) as server:
        code = main(
            [
                "run",
                str(answer_task),
                "--model",
                "openai/scripted",
                "--base-url",
                server.url_for("openai"),
                "--runs-dir",
                str(tmp_path),
                "--run-id",
                "r",
                "--isolation",
                "none",
                "--no-tui",
            ]
        )
        outcomes = [r.outcome for r in server.requests]
        worker_outcomes = [r.outcome for r in server.requests_for("worker")]
    shown = capsys.readouterr().out
    events = read_events(tmp_path / "r" / "events.jsonl")
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert (code, finished.reason) == (0, "submitted"), finished.message
    # The empty stream was read once unstreamed, then summarized and sent again: never
    # the same request retried unchanged.
    assert outcomes.count("empty stream") == 1 and outcomes.count("status 400") == 1
    refused = worker_outcomes.index("empty stream")
    assert worker_outcomes[refused + 1] == "status 400"
    assert worker_outcomes[refused + 2] in ("text", "tool_calls")
    assert any(isinstance(e, ev.HistorySummarized) for e in events)
    assert not any(isinstance(e, ev.ModelError) for e in events)
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert started.config["context_window_from"] == "default"
    (learned,) = [e for e in events if isinstance(e, ev.ContextWindowLearned)]
    assert (learned.context_window, learned.assumed) == (9000, 32_768)
    assert _fold(events).context_window == 9000  # the console's gauge goes by it
    # What happened, as the person running it reads it.
    assert shown.count("did not tell its context window") == 1
    assert "--context-window" in shown
    assert "without streaming" in shown
    assert "too long for the model's window" in shown and "9,000 tokens" in shown
    assert "the model's window is taken as 9,000 tokens" in shown
    assert "prompt read in" in shown and "tok/s" in shown


# --- the speed of a local model, as the displays show it ---------------------------------


def _fold(events: list[ev.Event]) -> RunState:
    state = RunState(started=True)  # as after its run_started
    for event in events:
        state.apply(event)
    return state


def test_the_status_line_tells_reading_the_prompt_from_writing_the_answer() -> None:
    started = ev.StepStarted(agent="worker", step=1, turn=1, t=10.0)
    reading = _fold([started])
    assert activity(reading, 22.0)[0].plain == "worker reading the prompt… 12s"
    answering = ev.ModelAnswering(agent="worker", turn=1, first_token_s=12.0, t=22.0)
    deltas = [ev.TextDelta(agent="worker", turn=1, text="x" * 160, t=22.0 + k) for k in (1, 2)]
    writing = _fold([started, answering, *deltas])
    line = activity(writing, 26.0)[0].plain
    # 320 characters (~80 tokens) in the 4 s since the first piece: ~20 tok/s.
    assert line == "worker generating… 16s · ~20 tok/s (prompt read in 12s)"
    done = _fold(
        [started, answering, *deltas, ev.ModelCall(agent="worker", model="m", turn=1, t=26.0)]
    )
    assert activity(done, 27.0) == []


def test_a_pause_while_the_model_writes_does_not_inflate_its_speed() -> None:
    """Qwen2.5-Coder-0.5B on llama-server: Space while the supervisor wrote its plan. The
    run clock stopped at 1m17s, the server went on streaming, and the status line's speed
    climbed from ~2.6 to ~7.3 tok/s with the clock standing still."""
    started = ev.StepStarted(agent="supervisor", step=1, turn=1, t=10.0)
    answering = ev.ModelAnswering(agent="supervisor", turn=1, first_token_s=10.0, t=20.0)
    before = [ev.TextDelta(agent="supervisor", turn=1, text="x" * 40, t=20.0 + k)
              for k in range(1, 11)]  # fmt: skip
    pause = ev.Control(action="pause", source="user", t=30.0)
    during = [ev.TextDelta(agent="supervisor", turn=1, text="x" * 40, t=30.0)] * 60
    writing = [started, answering, *before]
    line = activity(_fold(writing), 30.0)[0].plain
    # 400 characters (~100 tokens) in the 10 s since the first piece: ~10 tok/s.
    assert line.startswith("supervisor generating… 20s · ~10 tok/s"), line
    paused = activity(_fold([*writing, pause, *during]), 30.0)[0].plain
    assert paused.startswith("supervisor generating… 20s · ~10 tok/s"), paused
    resume = ev.Control(action="resume", source="user", t=30.0)
    after = [ev.TextDelta(agent="supervisor", turn=1, text="x" * 40, t=30.0 + k)
             for k in range(1, 11)]  # fmt: skip
    resumed = activity(_fold([*writing, pause, *during, resume, *after]), 40.0)[0].plain
    assert resumed.startswith("supervisor generating… 30s · ~10 tok/s"), resumed


def test_a_model_call_s_speed_is_told_apart_from_its_prompt_reading() -> None:
    call_ = ev.ModelCall(
        agent="worker", model="m", output_tokens=120, latency_s=7.0, first_token_s=3.0
    )
    assert model_speed(call_) == "prompt read in 3.0s, 120 tokens at 30 tok/s"
    guessed = call_.model_copy(update={"tokens_estimated": True})
    assert model_speed(guessed) == "prompt read in 3.0s, ~120 tokens at ~30 tok/s"


def test_a_slow_writer_s_speed_is_not_rounded_to_nothing() -> None:
    """Qwen2.5-Coder-0.5B on llama-server, two busy cores: the supervisor wrote its plan at
    about half a token a second, and the status line said `generating… 3m32s · ~0 tok/s`,
    which reads as stopped."""
    started = ev.StepStarted(agent="supervisor", step=1, turn=1, t=10.0)
    answering = ev.ModelAnswering(agent="supervisor", turn=1, first_token_s=162.0, t=172.0)
    delta = ev.TextDelta(agent="supervisor", turn=1, text='```json { "name": "update_plan"',
                         t=180.0)  # fmt: skip
    line = activity(_fold([started, answering, delta]), 232.0)[0].plain
    # 31 characters (~7.75 tokens) in the 60 s since the first piece.
    assert line == "supervisor generating… 3m42s · ~0.1 tok/s (prompt read in 2m42s)", line
    slow = ev.ModelCall(
        agent="worker", model="m", output_tokens=12, latency_s=23.0, first_token_s=3.0
    )
    assert model_speed(slow) == "prompt read in 3.0s, 12 tokens at 0.6 tok/s"


# --- a server still loading its model when the run starts --------------------------------


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_server_loading_its_model_at_the_start_is_asked_its_window_once_it_answers(
    api: str,
) -> None:
    """llama-server answers everything, /props included, with 503 "Loading model" until
    its model is loaded: the window is asked again after the first answer."""
    with ScriptedModelServer({"worker": [turn("hello")]}, n_ctx=16_384) as fake:
        fake.loading_model = True
        provider: OpenAIProvider | AnthropicProvider
        if api == "openai":
            provider = provider_for(fake)
        else:
            provider = AnthropicProvider("local", api_key="x", base_url=fake.url_for("anthropic"))
        await provider.discover_limits()
        (notice,) = provider.take_notices()
        assert "still loading its model (HTTP 503); it is asked again once it answers" in notice
        assert provider.context_window_from == "default" and provider.take_window_told() is None
        fake.loading_model = False
        await provider.generate(
            system=WORKER, messages=[Message(role="user", content="hi")], tools=[]
        )
        told = provider.take_window_told()
        await provider.generate(
            system=WORKER, messages=[Message(role="user", content="hi")], tools=[]
        )
        await provider.aclose()
    assert told is not None and (told.window, told.assumed) == (16_384, 32_768)
    assert told.told_by == "llama-server's /props, read once its model was loaded"
    assert (provider.context_window, provider.context_window_from) == (16_384, "server")
    assert provider.take_window_told() is None  # asked once only


def _run_while_loading(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str], n_ctx: int
) -> tuple[int, list[ev.Event], str]:
    """A run of the answer task started while its server loads a model of `n_ctx`."""
    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    with ScriptedModelServer(
        script, n_ctx=n_ctx, llama_server_ctx=n_ctx, turn_by_history=True
    ) as server:
        server.loading_model = True

        def loaded_once_asked() -> None:
            # The model is loaded once the run's first model request was answered 503.
            asked = ("/chat/completions", "/messages")
            while not any(
                r.outcome == "loading model" and r.path.endswith(asked) for r in server.requests
            ):
                time.sleep(0.01)
            server.loading_model = False

        loader = threading.Thread(target=loaded_once_asked, daemon=True)
        loader.start()
        code = main(
            ["run", str(answer_task), "--model", "openai/scripted", "--base-url",
             server.url_for("openai"), "--runs-dir", str(tmp_path), "--run-id", "r",
             "--isolation", "none", "--no-tui"]
        )  # fmt: skip
        loader.join(5)
    return code, read_events(tmp_path / "r" / "events.jsonl"), capsys.readouterr().out


def test_a_run_started_while_its_server_loads_goes_by_the_window_told_after(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, events, shown = _run_while_loading(tmp_path, answer_task, capsys, 16_384)
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    assert (code, finished.reason) == (0, "submitted"), finished.message
    assert any(isinstance(e, ev.ModelRetry) for e in events)  # its 503 was asked again
    (learned,) = [e for e in events if isinstance(e, ev.ContextWindowLearned)]
    assert (learned.context_window, learned.assumed) == (16_384, 32_768)
    assert learned.smallest is not None and learned.smallest < 16_384
    assert _fold(events).context_window == 16_384  # the console's gauge goes by it
    assert "still loading its model" in shown
    assert (
        "the model's window is taken as 16,384 tokens from llama-server's /props, read once "
        "its model was loaded (was 32,768)" in shown
    )


def test_a_window_told_once_the_model_loaded_is_said_to_be_too_small_where_it_is(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its line advised passing the window to the next run, which `mlra run` refuses."""
    _, events, shown = _run_while_loading(tmp_path, answer_task, capsys, 2_048)
    (learned, *_) = [e for e in events if isinstance(e, ev.ContextWindowLearned)]
    assert learned.context_window == 2_048 and learned.told_by is not None
    assert learned.smallest is not None and learned.smallest > 2_048
    assert "read once its model was loaded (was 32,768): below the smallest window" in shown
    assert "pass --context-window 2048" not in shown
