"""JSON in an answer's prose is prose: it never runs as a call, and nobody is told it was one.

Small models' loose call shapes (flat arguments, `action`, `tool_name`) are read only
inside `<tool_call>` tags or as the whole answer; the vendors' own APIs (no base URL)
have no text read at all under `--tool-calls auto`; what looked like a call to a tool
that does not exist, or a code block, is told only where the model was told the text
format and the answer is essentially that object or block. Each test checks what the
user sees: the calls that ran, the notices, the agent's next prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers.anthropic import AnthropicProvider
from mlra.agent.providers.base import Message, ModelProvider, ModelSettings, ToolCallsMode
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.providers.text_calls import read_text_calls
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from mlra.tools.registry import ToolSpec, parse_arguments
from tests.fakes.model_server import Api, ScriptedModelServer
from tests.scripts import call, turn

TOOLS = ["bash", "python", "read_file", "submit", "validate"]
EXAMPLES = [
    'I could run {"name": "bash", "command": "rm -rf data"}, but first I will look.',
    'each RL step logs {"action": "submit", "note": "x"}',
    'The checkpoint is scored by {"tool": "validate", "path": "model.pt"} at the end.',
    'Agents log {"tool_name": "bash", "tool_input": {"command": "rm -rf data"}} per step.',
]
"""JSON examples in prose, each a call in one of the loose shapes small models write."""
SPECS = [
    ToolSpec(name=name, description=name, parameters={"type": "object", "properties": {}})
    for name in TOOLS
]
ASK = [Message(role="user", content="go on")]
WORKER = "You are the worker of an ML research agent."


def test_a_json_example_in_prose_is_no_call_whatever_its_shape() -> None:
    for text in EXAMPLES:
        for told in (False, True):
            read = read_text_calls(text, TOOLS, tools_in_prompt=told)
            assert (read.calls, read.problems, read.prose) == ([], [], text), text


def test_arguments_that_are_no_object_are_worded_as_a_native_call_s() -> None:
    """Qwen2.5-Coder-0.5B wrote update_plan's steps as a bare list twice in one run: one
    result said `the arguments are list, not a JSON object`, the other `the arguments
    must be a JSON object, not list`."""
    text = '```json\n{"name": "update_plan", "arguments": [{"id": "1", "title": "Read"}]}\n```'
    (request,) = read_text_calls(text, ["update_plan"]).calls
    assert request.parse_error == "the arguments must be a JSON object, not list"
    assert request.parse_error == parse_arguments(request.raw_arguments)[1]


def test_loose_shapes_are_read_in_tags_and_as_the_whole_answer() -> None:
    body = '{"action": "bash", "command": "ls"}'
    for text in (
        body,
        f"```json\n{body}\n```",
        f"  \n{body}\n",
        f"I will look.\n<tool_call>{body}</tool_call>",
    ):
        read = read_text_calls(text, TOOLS)
        assert [(c.name, c.arguments) for c in read.calls] == [("bash", {"command": "ls"})], text
    # Among prose, the one shape that is a call: a name and its arguments as an object.
    strict = read_text_calls('I will look. {"name": "bash", "arguments": {"command": "ls"}}', TOOLS)
    assert [(c.name, c.arguments) for c in strict.calls] == [("bash", {"command": "ls"})]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_vendor_api_runs_no_call_from_its_text_unless_text_is_chosen(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No base URL: the vendor's own API, reached here through the SDK's own variable."""
    written = 'I will look. <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
    with ScriptedModelServer() as server:
        variable = "OPENAI_BASE_URL" if api == "openai" else "ANTHROPIC_BASE_URL"
        monkeypatch.setenv(variable, server.url_for(api))
        modes: list[tuple[ToolCallsMode, bool]] = [("auto", False), ("text", True)]
        for mode, read in modes:
            server.add("worker", written)
            provider = _hosted(api, mode)
            try:
                assert provider.reads_text_calls() == read
                response = await provider.generate(system=WORKER, messages=ASK, tools=SPECS)
            finally:
                await provider.aclose()
            ran = [(c.name, c.arguments) for c in response.tool_calls]
            assert ran == ([("bash", {"command": "ls"})] if read else []), mode
            assert response.text == ("I will look." if read else written)


def _hosted(api: Api, mode: ToolCallsMode) -> ModelProvider:
    settings = ModelSettings(tool_calls=mode)
    if api == "anthropic":
        return AnthropicProvider("claude-sonnet-4-6", api_key="sk-test", settings=settings)
    return OpenAIProvider("gpt-4o", api_key="sk-test", settings=settings)


