"""The compare screen's diff dialog names the key that opened it, which closes it too:
opened with `p` (prompts) it said "Escape or d to close"."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from mlra.console.screens.screens import DiffScreen
from tests.console.test_compare_snapshots import _app


async def _until(pilot: Any, check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the screen never showed it"
        await pilot.pause(0.05)


@pytest.mark.parametrize("key", ["p", "s", "d"])
async def test_the_diff_dialog_names_and_closes_on_the_key_that_opened_it(
    tmp_path: Path, key: str
) -> None:
    app = _app(tmp_path, 2)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press(key)
        await _until(pilot, lambda: isinstance(app.screen, DiffScreen))
        screen = app.screen
        said = " ".join(str(w.content) for w in screen.query(".dialog-detail").results(Static))
        assert f"Escape or {key} to close" in said, said
        await pilot.press(key)
        await _until(pilot, lambda: not isinstance(app.screen, DiffScreen))
