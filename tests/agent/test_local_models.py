"""The models people run locally, through the real SDKs against the scripted server:
tool calls written as text, the server's context window, sampling settings, HTTP
200 answers that are no answer, and token counts the server did not send."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.providers.anthropic import AnthropicProvider
from mlra.agent.providers.base import (
    Message,
    ModelProvider,
    ModelSettings,
    ProviderError,
    ToolCallRequest,
)
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.providers.text_calls import problem_note, read_text_calls
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.cli.cli import main
from mlra.tasks.spec import load_task
from mlra.tools.registry import ToolSpec
from tests.fakes.model_server import BROKEN, Api, ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

WORKER = "You are the worker of an ML research agent."
BASH = ToolSpec(
    name="bash",
    description="Run a shell command.",
    parameters={"type": "object", "properties": {"command": {"type": "string"}}},
)
SUBMIT = ToolSpec(
    name="submit",
    description="Submit.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)
ASK = [Message(role="user", content="list the files")]

TEXT_FORMS = {
    "tool_call": 'I will look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n'
    "</tool_call>",
    "json_fence": 'I will look.\n```json\n{"name": "bash", "arguments": {"command": "ls"}}\n```',
    "json": 'I will look. {"name": "bash", "arguments": {"command": "ls"}}',
}

Factory = Callable[..., ModelProvider]


@pytest.fixture
def server() -> Any:
    with ScriptedModelServer() as fake:
        yield fake


@pytest.fixture
async def make(server: ScriptedModelServer) -> AsyncIterator[Factory]:
    made: list[ModelProvider] = []

    def factory(api: Api = "openai", **options: Any) -> ModelProvider:
        options.setdefault("max_retries", 2)
        options.setdefault("retry_delay_s", 0.0)
        model = options.pop("model", "local-model")
        url = server.url_for(api)
        provider: ModelProvider
        if api == "anthropic":
            provider = AnthropicProvider(model, api_key="sk-test", base_url=url, **options)
        else:
            provider = OpenAIProvider(model, api_key="sk-test", base_url=url, **options)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


# --- tool calls written as text --------------------------------------------------------


@pytest.mark.parametrize("form", list(TEXT_FORMS))
@pytest.mark.parametrize("stream", [True, False])
async def test_a_call_written_as_text_is_read_as_a_call(
    server: ScriptedModelServer, make: Factory, form: str, stream: bool
) -> None:
    server.add("worker", TEXT_FORMS[form])
    provider = make()
    assert isinstance(provider, OpenAIProvider)
    provider._stream = stream  # pyright: ignore[reportPrivateUsage]
    shown: list[str] = []
    response = await provider.generate(
        system=WORKER, messages=ASK, tools=[BASH, SUBMIT], on_text=shown.append
    )
    assert [(c.name, c.arguments, c.from_text) for c in response.tool_calls] == [
        ("bash", {"command": "ls"}, form)
    ]
    assert response.tool_calls[0].parse_error is None
    assert response.text == "I will look."  # the prose stays, the call is not shown twice
    assert "".join(shown) == TEXT_FORMS[form]  # what streamed is what the model wrote


async def test_several_calls_in_tags_and_arguments_given_as_a_string(
    server: ScriptedModelServer, make: Factory
) -> None:
    text = (
        '<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"pwd\\"}"}</tool_call>\n'
        '<tool_call>{"name": "submit", "parameters": {"path": "out"}}</tool_call>'
    )
    server.add("worker", text)
    response = await make().generate(system=WORKER, messages=ASK, tools=[BASH, SUBMIT])
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("bash", {"command": "pwd"}),
        ("submit", {"path": "out"}),
    ]
    assert response.text == ""


async def test_only_the_agents_tools_count_and_native_calls_win(
    server: ScriptedModelServer, make: Factory
) -> None:
    config = 'The config is {"name": "resnet", "arguments": {"depth": 18}}.'
    server.add(
        "worker",
        config,
        turn('{"name": "bash", "arguments": {"command": "ls"}}', call("bash", command="pwd")),
    )
    provider = make()
    response = await provider.generate(system=WORKER, messages=ASK, tools=[BASH])
    assert response.tool_calls == [] and response.text == config
    response = await provider.generate(system=WORKER, messages=ASK, tools=[BASH])
    assert [(c.arguments, c.from_text) for c in response.tool_calls] == [({"command": "pwd"}, None)]


async def test_native_mode_reads_no_text(server: ScriptedModelServer, make: Factory) -> None:
    server.add("worker", TEXT_FORMS["tool_call"])
    provider = make(settings=ModelSettings(tool_calls="native"))
    response = await provider.generate(system=WORKER, messages=ASK, tools=[BASH])
    assert response.tool_calls == [] and response.text == TEXT_FORMS["tool_call"]


def test_text_that_looks_like_a_call_and_cannot_be_read_is_reported() -> None:
    broken = read_text_calls(
        '<tool_call>{"name": "bash", "arguments": {"command": "ls"</tool_call>', ["bash"]
    )
    assert broken.calls == [] and "call to bash" in broken.problems[0]
    assert "not valid JSON" in broken.problems[0]
    unknown = read_text_calls(
        '<tool_call>{"name": "python", "arguments": {}}</tool_call>', ["bash"]
    )
    assert unknown.problems == ["there is no tool named 'python'"]
    fenced = read_text_calls('```json\n{"name": "bash", "arguments": {"command": \n```', ["bash"])
    assert fenced.problems and not fenced.calls
    # JSON about something else is prose, and no problem.
    assert read_text_calls('{"name": "resnet", "arguments": {', ["bash"]).problems == []
    note = problem_note(broken.problems, ["bash", "submit"])
    assert "could not be read" in note and "bash, submit" in note


async def test_text_calls_go_back_to_the_model_as_text(
    server: ScriptedModelServer, make: Factory
) -> None:
    server.add("worker", "ok")
    call_ = ToolCallRequest(
        id="call_text_1",
        name="bash",
        arguments={"command": "ls"},
        raw_arguments='{"command": "ls"}',
        from_text="tool_call",
    )
    history = [
        *ASK,
        Message(role="assistant", content="I will look.", tool_calls=[call_]),
        Message(role="tool", content="a.txt", tool_call_id="call_text_1", tool_name="bash"),
    ]
    await make().generate(system=WORKER, messages=history, tools=[BASH])
    sent = server.requests_for("worker")[-1].body["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": 'I will look.\n\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}'
        "\n</tool_call>",
    }
    assert sent[3] == {"role": "user", "content": "[bash result]\na.txt"}
    assert all(m["role"] != "tool" for m in sent)


async def test_text_mode_describes_the_tools_in_the_prompt(
    server: ScriptedModelServer, make: Factory
) -> None:
    server.add("worker", TEXT_FORMS["tool_call"])
    provider = make(settings=ModelSettings(tool_calls="text"))
    response = await provider.generate(system=WORKER, messages=ASK, tools=[BASH])
    body = server.requests_for("worker")[-1].body
    assert "tools" not in body
    assert (
        "<tool_call>" in body["messages"][0]["content"]
        and "## bash" in body["messages"][0]["content"]
    )
    assert response.tool_calls[0].from_text == "tool_call"


@pytest.mark.parametrize(
    "refusal",
    [
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "tools param requires --jinja flag",
    ],
)
async def test_a_server_that_refuses_native_tools_gets_them_in_the_prompt(
    make: Factory, refusal: str
) -> None:
    with ScriptedModelServer({"worker": [TEXT_FORMS["json"]]}, reject_tools=refusal) as fake:
        provider = OpenAIProvider(
            "local", api_key=None, base_url=fake.url_for("openai"), max_retries=0
        )
        response = await provider.generate(system=WORKER, messages=ASK, tools=[BASH])
        await provider.aclose()
        outcomes = [r.outcome for r in fake.requests]
    assert outcomes == ["status 400", "text"]
    assert response.tool_calls[0].name == "bash"


# --- what the server says about itself, and what the user sets -------------------------


@pytest.mark.parametrize(
    "options",
    [{"max_model_len": 6000}, {"n_ctx": 6000}, {"ollama_num_ctx": 6000}],
    ids=["vllm", "llama.cpp", "ollama"],
)
async def test_the_context_window_is_read_from_the_server(options: dict[str, int]) -> None:
    with ScriptedModelServer(**options) as fake:  # pyright: ignore[reportArgumentType]
        provider = OpenAIProvider("local", api_key=None, base_url=fake.url_for("openai"))
        assert provider.context_window == 32_768  # unknown until asked
        await provider.discover_limits()
        await provider.aclose()
    assert provider.context_window == 6000 and provider.context_window_from == "server"
    assert provider.max_output_tokens == 1500  # a quarter of a small window


async def test_a_context_window_set_by_the_user_wins_over_the_server() -> None:
    with ScriptedModelServer(n_ctx=6000) as fake:
        settings = ModelSettings(context_window=3000, max_output_tokens=700)
        provider = OpenAIProvider(
            "local", api_key=None, base_url=fake.url_for("openai"), settings=settings
        )
        await provider.discover_limits()
        await provider.aclose()
    assert (provider.context_window, provider.context_window_from) == (3000, "setting")
    assert provider.max_output_tokens == 700


async def test_seed_and_temperature_reach_the_providers_that_take_them(
    server: ScriptedModelServer, make: Factory
) -> None:
    server.add("worker", "a", "b")
    settings = ModelSettings(temperature=0.2, seed=7)
    await make(settings=settings).generate(system=WORKER, messages=ASK, tools=[])
    await make("anthropic", settings=settings).generate(system=WORKER, messages=ASK, tools=[])
    sent_openai, sent_anthropic = (r.body for r in server.requests_for("worker"))
    assert (sent_openai["temperature"], sent_openai["seed"]) == (0.2, 7)
    assert sent_anthropic["temperature"] == 0.2 and "seed" not in sent_anthropic


# --- answers that are no answers, and counts nobody sent --------------------------------


@pytest.mark.parametrize("kind", BROKEN)
@pytest.mark.parametrize("stream", [True, False])
async def test_an_http_200_that_is_no_answer_is_retried(
    server: ScriptedModelServer, make: Factory, kind: str, stream: bool
) -> None:
    server.add("worker", {"broken": kind, "times": 2}, "fine")
    provider = make(max_retries=2)
    assert isinstance(provider, OpenAIProvider)
    provider._stream = stream  # pyright: ignore[reportPrivateUsage]
    response = await provider.generate(system=WORKER, messages=ASK, tools=[])
    assert response.text == "fine"
    assert [r.outcome for r in server.requests_for("worker")] == [f"broken {kind}"] * 2 + ["text"]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("kind", BROKEN)
async def test_an_answer_that_stays_broken_is_a_provider_error(
    server: ScriptedModelServer, make: Factory, api: Api, kind: str
) -> None:
    server.add("worker", {"broken": kind, "times": 2})
    with pytest.raises(ProviderError) as failed:
        await make(api, max_retries=1).generate(system=WORKER, messages=ASK, tools=[])
    assert "no valid answer" in str(failed.value) and "gave up after 1 retries" in str(failed.value)
    assert "\n" not in str(failed.value)


async def test_counts_the_server_did_not_send_are_marked_estimated(
    server: ScriptedModelServer, make: Factory
) -> None:
    server.add("worker", {"text": "hello there", "no_usage": True}, "counted")
    provider = make()
    guessed = await provider.generate(system=WORKER, messages=ASK, tools=[])
    counted = await provider.generate(system=WORKER, messages=ASK, tools=[])
    assert guessed.usage.estimated and guessed.usage.input_tokens > 0
    assert not counted.usage.estimated


# --- the command line --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--context-window", "-5", "must be positive"),
        ("--max-output-tokens", "0", "must be positive"),
        ("--temperature", "3", "out of range"),
        ("--temperature", "hot", "is not a number"),
        ("--tool-calls", "sometimes", "invalid choice"),
    ],
)
def test_bad_model_flags_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, says: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "answer", "--model", "baseline", flag, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert says in err and flag in err and len(err.splitlines()) == 1


# --- whole runs --------------------------------------------------------------------------


async def test_a_run_whose_worker_writes_its_calls_as_text(
    tmp_path: Path, answer_task: Path
) -> None:
    worker = [
        "Let me read it.\n<tool_call>\n"
        '{"name": "read_file", "arguments": {"path": "question.txt"}}\n</tool_call>',
        '<tool_call>{"name": "bash", "arguments": {"command": "echo 42 > answer.txt"</tool_call>',
        '```json\n{"name": "bash", "arguments": {"command": "echo 42 > answer.txt"}}\n```',
        'Done. {"name": "report", "arguments": {"summary": "wrote 42"}}',
    ]
    script = {"supervisor": supervisor_answering(), "worker": worker}
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/local", base_url=server.url_for("openai"), env={})
        config = RunConfig(task="answer", model="openai/local", runs_dir=tmp_path, isolation="none")
        controller = RunController(config, load_task(answer_task), provider)
        result = await controller.run(agent_for)
        await provider.aclose()
        worker_requests = server.requests_for("worker")

    assert result.score == 1.0
    events = read_events(controller.run_dir / "events.jsonl")
    calls = [e for e in events if isinstance(e, ev.ModelCall) and e.agent == "worker"]
    assert [c.tool_calls[0].get("from_text") for c in calls if c.tool_calls] == [
        "tool_call",
        "json_fence",
        "json",
    ]
    thoughts = [e.text for e in events if isinstance(e, ev.WorkerThought)]
    assert "Let me read it." in thoughts and "Done." in thoughts
    assert not any('"read_file"' in t or '"report"' in t for t in thoughts)
    # The broken call was pointed out in the next prompt, and nothing ran for it.
    prompts = [e.prompt for e in events if isinstance(e, ev.StepStarted) and e.agent == "worker"]
    assert "could not be read" in prompts[2] and "call to bash" in prompts[2]
    # ...and shown to the person, as a notice the log keeps for a replay.
    notices = [e.message for e in events if isinstance(e, ev.Notice)]
    assert any("worker's answer" in n and "call to bash" in n for n in notices), notices
    # The model saw its own call again as text, and its result as a user message.
    second = worker_requests[1].body["messages"]
    assert any(
        "<tool_call>" in (m.get("content") or "") for m in second if m["role"] == "assistant"
    )
    assert not any(m["role"] == "tool" for m in second)


async def test_a_small_window_is_summarized_before_the_server_would_refuse(
    tmp_path: Path, answer_task: Path
) -> None:
    noisy = "print('x' * 3000)"
    # Each call its own (the same call again and again would be a loop: agent/loop/loops.py).
    worker = [turn(f"step {n}", call("python", code=f"{noisy}  # {n}")) for n in range(8)]
    worker += [
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="ok")),
    ]
    script = {
        "supervisor": supervisor_answering(),
        "worker": worker,
        "summarizer": ["SUMMARY: printed x"],
    }
    with ScriptedModelServer(script, n_ctx=9000, context_limit=9000) as server:
        provider = resolve_model("openai/local", base_url=server.url_for("openai"), env={})
        await provider.discover_limits()
        config = RunConfig(
            task="answer",
            model="openai/local",
            runs_dir=tmp_path,
            isolation="none",
            keep_recent_turns=2,
            observation_limit=4000,
            max_cost_usd=5.0,
        )
        controller = RunController(config, load_task(answer_task), provider)
        result = await controller.run(agent_for)
        await provider.aclose()
        outcomes = [r.outcome for r in server.requests]

    assert result.score == 1.0
    assert "status 400" not in outcomes
    events = read_events(controller.run_dir / "events.jsonl")
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert started.context_window == 9000
    assert any(isinstance(e, ev.HistorySummarized) for e in events)
    told = [e.message for e in events if isinstance(e, ev.Notice) and "--max-cost" in e.message]
    assert len(told) == 1 and "cannot be enforced" in told[0]


def test_run_started_records_the_model_settings_used(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = {"supervisor": supervisor_answering(), "worker": ["(nothing)"]}
    with ScriptedModelServer(script, n_ctx=50_000) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        code = main(
            [
                "run",
                str(answer_task),
                "--model",
                "openai/local",
                "--base-url",
                server.url_for("openai"),
                "--runs-dir",
                str(tmp_path),
                "--run-id",
                "r",
                "--isolation",
                "none",
                "--json",
                "--max-steps",
                "1",
                "--temperature",
                "0.3",
                "--seed",
                "11",
                "--max-output-tokens",
                "1000",
                "--tool-calls",
                "text",
            ]
        )
        sent = server.requests_for("supervisor")[0].body
    assert code in (0, 1)
    started = next(
        e for e in read_events(tmp_path / "r" / "events.jsonl") if isinstance(e, ev.RunStarted)
    )
    assert started.context_window == 50_000
    assert started.config["context_window_from"] == "server"
    assert started.config["max_output_tokens"] == 1000
    assert (started.config["temperature"], started.config["seed"]) == (0.3, 11)
    assert started.config["tool_calls"] == "text"
    assert (sent["temperature"], sent["seed"], sent["max_tokens"]) == (0.3, 11, 1000)
    assert "tools" not in sent
    assert json.dumps(sent).count("## update_plan") == 1
