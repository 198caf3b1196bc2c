"""Where a workspace path comes from: the task file the run's setup copies there.

The starter entries of `[files]` are copied into the workspace in order (a folder's
contents into its root, a file by its name; agent/setup/run_setup.py), so a later entry
wins. Checks at load time (a recipe's script, a read-only file) and putting
read-only files back before grading both need the same answer. Plain paths in and
out: the task format (tasks/spec.py) reads this, not the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath


def workspace_relative(rel: str) -> str | None:
    """`rel` as a clean workspace-relative POSIX path, or None where it is empty,
    the workspace itself, absolute, or leaves the workspace."""
    path = PurePosixPath(rel.strip())
    if not rel.strip() or path.is_absolute() or ".." in path.parts:
        return None
    clean = path.as_posix()
    return None if clean == "." else clean


def starter_source(starter: Sequence[Path], rel: str) -> Path | None:
    """The file or folder of the starter entries `starter` (in `[files]` order) that
    the workspace holds at `rel` when a run starts, or None where none puts anything."""
    clean = workspace_relative(rel)
    if clean is None:
        return None
    for source in reversed(starter):
        if source.is_dir():
            candidate = source / clean
            if candidate.exists() or candidate.is_symlink():
                return candidate
        elif clean == source.name:
            return source
    return None