async def test_a_local_server_answer_with_examples_runs_nothing(
    tmp_path: Path, answer_task: Path
) -> None:
    """The worker alone against a `--base-url` server: its examples, then the answer."""
    worker = [
        turn(EXAMPLES[0]),
        turn(EXAMPLES[1]),
        turn(f"{EXAMPLES[2]}\n{EXAMPLES[3]}"),  # a fourth answer with no call would end it
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("submit", path="answer.txt", note="42")),
    ]
    events = await _run(tmp_path, answer_task, {"worker": worker}, base_url=True)
    ran = [(e.tool, e.arguments) for e in events if isinstance(e, ev.ToolCall)]
    assert ran == [
        ("bash", {"command": "echo 42 > answer.txt"}),
        ("submit", {"path": "answer.txt", "note": "42"}),
    ]
    assert not [e for e in events if isinstance(e, ev.Notice) and "tool call" in e.message]


# --- what is told: only what was meant as a call, where the format was told -------------


def test_ml_text_is_not_told_as_a_broken_or_unknown_call() -> None:
    for text in (
        '{"name": "resnet50", "parameters": "25.6M"}',
        'ResNet-50: {"name": "resnet50", "parameters": "25.6M"}',
        'The config:\n```json\n{"name": "my-model", "parameters": 12,}\n```',
        "A fix:\n```python\nimport torch\nprint(torch.__version__)\n```\nThen run it.",
    ):
        for told in (False, True):
            assert read_text_calls(text, TOOLS, tools_in_prompt=told).problems == [], text
    # With the format told and the answer essentially the object or block, it is said...
    meant = {
        'I will train. {"name": "pretrain", "arguments": {"n": 3}}': (
            "there is no tool named 'pretrain'"
        ),
        '```json\n{"name": "pretrain", "arguments": {"n": 3}\n```': "not valid JSON",
        "Run this:\n```bash\nls -la\n```": "a ```bash block is text, not a call",
    }
    for text, said in meant.items():
        told = read_text_calls(text, TOOLS, tools_in_prompt=True).problems
        assert len(told) == 1 and said in told[0], (text, told)
        # ...and not under `auto` before it fell back: the model was sent native tools.
        assert read_text_calls(text, TOOLS).problems == [], text


@pytest.mark.parametrize("base_url", [True, False], ids=["local-auto", "vendor-api"])
async def test_an_ml_answer_gets_no_notice_and_no_correction(
    tmp_path: Path, answer_task: Path, base_url: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = [
        # Before a local server's fall-back to tools in the prompt (two answers), and after.
        turn("Here is how:\n```python\nimport torch\nprint(torch.__version__)\n```"),
        turn('ResNet-50 has {"name": "resnet50", "parameters": "25.6M"} in its card.'),
        turn("The config:\n```json\n" + '{"name": "my-model", "parameters": 12,}\n```'),
        turn("", call("bash", command="echo 42 > answer.txt")),
        turn("", call("submit", path="answer.txt", note="42")),
    ]
    events = await _run(
        tmp_path, answer_task, {"worker": worker}, base_url=base_url, env=monkeypatch
    )
    result = next(e for e in events if isinstance(e, ev.RunFinished))
    assert result.reason == "submitted"
    notices = [e.message for e in events if isinstance(e, ev.Notice)]
    assert not [n for n in notices if "looked like a tool call" in n], notices
    prompts = [e.prompt for e in events if isinstance(e, ev.StepStarted)]
    for prompt in prompts:
        assert "could not be read" not in prompt and "there is no tool" not in prompt
        assert "block is text" not in prompt
    if not base_url:  # a vendor's API is never told to write calls as text
        assert not [p for p in prompts if "<tool_call>" in p]
        assert not [n for n in notices if "described in the prompt" in n]


async def _run(
    tmp_path: Path,
    task: Path,
    script: dict[str, Any],
    *,
    base_url: bool,
    env: pytest.MonkeyPatch | None = None,
) -> list[ev.Event]:
    """A `--agent worker` run against the fake server, as a `--base-url` server or as
    the vendor's API (the SDK sent there by its own variable); its log."""
    with ScriptedModelServer(script) as server:
        url = server.url_for("openai")
        if base_url:
            provider = OpenAIProvider("local", api_key=None, base_url=url)
        else:
            assert env is not None
            env.setenv("OPENAI_BASE_URL", url)
            provider = OpenAIProvider("gpt-4o", api_key="sk-test")
        config = RunConfig(
            task="answer",
            model="openai/local" if base_url else "openai/gpt-4o",
            base_url=url if base_url else None,
            runs_dir=tmp_path,
            isolation="none",
            agent="worker",
        )
        controller = RunController(config, load_task(task), provider)
        try:
            await controller.run(agent_for)
        finally:
            await provider.aclose()
    return read_events(controller.run_dir / "events.jsonl")
