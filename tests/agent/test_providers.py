"""The model providers through the real SDKs, against the scripted HTTP server.

Nothing here mocks an SDK: requests go over HTTP to tests/fakes/model_server.py,
so streaming, retries, time-outs and error mapping are the SDKs' real ones.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import openai
import pytest

from mlra.agent.providers import (
    DEFAULT_ANTHROPIC_MODEL,
    DEFAULT_OPENAI_MODEL,
    default_model_spec,
    resolve_model,
)
from mlra.agent.providers.anthropic import AnthropicProvider
from mlra.agent.providers.base import (
    ConfigError,
    Message,
    ModelProvider,
    ProviderError,
    ToolCallRequest,
    Usage,
)
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.providers.pricing import cost, price_for
from mlra.agent.setup.prompts import (
    REVIEWER_SYSTEM,
    SUMMARIZER_SYSTEM,
    SUPERVISOR_SYSTEM,
    WORKER_SYSTEM,
)
from mlra.tools.registry import ToolSpec
from tests.fakes.model_server import EXHAUSTED, ScriptedModelServer, role_of, split_text

WORKER = "You are the worker of an ML research agent.\nMore instructions."
BASH = ToolSpec(
    name="bash",
    description="Run a shell command.",
    parameters={
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
        "additionalProperties": False,
    },
)
READ = ToolSpec(
    name="read_file",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
APIS = ["anthropic", "openai"]
MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o"}

Factory = Callable[..., ModelProvider]


@pytest.fixture
def server() -> Any:
    with ScriptedModelServer() as fake:
        yield fake


@pytest.fixture
async def make(server: ScriptedModelServer) -> AsyncIterator[Factory]:
    """Providers pointed at the fake server, closed after the test."""
    made: list[ModelProvider] = []

    def factory(api: str, **options: Any) -> ModelProvider:
        options.setdefault("max_retries", 2)
        cls = AnthropicProvider if api == "anthropic" else OpenAIProvider
        model = options.pop("model", MODELS[api])
        provider = cls(model, api_key="sk-test", base_url=server.url_for(api), **options)  # type: ignore[arg-type]
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


def conversation() -> list[Message]:
    """A worker turn with two tool calls (one failed), their results, then new user text."""
    return [
        Message(role="user", content="Train the model."),
        Message(
            role="assistant",
            content="Looking around first.",
            tool_calls=[
                ToolCallRequest(
                    id="t1",
                    name="bash",
                    arguments={"command": "ls"},
                    raw_arguments='{"command": "ls"}',
                ),
                ToolCallRequest(
                    id="t2",
                    name="read_file",
                    arguments={"path": "a.txt"},
                    raw_arguments='{"path": "a.txt"}',
                ),
            ],
        ),
        Message(role="tool", content="a.txt\nb.txt", tool_call_id="t1", tool_name="bash"),
        Message(
            role="tool",
            content="Error: no such file",
            tool_call_id="t2",
            tool_name="read_file",
            is_error=True,
        ),
        Message(role="user", content="Time used: 1m of 10m."),
    ]


# --- streaming and tool calls ---------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_streams_text_in_order_and_returns_tool_calls(
    api: str, server: ScriptedModelServer, make: Factory
) -> None:
    text = "I will list the files and then read the config."
    server.add(
        "worker",
        {
            "text": text,
            "tool_calls": [
                {"name": "bash", "arguments": {"command": "ls -la /workspace"}},
                {"name": "read_file", "arguments": {"path": "config.yaml"}},
            ],
        },
    )
    pieces: list[str] = []
    response = await make(api).generate(
        system=WORKER,
        messages=[Message(role="user", content="go")],
        tools=[BASH, READ],
        on_text=pieces.append,
    )
    assert pieces == split_text(text) and len(pieces) > 3
    assert response.text == text
    assert [(c.name, c.arguments, c.parse_error) for c in response.tool_calls] == [
        ("bash", {"command": "ls -la /workspace"}, None),
        ("read_file", {"path": "config.yaml"}, None),
    ]
    prefix = "toolu_" if api == "anthropic" else "call_"
    assert [c.id for c in response.tool_calls] == [f"{prefix}0001", f"{prefix}0002"]
    assert response.stop_reason == ("tool_use" if api == "anthropic" else "tool_calls")
    assert response.latency_s > 0
    (request,) = server.requests
    assert request.api == api and request.role == "worker" and request.stream


@pytest.mark.parametrize("api", APIS)
async def test_malformed_tool_arguments_become_parse_errors(
    api: str, server: ScriptedModelServer, make: Factory
) -> None:
    server.add(
        "worker",
        {
            "tool_calls": [
                {"name": "bash", "raw_arguments": '{"command": "ls'},
                {"name": "bash", "raw_arguments": "[1, 2]"},
                {"name": "bash", "raw_arguments": ""},
            ]
        },
    )
    response = await make(api).generate(
        system=WORKER, messages=[Message(role="user", content="go")], tools=[BASH]
    )
    broken, listed, empty = response.tool_calls
    assert broken.arguments is None and broken.raw_arguments == '{"command": "ls'
    assert broken.parse_error and "not valid JSON" in broken.parse_error
    assert listed.arguments is None and listed.parse_error and "JSON object" in listed.parse_error
    assert empty.arguments == {} and empty.parse_error is None
    assert response.text == ""


async def test_arguments_cut_off_by_max_tokens_say_so(
    server: ScriptedModelServer, make: Factory
) -> None:
    server.add(
        "worker",
        {"tool_calls": [{"name": "bash", "raw_arguments": '{"comm'}], "stop_reason": "max_tokens"},
    )
    response = await make("anthropic").generate(
        system=WORKER, messages=[Message(role="user", content="go")], tools=[BASH]
    )
    assert response.stop_reason == "max_tokens"
    assert "output token limit" in (response.tool_calls[0].parse_error or "")


# --- history conversion ------------------------------------------------------------------


async def test_anthropic_request_pairs_tool_results_and_marks_cache(
    server: ScriptedModelServer, make: Factory
) -> None:
    await make("anthropic").generate(
        system=WORKER, messages=conversation(), tools=[BASH, READ], max_tokens=1000
    )
    body = server.requests[0].body
    assert (
        body["model"] == "claude-sonnet-4-6"
        and body["max_tokens"] == 1000
        and body["stream"] is True
    )
    assert body["system"] == [
        {"type": "text", "text": WORKER, "cache_control": {"type": "ephemeral"}}
    ]
    assert [t["name"] for t in body["tools"]] == ["bash", "read_file"]
    assert (
        body["tools"][0]["input_schema"] == BASH.parameters
        and "cache_control" not in body["tools"][0]
    )
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "text", "text": "Looking around first."},
        {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}},
        {"type": "tool_use", "id": "t2", "name": "read_file", "input": {"path": "a.txt"}},
    ]
    results = messages[2]["content"]
    assert results[0] == {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt\nb.txt"}
    assert results[1] == {
        "type": "tool_result",
        "tool_use_id": "t2",
        "content": "Error: no such file",
        "is_error": True,
    }
    # The user text after the results joins the same message and carries the moving breakpoint.
    assert results[2] == {
        "type": "text",
        "text": "Time used: 1m of 10m.",
        "cache_control": {"type": "ephemeral"},
    }
    marks = str(body).count("cache_control")
    assert marks == 3


async def test_anthropic_request_repairs_an_interrupted_history(
    server: ScriptedModelServer, make: Factory
) -> None:
    history = [
        Message(role="user", content="instructions"),
        Message(role="user", content="status"),
        Message(
            role="assistant",
            tool_calls=[
                ToolCallRequest(
                    id="t1", name="bash", raw_arguments="{oops", parse_error="bad JSON"
                ),
            ],
        ),
        Message(role="user", content="[message from the user] carry on"),
        Message(role="assistant", content=""),
        Message(role="user", content="next"),
    ]
    await make("anthropic").generate(system=WORKER, messages=history, tools=[BASH])
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert [b["text"] for b in messages[0]["content"]] == ["instructions", "status"]
    assert messages[1]["content"] == [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]
    missing, text = messages[2]["content"]
    assert (
        missing["type"] == "tool_result" and missing["tool_use_id"] == "t1" and missing["is_error"]
    )
    assert text["text"] == "[message from the user] carry on"
    assert messages[3]["content"] == [{"type": "text", "text": "(no response)"}]


async def test_openai_request_has_tool_messages_and_function_schemas(
    server: ScriptedModelServer, make: Factory
) -> None:
    await make("openai").generate(
        system=WORKER, messages=conversation(), tools=[BASH, READ], max_tokens=1000
    )
    body = server.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 1000  # a compatible server (base_url) gets max_tokens
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a shell command.",
                "parameters": BASH.parameters,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file.",
                "parameters": READ.parameters,
            },
        },
    ]
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert messages[0]["content"] == WORKER
    assert messages[2]["content"] == "Looking around first."
    assert messages[2]["tool_calls"] == [
        {
            "id": "t1",
            "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "ls"}'},
        },
        {
            "id": "t2",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
        },
    ]
    assert messages[3] == {"role": "tool", "tool_call_id": "t1", "content": "a.txt\nb.txt"}
    assert messages[4] == {"role": "tool", "tool_call_id": "t2", "content": "Error: no such file"}
    assert messages[5] == {"role": "user", "content": "Time used: 1m of 10m."}


async def test_openai_request_repairs_history_and_replays_bad_arguments_as_json(
    server: ScriptedModelServer, make: Factory
) -> None:
    history = [
        Message(role="user", content="instructions"),
        Message(role="user", content="status"),
        Message(
            role="assistant",
            tool_calls=[
                ToolCallRequest(
                    id="t1", name="bash", raw_arguments="{oops", parse_error="bad JSON"
                ),
                ToolCallRequest(
                    id="t2",
                    name="bash",
                    arguments={"command": "ls"},
                    raw_arguments='{"command":"ls"}',
                ),
            ],
        ),
        Message(role="tool", content="listing", tool_call_id="t2", tool_name="bash"),
        Message(role="user", content="next"),
    ]
    await make("openai").generate(system=WORKER, messages=history, tools=[BASH])
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert messages[1]["content"] == "instructions\n\nstatus"
    assert messages[2]["content"] is None
    assert [c["function"]["arguments"] for c in messages[2]["tool_calls"]] == [
        "{}",
        '{"command":"ls"}',
    ]
    assert messages[3]["tool_call_id"] == "t2"
    assert messages[4]["tool_call_id"] == "t1" and messages[4]["content"].startswith("Error:")


# --- usage and cost ----------------------------------------------------------------------


async def test_anthropic_usage_counts_cache_and_cost(
    server: ScriptedModelServer, make: Factory
) -> None:
    usage = {
        "input_tokens": 10_000,
        "output_tokens": 500,
        "cache_read_tokens": 6_000,
        "cache_write_tokens": 1_000,
    }
    server.add("worker", {"text": "ok", "usage": usage}, "again")
    provider = make("anthropic")
    response = await provider.generate(
        system=WORKER, messages=[Message(role="user", content="go")], tools=[BASH]
    )
    assert response.usage == Usage(
        input_tokens=10_000, output_tokens=500, cache_read_tokens=6_000, cache_write_tokens=1_000
    )
    expected = (3_000 * 3.0 + 6_000 * 0.3 + 1_000 * 3.75 + 500 * 15.0) / 1e6
    assert response.cost_usd == pytest.approx(expected)
    # Without scripted numbers the server derives them from the request it got.
    second = await provider.generate(
        system=WORKER, messages=[Message(role="user", content="go")], tools=[BASH]
    )
    assert (
        second.usage.input_tokens > 0
        and second.usage.cache_read_tokens > 0
        and second.usage.output_tokens > 10
    )
    assert second.cost_usd > 0


async def test_openai_usage_reads_cached_tokens(server: ScriptedModelServer, make: Factory) -> None:
    server.add(
        "worker",
        {
            "text": "ok",
            "usage": {"input_tokens": 2_000, "output_tokens": 100, "cache_read_tokens": 1_024},
        },
    )
    response = await make("openai").generate(
        system=WORKER, messages=[Message(role="user", content="go")], tools=[]
    )
    assert response.usage == Usage(input_tokens=2_000, output_tokens=100, cache_read_tokens=1_024)
    assert response.cost_usd == pytest.approx((976 * 2.5 + 1_024 * 1.25 + 100 * 10.0) / 1e6)
    assert "tools" not in server.requests[0].body


def test_pricing_matches_by_prefix_and_leaves_unknown_models_unpriced() -> None:
    assert price_for("claude-sonnet-4-5-20250929") == price_for("anthropic/claude-sonnet-4-6")
    assert price_for("claude-opus-4-1-20250805").input == 15.0  # type: ignore[union-attr]
    assert price_for("claude-opus-4-6").input == 5.0  # type: ignore[union-attr]
    assert price_for("gpt-4o-mini-2024-07-18").input == 0.15  # type: ignore[union-attr]
    assert price_for("gpt-4o-2024-08-06").input == 2.5  # type: ignore[union-attr]
    assert price_for("o3-mini").output == 4.4  # type: ignore[union-attr]
    assert price_for("claude-sonnet-5") == price_for("claude-sonnet-4-6")  # a family's newer model
    assert price_for("gpt-5.5") is None and price_for("o3x") is None
    assert cost("gpt-5", Usage(input_tokens=1_000_000, output_tokens=1_000_000)) == (11.25, True)
    assert cost("openai/Qwen/Qwen3-8B", Usage(input_tokens=5_000, output_tokens=100)) == (
        0.0,
        False,
    )
    assert cost("llama3.1:8b", Usage()) == (0.0, False)


# --- retries and failures ----------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("status", [429, 500])
async def test_transient_failures_are_retried_by_the_sdk(
    api: str, status: int, server: ScriptedModelServer, make: Factory
) -> None:
    server.add("worker", {"status": status, "times": 2}, "made it")
    response = await make(api, max_retries=2).generate(
        system=WORKER, messages=[Message(role="user", content="go")], tools=[BASH]
    )
    assert response.text == "made it"
    assert [r.outcome for r in server.requests] == [f"status {status}", f"status {status}", "text"]


@pytest.mark.parametrize("api", APIS)
async def test_persistent_server_errors_become_a_provider_error(
    api: str, server: ScriptedModelServer, make: Factory
) -> None:
    server.add("worker", {"status": 500, "times": 99, "message": "the model is on fire"})
    with pytest.raises(ProviderError) as caught:
        await make(api, max_retries=1).generate(
            system=WORKER, messages=[Message(role="user", content="go")], tools=[BASH]
        )
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{api}/{MODELS[api]}: HTTP 500")
    assert "the model is on fire" in message and "gave up after 1 retries" in message
    assert len(server.requests) == 2


@pytest.mark.parametrize("api", APIS)
async def test_client_errors_are_not_retried(
    api: str, server: ScriptedModelServer, make: Factory
) -> None:
    server.add("worker", {"status": 401, "message": "invalid x-api-key"})
    with pytest.raises(ProviderError, match=r"HTTP 401.*invalid x-api-key"):
        await make(api).generate(
            system=WORKER, messages=[Message(role="user", content="go")], tools=[]
        )
    assert len(server.requests) == 1


@pytest.mark.parametrize("api", APIS)
async def test_a_hanging_server_ends_in_a_time_out(
    api: str, server: ScriptedModelServer, make: Factory
) -> None:
    server.add("worker", {"hang": 60, "times": 2})
    with pytest.raises(
        ProviderError, match=r"no answer .*within 0.2 s \(gave up after 1 retries\)"
    ):
        await make(api, max_retries=1, timeout_s=0.2).generate(
            system=WORKER, messages=[Message(role="user", content="go")], tools=[]
        )
    assert [r.outcome for r in server.requests] == ["hang", "hang"]


async def test_connection_refused_is_a_provider_error() -> None:
    with ScriptedModelServer() as gone:
        url = gone.url_for("openai")
    provider = OpenAIProvider("gpt-4o", api_key="k", base_url=url, max_retries=0)
    try:
        with pytest.raises(ProviderError, match=r"cannot connect to http://127\.0\.0\.1"):
            await provider.generate(
                system=WORKER, messages=[Message(role="user", content="go")], tools=[]
            )
    finally:
        await provider.aclose()


@pytest.mark.parametrize("api", APIS)
async def test_a_stream_failing_midway_is_a_provider_error(
    api: str, server: ScriptedModelServer, make: Factory
) -> None:
    server.add("worker", {"text": "partial answer", "stream_error": "overloaded_error"})
    pieces: list[str] = []
    with pytest.raises(ProviderError, match=r"stream failed.*overloaded_error") as caught:
        await make(api).generate(
            system=WORKER,
            messages=[Message(role="user", content="go")],
            tools=[],
            on_text=pieces.append,
        )
    assert "".join(pieces) == "partial answer"
    assert "\n" not in str(caught.value)


# --- adapting to OpenAI-compatible servers -----------------------------------------------


async def test_openai_drops_stream_options_when_the_server_rejects_them(make: Factory) -> None:
    with ScriptedModelServer({"worker": ["first", "second"]}, reject_stream_options=True) as fake:
        provider = OpenAIProvider("local-model", api_key=None, base_url=fake.url_for("openai"))
        try:
            first = await provider.generate(
                system=WORKER, messages=[Message(role="user", content="go")], tools=[]
            )
            second = await provider.generate(
                system=WORKER, messages=[Message(role="user", content="go")], tools=[]
            )
        finally:
            await provider.aclose()
        assert (first.text, second.text) == ("first", "second")
        assert ["stream_options" in r.body for r in fake.requests] == [True, False, False]
        # No usage from such a server: an estimate keeps the context bookkeeping honest.
        assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
        assert first.cost_usd == 0
        assert fake.requests[0].headers["authorization"] == "Bearer not-needed"


async def test_openai_falls_back_to_unstreamed_answers_when_streaming_is_refused(
    server: ScriptedModelServer, make: Factory
) -> None:
    refusal = "Your organization must be verified to stream this model."
    server.add(
        "worker",
        {"status": 400, "message": refusal},
        {
            "text": "whole answer",
            "tool_calls": [{"name": "bash", "arguments": {"command": "nvidia-smi"}}],
        },
    )
    pieces: list[str] = []
    response = await make("openai").generate(
        system=WORKER,
        messages=[Message(role="user", content="go")],
        tools=[BASH],
        on_text=pieces.append,
    )
    assert pieces == ["whole answer"] and response.text == "whole answer"
    assert response.tool_calls[0].arguments == {"command": "nvidia-smi"}
    assert response.usage.input_tokens > 0
    assert [r.stream for r in server.requests] == [True, False]


async def test_openai_reads_the_context_window_of_a_vllm_server() -> None:
    with ScriptedModelServer({"worker": ["hi"]}, max_model_len=16_384) as fake:
        provider = OpenAIProvider("Qwen/Qwen3-8B", api_key=None, base_url=fake.url_for("openai"))
        try:
            assert provider.context_window == 32_768  # the guess before the server is asked
            await provider.generate(
                system=WORKER, messages=[Message(role="user", content="go")], tools=[]
            )
        finally:
            await provider.aclose()
    assert provider.context_window == 16_384
    assert provider.max_output_tokens <= 4_096


def test_model_limits_are_known_for_common_models() -> None:
    opus = AnthropicProvider("claude-opus-4-1-20250805", api_key="k")
    haiku = AnthropicProvider("claude-3-haiku-20240307", api_key="k")
    unknown = AnthropicProvider("claude-next", api_key="k")
    gpt = OpenAIProvider("gpt-4.1-mini", api_key="k")
    assert (opus.context_window, opus.max_output_tokens) == (200_000, 32_000)
    assert haiku.max_output_tokens == 4_096
    assert (unknown.context_window, unknown.max_output_tokens) == (200_000, 8_192)
    assert gpt.context_window > 1_000_000
    assert (
        opus.build_request(system="s", messages=[], tools=[], max_tokens=100_000)["max_tokens"]
        == 32_000
    )


# --- the fake server itself ------------------------------------------------------------


def test_roles_come_from_the_first_line_of_the_real_system_prompts() -> None:
    assert role_of(SUPERVISOR_SYSTEM) == "supervisor"
    assert role_of(REVIEWER_SYSTEM) == "reviewer"
    assert role_of(WORKER_SYSTEM) == "worker"
    assert role_of(SUMMARIZER_SYSTEM) == "summarizer"
    assert role_of("You are helpful.\nYou are the worker") == "default"
    assert role_of("") == "default"


async def test_fake_server_fallbacks_and_unstreamed_answers(server: ScriptedModelServer) -> None:
    server.add("supervisor", "plan made")
    server.set_fallback("supervisor", {"text": "still here"})
    client = anthropic.AsyncAnthropic(
        api_key="k", base_url=server.url_for("anthropic"), max_retries=0
    )
    oa = openai.AsyncOpenAI(api_key="k", base_url=server.url_for("openai"), max_retries=0)
    try:
        texts = []
        for _ in range(3):
            message = await client.messages.create(
                model="m",
                max_tokens=10,
                system=SUPERVISOR_SYSTEM,
                messages=[{"role": "user", "content": "hi"}],
            )
            texts.append(message.content[0].text)  # type: ignore[union-attr]
        assert texts == ["plan made", "still here", "still here"]
        completion = await oa.chat.completions.create(
            model="m",
            messages=[{"role": "system", "content": WORKER}, {"role": "user", "content": "hi"}],
        )
        assert completion.choices[0].message.content == EXHAUSTED
    finally:
        await client.close()
        await oa.close()
    assert [r.role for r in server.requests] == ["supervisor"] * 3 + ["worker"]
    assert server.remaining("supervisor") == 0


def test_fake_server_rejects_a_mistyped_script() -> None:
    with pytest.raises(ValueError, match="unknown script key"):
        ScriptedModelServer({"wroker": ["hi"]})
    with pytest.raises(ValueError, match="unknown keys"):
        ScriptedModelServer({"worker": [{"txt": "hi"}]})


# --- resolving a model spec --------------------------------------------------------------


def test_resolve_model_builds_the_named_provider() -> None:
    claude = resolve_model(
        "anthropic/claude-sonnet-4-6", base_url=None, env={"ANTHROPIC_API_KEY": "sk-a"}
    )
    assert isinstance(claude, AnthropicProvider) and claude.name == "anthropic/claude-sonnet-4-6"
    local = resolve_model("openai/Qwen/Qwen3-8B", base_url="http://localhost:8000/v1", env={})
    assert isinstance(local, OpenAIProvider) and local.model == "Qwen/Qwen3-8B"
    gpt = resolve_model(
        " openai/gpt-4.1 ", base_url=None, env={"OPENAI_API_KEY": "sk-o"}, max_retries=1
    )
    assert isinstance(gpt, OpenAIProvider) and gpt.max_retries == 1 and gpt.base_url is None


@pytest.mark.parametrize(
    ("spec", "env", "base_url", "needles"),
    [
        (
            "mistral/large",
            {},
            None,
            ["unknown model 'mistral/large'", "anthropic/<model>", "openai/<model>", "baseline"],
        ),
        ("claude-sonnet-4-6", {}, None, ["did you mean anthropic/claude-sonnet-4-6?"]),
        ("anthropic/", {"ANTHROPIC_API_KEY": "k"}, None, ["names no model"]),
        ("anthropic/claude-sonnet-4-6", {"OPENAI_API_KEY": "k"}, None, ["set ANTHROPIC_API_KEY"]),
        ("openai/gpt-5", {"ANTHROPIC_API_KEY": "k"}, None, ["set OPENAI_API_KEY", "--base-url"]),
    ],
)
def test_resolve_model_explains_bad_specs_in_one_line(
    spec: str, env: dict[str, str], base_url: str | None, needles: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_model(spec, base_url=base_url, env=env)
    message = str(caught.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message


def test_default_model_spec_order() -> None:
    both = {"ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o"}
    assert default_model_spec({**both, "MLRA_MODEL": "openai/gpt-4.1"}) == "openai/gpt-4.1"
    assert default_model_spec(both) == f"anthropic/{DEFAULT_ANTHROPIC_MODEL}"
    assert (
        default_model_spec({"OPENAI_API_KEY": "o", "MLRA_MODEL": ""})
        == f"openai/{DEFAULT_OPENAI_MODEL}"
    )
    with pytest.raises(ConfigError) as caught:
        default_model_spec({"ANTHROPIC_API_KEY": " "})
    message = str(caught.value)
    for needle in ("--model anthropic/", "openai/", "--base-url", "baseline"):
        assert needle in message


def test_importing_the_resolver_does_not_import_the_sdks() -> None:
    code = "import sys, mlra.agent.providers; print('anthropic' in sys.modules, 'openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
