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


def entry_for(text: str, sep: str) -> str | None:
    """The table's entry `text` is written in with `sep` ("/" or ":"): the name before
    the first `sep`, spaces and case aside; None where no entry is."""
    head, found, _ = text.partition(sep)
    key = head.strip().lower() + sep
    return key if found and key in PROVIDERS else None


def provider_factory(entry: str) -> ProviderFactory:
    """The factory of a table entry, its module imported now."""
    return cast("ProviderFactory", load(PROVIDERS[entry]))
