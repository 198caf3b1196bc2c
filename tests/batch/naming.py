"""Run ids as a batch folder names them (readable part, keyed suffix: batch/run_ids.py),
for tests that look for a run's folder, log, card or retired attempts."""

from __future__ import annotations

from pathlib import Path

from mlra.batch.run_ids import run_names


def batch_run_id(out: Path, model: str, seed: int = 1, task: str = "answer") -> str:
    """The id the batch in `out` gives this run: under the folder's key (made now if the
    folder is new, as the batch's first driver makes it), or its old name in a legacy one."""
    return run_names(out).run_id(task, model, seed)
