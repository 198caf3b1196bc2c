"""What a model call costs, in US dollars, from the tokens it used.

Prices are public list prices in USD per million tokens, matched by the longest
model-name prefix so dated snapshots (`claude-sonnet-4-5-20250929`,
`gpt-4.1-2025-04-14`) find their family. A newer Claude of a known family (say
`claude-sonnet-4-9`) is priced like the family's latest known model, as Claude
families have kept their price across versions, so a cost budget still means
something; OpenAI point releases (`gpt-5.2`) changed price, so only listed ones
are priced. A model nobody priced (local servers, other vendors) costs 0 and is
reported as unpriced, so the caller can say the cost budget cannot be enforced.

Anthropic bills cache writes (5-minute TTL) at 1.25x and cache reads at 0.1x the
input price. OpenAI bills cached input at its own lower rate and cache writes as
ordinary input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from mlra.agent.providers.base import Usage

T = TypeVar("T")


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float


def _anthropic(input_: float, output: float) -> Price:
    return Price(input_, output, cache_read=input_ * 0.1, cache_write=input_ * 1.25)


def _openai(input_: float, cached: float, output: float) -> Price:
    return Price(input_, output, cache_read=cached, cache_write=input_)


PRICES: dict[str, Price] = {
    # Anthropic: Claude 4.x (Opus 4 and 4.1 kept the old Opus price; 4.5 and later are cheaper).
    "claude-opus": _anthropic(5.0, 25.0),
    "claude-opus-4-0": _anthropic(15.0, 75.0),
    "claude-opus-4-1": _anthropic(15.0, 75.0),
    "claude-opus-4-20250514": _anthropic(15.0, 75.0),
    "claude-opus-4-5": _anthropic(5.0, 25.0),
    "claude-opus-4-6": _anthropic(5.0, 25.0),
    "claude-4-opus": _anthropic(15.0, 75.0),
    "claude-sonnet": _anthropic(3.0, 15.0),
    "claude-sonnet-4": _anthropic(3.0, 15.0),
    "claude-4-sonnet": _anthropic(3.0, 15.0),
    "claude-haiku": _anthropic(1.0, 5.0),
    "claude-haiku-4-5": _anthropic(1.0, 5.0),
    # Anthropic: Claude 3.x, still seen in configs.
    "claude-3-opus": _anthropic(15.0, 75.0),
    "claude-3-7-sonnet": _anthropic(3.0, 15.0),
    "claude-3-5-sonnet": _anthropic(3.0, 15.0),
    "claude-3-5-haiku": _anthropic(0.8, 4.0),
    "claude-3-haiku": _anthropic(0.25, 1.25),
    # OpenAI: input, cached input, output.
    "gpt-4o": _openai(2.5, 1.25, 10.0),
    "gpt-4o-mini": _openai(0.15, 0.075, 0.6),
    "gpt-4.1": _openai(2.0, 0.5, 8.0),
    "gpt-4.1-mini": _openai(0.4, 0.1, 1.6),
    "gpt-4.1-nano": _openai(0.1, 0.025, 0.4),
    "gpt-5": _openai(1.25, 0.125, 10.0),
    "gpt-5-mini": _openai(0.25, 0.025, 2.0),
    "gpt-5-nano": _openai(0.05, 0.005, 0.4),
    "gpt-5-pro": _openai(15.0, 15.0, 120.0),
    "gpt-5.1": _openai(1.25, 0.125, 10.0),
    "gpt-5.2": _openai(1.75, 0.175, 14.0),
    "gpt-5.2-pro": _openai(21.0, 21.0, 168.0),
    "gpt-5.4": _openai(2.5, 0.25, 15.0),
    "o1": _openai(15.0, 7.5, 60.0),
    "o1-mini": _openai(1.1, 0.55, 4.4),
    "o1-pro": _openai(150.0, 150.0, 600.0),
    "o3": _openai(2.0, 0.5, 8.0),
    "o3-mini": _openai(1.1, 0.55, 4.4),
    "o3-pro": _openai(20.0, 20.0, 80.0),
    "o4-mini": _openai(1.1, 0.275, 4.4),
}

_PROVIDER_PREFIXES = ("anthropic/", "openai/")
_BOUNDARIES = "-@:"


def longest_prefix(table: Mapping[str, T], name: str) -> T | None:
    """The entry whose key is the longest prefix of `name` ending at a name boundary.

    The boundary keeps `gpt-5` from pricing `gpt-5.5` (a different price list),
    while `claude-sonnet-4-5-20250929` still finds `claude-sonnet-4-5`.
    """
    best: str | None = None
    for key in table:
        fits = name == key or (name.startswith(key) and name[len(key)] in _BOUNDARIES)
        if fits and (best is None or len(key) > len(best)):
            best = key
    return table[best] if best is not None else None


def bare_model(model: str) -> str:
    """`anthropic/claude-x` and `claude-x` name the same price."""
    lowered = model.strip().lower()
    for prefix in _PROVIDER_PREFIXES:
        if lowered.startswith(prefix):
            return lowered[len(prefix) :]
    return lowered


def price_for(model: str) -> Price | None:
    return longest_prefix(PRICES, bare_model(model))


def cost(model: str, usage: Usage) -> tuple[float, bool]:
    """(USD, priced): an unknown model costs 0 and says so rather than guessing."""
    price = price_for(model)
    if price is None:
        return 0.0, False
    cached = usage.cache_read_tokens + usage.cache_write_tokens
    uncached = max(0, usage.input_tokens - cached)
    usd = (
        uncached * price.input
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
        + usage.output_tokens * price.output
    ) / 1_000_000
    return usd, True
