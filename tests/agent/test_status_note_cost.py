"""The status note the agents read says a cost budget cannot be enforced where the
model has no price."""

from __future__ import annotations

from mlra.agent.setup.prompts import status_note


def test_the_status_note_says_an_unpriced_cost_budget_cannot_be_enforced() -> None:
    common = dict(elapsed_s=0.0, limit_s=60.0, steps=0, max_steps=None, tokens=0, max_tokens=None)
    priced = status_note(cost_usd=0.0, max_cost_usd=1.0, **common)  # pyright: ignore[reportArgumentType]
    unpriced = status_note(cost_usd=0.0, max_cost_usd=1.0, cost_enforced=False, **common)  # pyright: ignore[reportArgumentType]
    assert "Cost: $0.00 of $1.00." in priced
    assert "of $1.00" not in unpriced and "cannot be enforced" in unpriced
