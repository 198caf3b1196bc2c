"""Which snapshot test draws which picture of the documentation.

The pictures in `docs/images/` are these tests' own SVGs, copied byte for byte, so the
pages never show a console that is not the product's: `docs/screens.py` regenerates
them, `tests/test_docs.py` checks they are still identical, and the tests named here
carry the `docs_screens` marker (`pytest -m docs_screens`, tests/console/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"

SCREENS: dict[str, str] = {
    "console-running.svg": "tests/console/test_console_snapshots.py::test_running",
    "console-80x24.svg": "tests/console/test_console_snapshots.py::test_80x24[running]",
    "console-breakpoint.svg": (
        "tests/console/test_console_snapshots.py::test_paused_with_a_tool_call_waiting"
    ),
    "console-experiments.svg": (
        "tests/console/test_experiments_pane.py::test_snapshot_with_experiments"
    ),
    "console-attempts.svg": "tests/console/test_attempts_pane.py::test_snapshot_attempts_200x50",
    "replay-mid-run.svg": "tests/console/test_replay.py::test_snapshot_replay_mid_run",
    "replay-verdict.svg": (
        "tests/console/test_replay.py::test_snapshot_replay_opens_on_the_verdict[size1]"
    ),
    "compare-matrix.svg": "tests/console/test_compare_snapshots.py::test_matrix[160x48]",
    "compare-curves.svg": "tests/console/test_compare_snapshots.py::test_curves[160x48]",
}
"""The docs' picture (a file name in docs/images/) to the snapshot test that draws it."""


def snapshot_of(nodeid: str) -> Path:
    """Where pytest-textual-snapshot keeps a test's SVG: `__snapshots__/<module>/<test>.svg`
    beside the test file, the test's name with its parameters."""
    path, _, name = nodeid.partition("::")
    test_file = ROOT / path
    return test_file.parent / "__snapshots__" / test_file.stem / f"{name}.svg"


BROWSER_PICTURES: dict[str, str] = {
    "share-page.png": "tests/batch/test_share_browser.py::test_the_docs_picture",
}
"""Pictures of a page in a real browser (headless Chromium's screenshot), written by the
test named with MLRA_DOCS_PICTURES=1: a rendering depends on the machine's fonts, so they
are not compared byte for byte, only required to exist and be shown."""
