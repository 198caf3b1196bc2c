"""The model providers `--model` is read against, by how a spec names them, and what
a provider's factory is given.

An entry is "NAME/" (a spec `NAME/MODEL` names a model of that API: `openai/gpt-5`) or
"NAME:" (a spec `NAME:WHAT`, read whole by its factory: `replay:RUN_DIR`), mapped to
the "module:attr" of a factory that builds the provider (agent/providers/base.py's
ModelProvider) from a `ProviderRequest`. A factory's module is imported only when its
entry is chosen: the SDKs, and the replay provider of a wing above this one
(agent/loop/), load only for a run that uses them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from mlra.agent.providers.base import ModelSettings
from mlra.lazy_load import load

if TYPE_CHECKING:
    from mlra.agent.providers.base import ModelProvider

PROVIDERS: dict[str, str] = {
    "anthropic/": "mlra.agent.providers.factories:anthropic",
    "openai/": "mlra.agent.providers.factories:openai",
    "replay:": "mlra.agent.loop.replay_provider:replay",
    "demo:": "mlra.agent.providers.demo:demo",
}
DEMO = "demo"
"""`--model demo` (agent/providers/demo.py): the one spec that is a bare name, as
`baseline` is; `demo:` is the same."""
STEERS_NO_SEARCH: dict[str, str] = {
    "demo:": "the demo model plays a supervisor and a worker only",
}
"""The entries whose models cannot choose a search's attempts (`--search llm`), each with
why: their supervisor would answer without a call, turn after turn, until the run's
time ran out; `mlra run` and `mlra batch` refuse them before a run starts."""


@dataclass(frozen=True)
class ProviderRequest:
    """What the user gave for the model: a factory checks it (a key, a setting the API
    cannot take) with a one-line ConfigError before it builds anything."""

    spec: str
    """The whole spec as typed, stripped (`openai/gpt-5`, `replay:runs/x`)."""
    model: str
    """What follows the entry's NAME/ or NAME: (stripped for NAME/)."""
    base_url: str | None = None
    """`--base-url`: an API-compatible server of the user's own (None: the vendor's)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Where API keys are read: normally os.environ, never anywhere else."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    max_retries: int | None = None
    """None: the provider's own default."""
    timeout_s: float | None = None


ProviderFactory = Callable[[ProviderRequest], "ModelProvider"]


def spec_text(spec: str) -> str:
    """A spec as the table reads it: stripped, the bare `demo` as `demo:`."""
    text = spec.strip()
    return f"{DEMO}:" if text.lower() == DEMO else text


def spec_entry(spec: str) -> str | None:
    """The table's entry a model spec names, as agent/providers resolve_model reads it
    (`NAME:WHAT` first, then `NAME/MODEL`); None where the table has none."""
    text = spec_text(spec)
    return entry_for(text, ":") or entry_for(text, "/")


def why_steers_no_search(spec: str) -> str | None:
    """Why the model `spec` names cannot choose a search's attempts (`STEERS_NO_SEARCH`);
    None where it can, or the table does not know it (resolving it says so)."""
    entry = spec_entry(spec)
    return STEERS_NO_SEARCH.get(entry) if entry is not None else None


def entry_for(text: str, sep: str) -> str | None:
    """The table's entry `text` is written in with `sep` ("/" or ":"): the name before
    the first `sep`, spaces and case aside; None where no entry is."""
    head, found, _ = text.partition(sep)
    key = head.strip().lower() + sep
    return key if found and key in PROVIDERS else None


def provider_factory(entry: str) -> ProviderFactory:
    """The factory of a table entry, its module imported now."""
    return cast("ProviderFactory", load(PROVIDERS[entry]))
