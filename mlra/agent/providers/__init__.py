"""From a model spec the user typed to a ready provider.

Specs are `anthropic/<model>` and `openai/<model>` (the latter also for any
OpenAI-compatible server given with `--base-url`). `baseline` is not a model:
the caller handles it before coming here, by running the baseline agent that
needs no LLM.

The SDKs are imported only when a provider is built, so `mlra --help` and the
commands that never call a model start fast. API keys come from the `env`
mapping the caller passes (normally os.environ), never from anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping

from mlra.agent.providers.base import ConfigError, ModelProvider, ModelSettings

DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-6"
DEFAULT_OPENAI_MODEL = "gpt-5"
PROVIDERS = ("anthropic", "openai")
KEY_VARS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
VALID_FORMS = (
    "use anthropic/<model> (e.g. anthropic/claude-sonnet-4-6), openai/<model> "
    "(e.g. openai/gpt-5; with --base-url URL for a local OpenAI-compatible server), "
    "baseline (runs the task's reference recipe, no LLM), "
    "or replay:RUN_DIR (the model answers recorded in a run)"
)

__all__ = [
    "DEFAULT_ANTHROPIC_MODEL",
    "DEFAULT_OPENAI_MODEL",
    "ConfigError",
    "ModelProvider",
    "ModelSettings",
    "default_model_spec",
    "parse_model_spec",
    "resolve_model",
]


def parse_model_spec(spec: str) -> tuple[str, str]:
    """(provider, model); model names may hold slashes (`openai/Qwen/Qwen3-8B`)."""
    text = spec.strip()
    provider, slash, model = text.partition("/")
    provider = provider.strip().lower()
    if not slash or provider not in PROVIDERS:
        hint = _guess(text)
        raise ConfigError(f"unknown model {text!r}: {hint}{VALID_FORMS}")
    model = model.strip()
    if not model:
        raise ConfigError(f"model spec {text!r} names no model: {VALID_FORMS}")
    return provider, model


def resolve_model(
    spec: str,
    *,
    base_url: str | None,
    env: Mapping[str, str],
    max_retries: int | None = None,
    timeout_s: float | None = None,
    settings: ModelSettings | None = None,
) -> ModelProvider:
    """A provider for `spec`, or a ConfigError whose one line tells the user what to fix.

    `settings` (context window, output tokens, temperature, seed, tool calls) are the
    user's; the provider fills in what is not set from the server or its model table."""
    if spec.strip().startswith("replay:"):
        from mlra.agent.loop.replay_provider import ReplayProvider

        return ReplayProvider.from_spec(spec.strip())
    provider, model = parse_model_spec(spec)
    base_url = (base_url or "").strip() or None
    key_var = KEY_VARS[provider]
    api_key = (env.get(key_var) or "").strip() or None
    if api_key is None and base_url is None:
        if provider == "openai":
            raise ConfigError(
                f"openai/{model} needs an API key: set {key_var}, "
                "or pass --base-url URL for a local OpenAI-compatible server (vLLM, llama.cpp, Ollama)"
            )
        raise ConfigError(f"anthropic/{model} needs an API key: set {key_var}")
    settings = settings or ModelSettings()
    if provider == "anthropic" and settings.temperature is not None and settings.temperature > 1:
        raise ConfigError(f"--temperature {settings.temperature:g}: anthropic/{model} takes 0 to 1")
    if provider == "anthropic":
        from mlra.agent.providers import anthropic as sdk

        # A base URL means an Anthropic-compatible server, which may not want a key.
        return sdk.AnthropicProvider(
            model,
            api_key=api_key or "not-needed",
            base_url=base_url,
            max_retries=sdk.DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
            timeout_s=timeout_s or sdk.DEFAULT_TIMEOUT_S,
            settings=settings,
        )
    from mlra.agent.providers import openai as compat

    return compat.OpenAIProvider(
        model,
        api_key=api_key,
        base_url=base_url,
        max_retries=compat.DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
        timeout_s=timeout_s or compat.DEFAULT_TIMEOUT_S,
        settings=settings,
    )


def default_model_spec(env: Mapping[str, str]) -> str:
    """The model to use when none was named: MLRA_MODEL, then whichever API key is set."""
    chosen = (env.get("MLRA_MODEL") or "").strip()
    if chosen:
        return chosen
    if (env.get("ANTHROPIC_API_KEY") or "").strip():
        return f"anthropic/{DEFAULT_ANTHROPIC_MODEL}"
    if (env.get("OPENAI_API_KEY") or "").strip():
        return f"openai/{DEFAULT_OPENAI_MODEL}"
    raise ConfigError(
        "no model configured: pass --model anthropic/<model> (needs ANTHROPIC_API_KEY) "
        "or --model openai/<model> (needs OPENAI_API_KEY, or --base-url URL for a local "
        "OpenAI-compatible server), set MLRA_MODEL, or use --model baseline (needs no LLM)"
    )


def _guess(text: str) -> str:
    lowered = text.lower()
    if "/" in lowered:
        return ""
    if lowered.startswith("claude"):
        return f"did you mean anthropic/{text}? "
    if lowered.startswith(("gpt", "o1", "o3", "o4", "chatgpt")):
        return f"did you mean openai/{text}? "
    return ""
