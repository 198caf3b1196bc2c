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
import secrets
import tempfile
from pathlib import Path

from mlra.tools.sandbox import sparse_files, trees
from mlra.tools.sandbox.base import Sandbox, SandboxError


def staging_dir(workspace: Path) -> Path:
    """A private folder for one fetch, in the run folder (beside the workspace, which the
    agent cannot reach), else in the host's temporary folder."""
    with contextlib.suppress(OSError):
        return Path(tempfile.mkdtemp(prefix=".fetch-", dir=workspace.parent))
    return Path(tempfile.mkdtemp(prefix="mlra-fetch-"))


def remove(path: Path) -> None:
    """Remove a staging folder, however deep, without following a link out of it."""
    trees.remove_tree(path, ignore_errors=True)


def tree_size(root: Path) -> int:
    """Bytes of regular files under `root`, by lstat, however deep."""
    try:
        fd = os.open(root, trees.DIR_FLAGS)
    except OSError:
        return 0
    try:
        return sum(e.st.st_size for e in trees.walk(fd) if e.is_file)
    finally:
        os.close(fd)


def hand_over(root: Path, workspace: Path) -> None:
    """What a fetch brought belongs to whoever owns the workspace (a Docker sandbox's
    user, when mlra runs as root), so the agent can change it: chowned entry by entry
    relative to its folder, never through a link."""
    owner = workspace.stat()
    if os.geteuid() != 0 or owner.st_uid == 0:
        return
    with contextlib.suppress(OSError):
        os.lchown(root, owner.st_uid, owner.st_gid)
    try:
        fd = os.open(root, trees.DIR_FLAGS)
    except OSError:
        return  # a file, chowned above
    try:
        for entry in trees.walk(fd):
            with contextlib.suppress(OSError):
                os.chown(
                    entry.name,
                    owner.st_uid,
                    owner.st_gid,
                    dir_fd=entry.dir_fd,
                    follow_symlinks=False,
                )
    finally:
        os.close(fd)


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
            if exc.errno == errno.EXDEV and replace and staged.is_file():
                _replace_across(staged, parent, name)
                return True
            if exc.errno == errno.EXDEV:
                return False
            raise SandboxError(f"could not put it at {rel}: {exc.strerror}") from None
        return True
    finally:
        os.close(parent)


def _replace_across(staged: Path, parent: int, name: str) -> None:
    """A file put in `name`'s place from another file system (the workspace is a volume
    of its own: tools/sandbox/volume.py): copied beside it under a fresh name, then
    renamed over it, so a link the agent left there is replaced, never followed."""
    temp = f".{name}.mlra-incoming-{secrets.token_hex(4)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    source = os.open(staged, os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(temp, flags, 0o644, dir_fd=parent)
        try:
            sparse_files.copy_sparse(source, target)
            st = os.fstat(source)
            with contextlib.suppress(OSError):
                os.fchown(target, st.st_uid, st.st_gid)
        finally:
            os.close(target)
        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)
        raise SandboxError(f"could not put it in place: {exc.strerror}") from None
    finally:
        os.close(source)
