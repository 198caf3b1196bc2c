"""The seam every tracker's writer sits behind: a module with `PACKAGE` (what must be
importable) and `write(experiment, dest) -> str` (where it went, in words).

The trackers' packages are the `export` extra's (pip install 'mlra[export]'): a writer
is imported only when named, so mlra itself never needs them, and one that is missing
is one line naming the extra, not a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Protocol, cast

from mlra.batch.export.source import Experiment

TARGETS: dict[str, str] = {
    "mlflow": "mlra.batch.export.to_mlflow",
    "wandb": "mlra.batch.export.to_wandb",
    "tensorboard": "mlra.batch.export.to_tensorboard",
}
"""Each target's writer module."""

EXTRA = "export"
"""The pyproject extra that installs every target's package."""


class TrackerMissing(RuntimeError):
    """The target's package is not installed here (one line, naming the extra)."""


class Writer(Protocol):
    PACKAGE: str
    DEFAULT_DEST: str

    def write(self, experiment: Experiment, dest: str) -> str: ...


def writer(target: str) -> Writer:
    """The target's writer, its package checked present (`TrackerMissing` if not)."""
    module = importlib.import_module(TARGETS[target])
    package: str = module.PACKAGE
    if importlib.util.find_spec(package) is None:
        raise TrackerMissing(
            f"--to {target} needs the {package} package: pip install 'mlra[{EXTRA}]'"
        )
    return cast(Writer, module)  # a module is the writer: its PACKAGE, DEFAULT_DEST, write


def not_written(tracker: str, run: str, exc: BaseException) -> str:
    """One line for a run a tracker refused (its client's error, first line, cut), said
    where the export goes on with the other runs: never a traceback."""
    from mlra.terminal_text import printable_line

    said = (str(exc).strip().splitlines() or [""])[0][:200]
    return printable_line(f"run {run} was not written to {tracker}: {type(exc).__name__}: {said}")
