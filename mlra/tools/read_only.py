"""A task's read-only files put back in the copy that is graded.

The sandbox shows a task's read-only files read-only, but that is no guarantee:
with `--isolation none` the agent's commands run as the host user and can write
anything, and a folder holding a read-only file can be moved aside between
commands. What decides the score is the frozen copy the evaluator grades, so the
task's originals are put back into it before it is digested: a change to an
evaluation script or a data file the task froze can never reach the grade, and the
paths put back are recorded, so the log says that the agent had changed them.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from mlra.tools.sandbox.trees import remove_tree


def restore_originals(copy: Path, artifact: str, originals: Mapping[str, Path]) -> list[str]:
    """Put the originals back into `copy`, the frozen copy of the workspace path
    `artifact` ("." for the whole workspace); returns the workspace paths that differed
    and were put back, sorted. `originals` maps workspace-relative paths to the task's files."""
    restored = []
    for rel, original in sorted(originals.items()):
        placed = _where(rel, artifact, original, copy)
        if placed is None:
            continue
        source, target = placed
        if source.exists() and not same(source, target):
            _replace(copy, target, source)
            restored.append(rel)
        restored += [f"{rel}: {name}" for name in _drop_shadows(source, target)]
    return sorted(restored)


def _drop_shadows(source: Path, target: Path) -> list[str]:
    """Remove what Python would import in place of the read-only modules at `target`
    (a file or a folder of them): cached bytecode (an unchecked hash-based `.pyc` is
    used whatever the source says, and a timestamp one can be forged from the
    original's size and time), and an extension module or a package of the same name,
    which Python's finder prefers to the source. Returns the names removed."""
    pairs = [(source, target)] if source.is_file() else []
    if source.is_dir():
        pairs = [(p, target / p.relative_to(source)) for p in source.rglob("*.py")]
    removed: list[str] = []
    for original, module in pairs:
        if module.suffix != ".py" or module.is_symlink() or not module.is_file():
            continue
        folder, stem = module.parent, module.stem
        shadows = [*folder.glob(f"__pycache__/{stem}.*.pyc"), folder / f"{stem}.pyc"]
        shadows += [p for p in folder.glob(f"{stem}.*") if p.suffix in (".so", ".pyd")]
        package = folder / stem
        if package.is_dir() and not (original.parent / stem).is_dir():
            shadows.append(package)
        for shadow in shadows:
            if shadow.is_symlink() or shadow.is_file():
                shadow.unlink()
            elif shadow.is_dir():
                remove_tree(shadow)  # the agent's folder: however deep
            else:
                continue
            removed.append(shadow.name)
    return removed


def _where(rel: str, artifact: str, original: Path, copy: Path) -> tuple[Path, Path] | None:
    """(the original, where it lies in the copy) for a read-only path and the submitted
    artifact that overlap, or None where the artifact does not hold it."""
    if artifact in ("", "."):
        return original, copy / rel
    if rel == artifact:
        return original, copy
    if rel.startswith(artifact + "/"):  # a read-only file inside the submitted folder
        return original, copy / rel[len(artifact) + 1 :]
    if artifact.startswith(rel + "/"):  # the submission lies inside a read-only folder
        return original / artifact[len(rel) + 1 :], copy
    return None


def same(original: Path, target: Path) -> bool:
    """Whether `target` holds exactly the original: the same bytes in a file, the same
    names and bytes in a folder (nothing added, nothing removed, no link put in)."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return False
    if original.is_dir():
        if not stat.S_ISDIR(mode):
            return False
        names = sorted(p.name for p in original.iterdir())
        if names != sorted(p.name for p in target.iterdir()):
            return False
        return all(same(original / name, target / name) for name in names)
    return stat.S_ISREG(mode) and filecmp.cmp(original, target, shallow=False)


def _replace(copy: Path, target: Path, source: Path) -> None:
    here = copy
    for part in target.relative_to(copy).parts[:-1]:
        # A folder on the way that the agent made a file or a link becomes a folder again.
        here = here / part
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            here.unlink()
        here.mkdir(exist_ok=True)
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        remove_tree(target)
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target)
