"""A model provider added as docs/contributing.md's recipe says: its own module (this
file's `CannedProvider` and its factory `canned`) and one line of the providers' table
(set here by the test). `mlra run --model canned/NAME` runs with it to a score, and a
spec the table does not know is refused in one line that lists what it does know."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.providers import resolve_model
from mlra.agent.providers.base import (
    ConfigError,
    Message,
    ModelProvider,
    ModelResponse,
    TextCallback,
    ToolCallRequest,
    Usage,
)
from mlra.agent.providers.table import PROVIDERS, ProviderRequest
from mlra.agent.record.eventlog import read_events
from mlra.console.cli.cli import main
from mlra.tools.registry import ToolSpec
from tests.fakes.model_server import role_of
from tests.scripts import call, supervisor_answering, turn

SCRIPTS = {
    "answer": {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("Write the answer.", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
}
"""The canned answers by name, each as the roles' turns (tests/scripts.py)."""


class CannedProvider(ModelProvider):
    """Answers each agent (known by its system prompt) with its next canned turn."""

    priced = False

    def __init__(self, name: str, script: dict[str, list[dict[str, Any]]]) -> None:
        self.name = name
        self.turns = {role: list(turns) for role, turns in script.items()}
        self.ids = itertools.count(1)

    async def generate(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        on_text: TextCallback | None = None,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        left = self.turns.get(role_of(system)) or [turn("(nothing more canned)")]
        answer = left.pop(0)
        if on_text is not None and answer["text"]:
            on_text(answer["text"])
        calls = [
            ToolCallRequest(
                id=f"canned-{next(self.ids)}",
                name=c["name"],
                arguments=c["arguments"],
                raw_arguments=json.dumps(c["arguments"]),
            )
            for c in answer["tool_calls"]
        ]
        return ModelResponse(
            text=answer["text"],
            tool_calls=calls,
            usage=Usage(input_tokens=10, output_tokens=10),
            stop_reason="tool_use" if calls else "end_turn",
        )


def canned(request: ProviderRequest) -> ModelProvider:
    """The factory the table names: `canned/NAME`, NAME one of SCRIPTS."""
    if request.model not in SCRIPTS:
        raise ConfigError(f"canned/{request.model}: no such canned script ({', '.join(SCRIPTS)})")
    return CannedProvider(request.spec, SCRIPTS[request.model])


@pytest.fixture
def table_has_canned(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table's one new line."""
    monkeypatch.setitem(PROVIDERS, "canned/", f"{__name__}:canned")


def test_a_run_goes_to_its_score_with_a_provider_added_to_the_table(
    tmp_path: Path, answer_task: Path, table_has_canned: None, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    argv = ["run", str(answer_task), "--model", "canned/answer", "--isolation", "none"]
    code = main([*argv, "--no-tui", "--runs-dir", str(runs)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "score exact_match = 1" in out.strip().splitlines()[-1]
    (run_dir,) = runs.iterdir()
    events = read_events(run_dir / "events.jsonl")
    assert isinstance(events[0], ev.RunStarted) and events[0].model == "canned/answer"
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "submitted"


def test_a_spec_the_table_does_not_know_is_one_line_listing_what_it_knows(
    tmp_path: Path, answer_task: Path, table_has_canned: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", str(answer_task), "--model", "mistral/large", "--no-tui"]
    code = main([*argv, "--runs-dir", str(tmp_path / "runs")])
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "unknown model 'mistral/large'" in line
    for form in ("anthropic/<model>", "openai/<model>", "replay:RUN_DIR", "canned/<model>"):
        assert form in line
    assert not (tmp_path / "runs").exists()

    with pytest.raises(ConfigError, match="no such canned script"):
        resolve_model("canned/other", base_url=None, env={})


def test_the_providers_package_loads_neither_an_sdk_nor_the_replay_provider() -> None:
    """The table names its factories' modules; none is imported until one is chosen."""
    code = (
        "import sys, mlra.agent.providers\n"
        "print(sorted(m for m in ('anthropic', 'openai', 'mlra.agent.loop.replay_provider')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
