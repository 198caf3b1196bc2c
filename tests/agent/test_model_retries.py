"""The SDKs' own retries are told as they happen (`retries_told_to`), through the real
SDKs against the scripted server: what the console shows as "retry 2 after 429"."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import pytest

from mlra.agent.providers.anthropic import AnthropicProvider
from mlra.agent.providers.base import (
    Message,
    ModelProvider,
    ProviderError,
    retries_told_to,
)
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.setup.prompts import WORKER_SYSTEM
from tests.fakes.model_server import ScriptedModelServer

Api = Literal["anthropic", "openai"]
APIS: list[Api] = ["anthropic", "openai"]


@pytest.fixture
async def server() -> AsyncIterator[ScriptedModelServer]:
    with ScriptedModelServer() as fake:
        yield fake


async def generate(provider: ModelProvider) -> list[tuple[int, int | None]]:
    """The retries one generate call was told of, in order."""
    told: list[tuple[int, int | None]] = []
    try:
        with retries_told_to(lambda attempt, status: told.append((attempt, status))):
            await provider.generate(
                system=WORKER_SYSTEM, messages=[Message(role="user", content="go")], tools=[]
            )
    finally:
        await provider.aclose()
    return told


def provider(api: Api, server: ScriptedModelServer, **options: Any) -> ModelProvider:
    if api == "anthropic":
        return AnthropicProvider(
            "claude-sonnet-4-6", api_key="k", base_url=server.url_for(api), **options
        )
    return OpenAIProvider("gpt-4o", api_key="k", base_url=server.url_for(api), **options)


@pytest.mark.parametrize("api", APIS)
async def test_each_retry_is_told_once_with_its_status(
    api: Api, server: ScriptedModelServer
) -> None:
    server.add("worker", {"status": 429, "times": 1}, {"status": 503, "times": 1}, "made it")
    told = await generate(provider(api, server, max_retries=3))
    assert told == [(1, 429), (2, 503)]


@pytest.mark.parametrize("api", APIS)
async def test_the_failure_that_is_not_retried_is_not_told(
    api: Api, server: ScriptedModelServer
) -> None:
    server.add("worker", {"status": 500, "times": 9})
    told: list[tuple[int, int | None]] = []
    gives_up = provider(api, server, max_retries=1)
    with pytest.raises(ProviderError), retries_told_to(lambda *retry: told.append(retry)):
        await gives_up.generate(
            system=WORKER_SYSTEM, messages=[Message(role="user", content="go")], tools=[]
        )
    await gives_up.aclose()
    assert len(server.requests) == 2
    assert told == [(1, 500)]  # the second 500 ends the call: no retry follows it


@pytest.mark.parametrize("api", APIS)
async def test_a_time_out_is_told_when_the_retry_is_sent(
    api: Api, server: ScriptedModelServer
) -> None:
    server.add("worker", {"hang": 30, "times": 1}, "made it")
    told = await generate(provider(api, server, max_retries=2, timeout_s=0.3))
    assert told == [(1, None)]
