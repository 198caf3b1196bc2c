"""The console tests' own collection: the snapshot tests that draw the docs' pictures
carry the `docs_screens` marker, so `pytest -m docs_screens --snapshot-update -n 0`
redraws exactly those (`docs/screens.py` then copies them into docs/images/)."""

from __future__ import annotations

import pytest

from tests.console.docs_screens import SCREENS

_DRAWING = set(SCREENS.values())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid in _DRAWING:
            item.add_marker(pytest.mark.docs_screens)
