"""Where fetched things wait, and how they reach the workspace without a race.

A fetch works in a staging folder of mlra's own in the run folder (next to the
workspace, out of the agent's reach, so its processes cannot swap it for a link),
and what it brought is then renamed into place beneath the workspace, through a
descriptor of the destination's folder opened without following links. Walks here
are iterative and never follow a link: a fetched tree may be thousands of levels deep.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

from mlra.tools.sandbox.base import Sandbox, SandboxError


def staging_dir(workspace: Path) -> Path:
    """A private folder for one fetch, in the run folder (beside the workspace, which the
    agent cannot reach), else in the host's temporary folder."""
    with contextlib.suppress(OSError):
        return Path(tempfile.mkdtemp(prefix=".fetch-", dir=workspace.parent))
    return Path(tempfile.mkdtemp(prefix="mlra-fetch-"))


def remove(path: Path) -> None:
    """Remove a staging folder, however deep, without following a link out of it."""
    if not os.path.lexists(path):
        return
    if not path.is_dir() or path.is_symlink():
        with contextlib.suppress(OSError):
            path.unlink()
        return
    # shutil.rmtree walks by descriptors (rmtree is safe against links) but recurses,
    # which a very deep tree defeats; walk down iteratively and remove bottom up.
    stack = [str(path)]
    order: list[str] = []
    while stack:
        folder = stack.pop()
        order.append(folder)
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
        except OSError:
            continue
    for folder in reversed(order):
        with contextlib.suppress(OSError):
            os.rmdir(folder)
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


def tree_size(root: Path) -> int:
    """Bytes of regular files under `root` by lstat, walked iteratively."""
    total = 0
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            it = os.scandir(folder)
        except OSError:
            continue
        with it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                elif stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


def hand_over(root: Path, workspace: Path) -> None:
    """What a fetch brought belongs to whoever owns the workspace (a Docker sandbox's
    user, when mlra runs as root), so the agent can change it. lchown, never through a
    link; iterative."""
    owner = workspace.stat()
    if os.geteuid() != 0 or owner.st_uid == 0:
        return
    stack = [str(root)]
    with contextlib.suppress(OSError):
        os.lchown(root, owner.st_uid, owner.st_gid)
    while stack:
        folder = stack.pop()
        try:
            it = os.scandir(folder)
        except OSError:
            continue
        with it:
            for entry in it:
                with contextlib.suppress(OSError):
                    os.lchown(entry.path, owner.st_uid, owner.st_gid)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)


def move_in(sandbox: Sandbox, staged: Path, rel: str, *, replace: bool = False) -> bool:
    """Put `staged` (a file or folder) at the workspace path `rel`, renamed into its
    parent opened beneath the workspace; False where the staging folder is on another
    file system (the caller copies it in). `replace`: a file may take an existing
    file's place (a re-downloaded paper)."""
    parent_rel, _, name = rel.rpartition("/")
    problem = sandbox.read_only_problem(rel)
    if problem is not None:
        raise SandboxError(problem)
    parent, _ = sandbox.open_beneath(
        parent_rel or ".", os.O_RDONLY, make_parents=True, make_dir=True
    )
    try:
        owner = sandbox.workspace.stat()
        if os.geteuid() == 0 and owner.st_uid != 0:
            os.fchown(parent, owner.st_uid, owner.st_gid)
        if not replace:
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=parent)  # an empty folder waiting for it
        try:
            if replace:
                os.replace(staged, name, dst_dir_fd=parent)
            else:
                os.rename(staged, name, dst_dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                return False
            raise SandboxError(f"could not put it at {rel}: {exc.strerror}") from None
        return True
    finally:
        os.close(parent)
