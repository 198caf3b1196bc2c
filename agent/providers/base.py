"""The model-provider interface: one neutral conversation format, several providers.

The agent keeps its history as `Message`s; each provider translates them to its
own API (Anthropic Messages, OpenAI chat completions) and back, streams text as
it is written, and reports usage and cost. Retries of 429, 5xx and time-outs are
left to the official SDKs; what still fails surfaces as `ProviderError`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from mlra.tools.registry import ToolSpec

TextCallback = Callable[[str], None]


class ConfigError(Exception):
    """Bad user input about models (unknown provider, missing key): exit status 2."""


class ProviderError(Exception):
    """The provider kept failing after the SDK's own retries."""


class ToolCallRequest(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any] | None = None
    raw_arguments: str = ""
    parse_error: str | None = None
    """Why `raw_arguments` could not be read as a JSON object, if it could not."""


class Message(BaseModel):
    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False


class Usage(BaseModel):
    input_tokens: int = 0
    """All prompt tokens, cached or not."""
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class ModelResponse(BaseModel):
    text: str = ""
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str | None = None
    latency_s: float = 0.0
    cost_usd: float = 0.0


class ModelProvider(abc.ABC):
    """One model behind one API. `name` is how the user named it (`anthropic/...`)."""

    name: str
    context_window: int = 200_000
    max_output_tokens: int = 8192

    @abc.abstractmethod
    async def generate(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        on_text: TextCallback | None = None,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        """One model turn, streamed: `on_text` gets text pieces as they arrive."""

    def expect(
        self, request_sha: str, messages: list[Message], replacements: list[tuple[str, str]]
    ) -> None:
        """Told the fingerprint of each request before it is sent (agent/fingerprint.py).

        Only the replay provider uses it, to find where a re-run departs from
        its recording; it raises ProviderError there.
        """

    async def aclose(self) -> None:
        """Release HTTP connections."""
