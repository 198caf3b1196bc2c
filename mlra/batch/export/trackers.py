"""The seam every tracker's writer sits behind, and the table of them: a writer has
`PACKAGE` (what must be importable), `DEFAULT_DEST` and `write(experiment, dest) -> str`
(where it went, in words); `TRACKERS` names each by "module" (a module that is the
writer, as to_mlflow.py is) or "module:attr", with the words `mlra export --help` says.

The trackers' packages are the `export` extra's (pip install 'mlra[export]'): a writer
is imported only when named, so mlra itself never needs them, and one that is missing
is one line naming that tracker's one package (`PIP_NAME` where it differs from the
module's name, as mlflow-skinny does), not the extra: the extra brings every tracker's
client, some 40 packages, for the one wanted. This module imports nothing heavy:
console/cli/export_cli.py reads the table for `--to`'s choices and its help.
Adding a tracker is its writer's module and one line here (docs/contributing.md).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from mlra.lazy_load import load

if TYPE_CHECKING:
    from mlra.batch.export.source import Experiment


class Tracker(NamedTuple):
    """One `--to` name: its writer, and how the command's help names what it writes."""

    writer: str
    """"module" or "module:attr", imported only when the tracker is named."""
    title: str
    """The tracker, as the command's one-line help names it: "MLflow"."""
    groups: str
    """What holds a task's runs there, with the tracker's name: "experiment (MLflow)"."""
    local: str
    """What it writes where --dest names no server, with its default: "MLflow's file
    store (default ./mlruns)"."""


TRACKERS: dict[str, Tracker] = {
    "mlflow": Tracker(
        "mlra.batch.export.to_mlflow",
        "MLflow",
        "experiment (MLflow)",
        "MLflow's file store (default ./mlruns)",
    ),
    "wandb": Tracker(
        "mlra.batch.export.to_wandb",
        "W&B (offline)",
        "project (W&B)",
        "an offline W&B run (default ./wandb/)",
    ),
    "tensorboard": Tracker(
        "mlra.batch.export.to_tensorboard",
        "TensorBoard",
        "folder (TensorBoard)",
        "TensorBoard event files (default ./tensorboard)",
    ),
}
"""`mlra export --to`'s names, in the order its help lists them."""


class TrackerMissing(RuntimeError):
    """The target's package is not installed here (one line, naming what to install)."""


class Writer(Protocol):
    PACKAGE: str
    DEFAULT_DEST: str

    def write(self, experiment: Experiment, dest: str) -> str: ...


def writer(target: str) -> Writer:
    """The target's writer, its package checked present (`TrackerMissing` if not)."""
    module = cast(Writer, load(TRACKERS[target].writer))
    package = module.PACKAGE
    if importlib.util.find_spec(package) is None:
        pip_name = getattr(module, "PIP_NAME", package)
        raise TrackerMissing(f"--to {target} needs the {package} package: pip install {pip_name}")
    return module  # a module (or an object) is the writer: its PACKAGE, DEFAULT_DEST, write


def not_written(tracker: str, run: str, exc: BaseException) -> str:
    """One line for a run a tracker refused (its client's error, first line, cut), said
    where the export goes on with the other runs: never a traceback."""
    from mlra.terminal_text import printable_line

    said = (str(exc).strip().splitlines() or [""])[0][:200]
    return printable_line(f"run {run} was not written to {tracker}: {type(exc).__name__}: {said}")
