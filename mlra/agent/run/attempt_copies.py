"""An attempt's workspace made as a copy of its parent's (`improve`, `debug`), inside the
attempt's own disk quota (tools/sandbox/workspace_copies.py).

A copy that would not fit is refused before anything is written: the attempt ends
`stopped` with why, in one line, as the search reads it. What the copy leaves out
(FIFOs, sockets, devices) is told to the attempt's worker, in its instructions and
as a notice at its run's start, and to the searching run.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlra.agent.loop.attempts import AttemptRefused
from mlra.agent.record.eventlog import EVENTS_FILE
from mlra.agent.run.controller import RunController
from mlra.agent.setup.run_setup import limit_choices
from mlra.tools.sandbox import trees
from mlra.tools.sandbox.default_limits import MIB, disk_for
from mlra.tools.sandbox.workspace_copies import CopyRefused, copy_workspace, empty_folder
from mlra.tools.submission import artifact_digest


def disk_quota_bytes(child: RunController) -> int | None:
    """The disk quota the attempt's sandbox will get, as its spec will ask for it (None:
    no quota): its share of the run's budget (agent/setup/run_budget.py), else, for a log
    from before budgets, what its own limits choose."""
    budget = child.config.budget
    if budget is not None:
        return budget.disk_mb * MIB if budget.disk_mb else None
    _, disk_mb, sources = limit_choices(child.task, child.config, child.workspace)
    chosen = disk_for(disk_mb, sources.get("disk_mb"), child.workspace)
    return None if chosen.mb is None else chosen.mb * MIB


def copy_parents_workspace(child: RunController, source: Path, parent: str) -> str:
    """Replace the child's starter workspace with a copy of `source`, the parent attempt's
    (which no longer changes); what the copy left out, in words ('' when nothing).
    Raises AttemptRefused, with nothing of the copy left, where it does not fit."""
    quota = disk_quota_bytes(child)
    if os.path.ismount(child.workspace):  # a file system of its own: filled, never removed
        empty_folder(child.workspace)
    else:
        trees.remove_tree(child.workspace)
    try:
        found = copy_workspace(
            source, child.workspace, quota_bytes=quota, what=f"attempt {parent}'s workspace"
        )
    except CopyRefused as exc:
        raise AttemptRefused(f"not started: {exc}") from None
    skipped = found.skipped_text()
    if not skipped:
        return ""
    told = (
        f"Not copied from attempt {parent}'s workspace (only files, folders and links are): "
        f"{skipped}."
    )
    child.config.task_notices.append(told)
    if child.config.attempt is not None:
        child.config.attempt.instructions = f"{child.config.attempt.instructions.strip()}\n\n{told}"
    return told


def note_inherited(child: RunController, parent: str | None, parent_sha: str | None) -> None:
    """Record what of the child's workspace, as it was made, is not its own: the task's
    artifact there (its parent's copy, or the starter's) and its parent's validated one,
    by digest (agent/setup/config.py `AttemptSettings.inherited`), before its run starts,
    so its `run_started` keeps them for a resume."""
    settings = child.config.attempt
    if settings is None:
        return
    whose = f"{parent}'s" if parent else "the starter's"
    artifact = child.workspace / child.task.evaluator.artifact
    if os.path.lexists(artifact):
        try:
            settings.inherited[artifact_digest(artifact)[0]] = whose
        except OSError:
            pass  # unreadable: the validation says so, as for any artifact
    if parent_sha:
        settings.inherited.setdefault(parent_sha, f"{parent}'s validated one")


def clear_if_never_started(run_dir: Path) -> bool:
    """Whether an attempt's run never began (no log, or an empty one: its first line is
    its `run_started`); if so, whatever of its workspace was made (a copy cut short when
    mlra stopped) is removed, since nothing will ever run in it."""
    log = run_dir / EVENTS_FILE
    if log.is_file() and log.stat().st_size > 0:
        return False
    trees.remove_tree(run_dir / "workspace", ignore_errors=True)
    return True
