"""From a model spec the user typed to a ready provider.

Specs are `anthropic/<model>` and `openai/<model>` (the latter also for any
OpenAI-compatible server given with `--base-url`), `replay:RUN_DIR`, and `demo` (a
scripted agent to try the console with, no key): the entries
of the providers' table (agent/providers/table.py), whose factories build them.
`baseline` is not a model: the caller handles it before coming here, by running the
baseline agent that needs no LLM.

The SDKs are imported only when a provider is built, so `mlra --help` and the
commands that never call a model start fast. API keys come from the `env`
mapping the caller passes (normally os.environ), never from anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from mlra.agent.providers.base import ConfigError, ModelProvider, ModelSettings
from mlra.agent.providers.table import (
    PROVIDERS,
    ProviderRequest,
    entry_for,
    provider_factory,
    spec_text,
)

DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-6"
DEFAULT_OPENAI_MODEL = "gpt-5"
BUILT_IN = ("anthropic/", "openai/", "replay:", "demo:")
"""The table's entries VALID_FORMS describes; others are listed after it by name."""
VALID_FORMS = (
    "use anthropic/<model> (e.g. anthropic/claude-sonnet-4-6), openai/<model> "
    "(e.g. openai/gpt-5; with --base-url URL for a local OpenAI-compatible server), "
    "baseline (runs the task's reference recipe, no LLM), "
    "demo (a scripted supervisor and worker, to try the console with no key), "
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
    entry = entry_for(text, "/")
    if entry is None:
        hint = _guess(text)
        raise ConfigError(f"unknown model {text!r}: {hint}{valid_forms()}")
    model = text.partition("/")[2].strip()
    if not model:
        raise ConfigError(f"model spec {text!r} names no model: {valid_forms()}")
    return entry.removesuffix("/"), model


def valid_forms() -> str:
    """What `--model` takes: the built-in forms, then any other entry of the table."""
    extra = [
        f"{e}<model>" if e.endswith("/") else f"{e}..." for e in PROVIDERS if e not in BUILT_IN
    ]
    return VALID_FORMS + (f"; also {', '.join(extra)}" if extra else "")


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
    text = spec_text(spec)
    base_url = (base_url or "").strip() or None
    if base_url is not None:
        _check_base_url(base_url)
    entry = entry_for(text, ":")  # `NAME:WHAT`: the factory reads the whole spec
    if entry is not None:
        model = text.partition(":")[2]
    else:
        name, model = parse_model_spec(text)
        entry = f"{name}/"
    request = ProviderRequest(
        spec=text,
        model=model,
        base_url=base_url,
        env=env,
        settings=settings or ModelSettings(),
        max_retries=max_retries,
        timeout_s=timeout_s,
    )
    return provider_factory(entry)(request)


def _check_base_url(url: str) -> None:
    """`--base-url localhost:8000` was taken, and every call then failed to connect,
    retried as "the server is not answering" while the server answered: an address
    without its scheme is refused in one line that shows it whole."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"--base-url {url!r} is not an http(s) URL: give it whole, with the scheme "
            "and the API's path, such as http://localhost:8000/v1"
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
        "OpenAI-compatible server), set MLRA_MODEL, or use --model baseline (needs no LLM) or --model demo (a scripted "
        "agent to try the console with)"
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
