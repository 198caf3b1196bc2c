"""The factories of the vendors' providers (agent/providers/table.py): each checks what
the user gave (the API key, the temperature) before importing its SDK, so a mistake is
said in one line at once and `mlra --help` never loads an SDK."""

from __future__ import annotations

from mlra.agent.providers.base import ConfigError, ModelProvider
from mlra.agent.providers.table import ProviderRequest


def _key(request: ProviderRequest, var: str) -> str | None:
    return (request.env.get(var) or "").strip() or None


def anthropic(request: ProviderRequest) -> ModelProvider:
    """`anthropic/MODEL`; a base URL means an Anthropic-compatible server, which may
    not want a key."""
    model, settings = request.model, request.settings
    api_key = _key(request, "ANTHROPIC_API_KEY")
    if api_key is None and request.base_url is None:
        raise ConfigError(f"anthropic/{model} needs an API key: set ANTHROPIC_API_KEY")
    if settings.temperature is not None and settings.temperature > 1:
        raise ConfigError(f"--temperature {settings.temperature:g}: anthropic/{model} takes 0 to 1")
    from mlra.agent.providers import anthropic as sdk

    return sdk.AnthropicProvider(
        model,
        api_key=api_key or "not-needed",
        base_url=request.base_url,
        max_retries=sdk.DEFAULT_MAX_RETRIES if request.max_retries is None else request.max_retries,
        timeout_s=request.timeout_s or sdk.DEFAULT_TIMEOUT_S,
        settings=settings,
    )


def openai(request: ProviderRequest) -> ModelProvider:
    """`openai/MODEL`: OpenAI's API, or any OpenAI-compatible server at `--base-url`."""
    model = request.model
    api_key = _key(request, "OPENAI_API_KEY")
    if api_key is None and request.base_url is None:
        raise ConfigError(
            f"openai/{model} needs an API key: set OPENAI_API_KEY, "
            "or pass --base-url URL for a local OpenAI-compatible server (vLLM, llama.cpp, Ollama)"
        )
    from mlra.agent.providers import openai as compat

    return compat.OpenAIProvider(
        model,
        api_key=api_key,
        base_url=request.base_url,
        max_retries=(
            compat.DEFAULT_MAX_RETRIES if request.max_retries is None else request.max_retries
        ),
        timeout_s=request.timeout_s or compat.DEFAULT_TIMEOUT_S,
        settings=request.settings,
    )
