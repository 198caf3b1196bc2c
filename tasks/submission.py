"""Freezing a submission: what is graded is what was submitted.

When a run ends with an evaluation, the sandbox's processes are stopped and the
artifact is copied out of the workspace into the run folder (`submission/`). The
evaluator grades that copy, never the live workspace, so a daemon the agent left
behind cannot rewrite the answer after the fact, and the copy's SHA-256 in the
`submission` event says exactly what was graded (`mlra eval` can check it later).

The copy never follows a symbolic link out of the artifact: a link to a host file
(hidden task data, the user's home) would otherwise put that file in front of the
evaluator as if the agent had made it. Such a submission is refused, naming the
link. Links that stay inside the artifact are kept, rewritten as relative links
within the copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

SUBMISSION_DIR = "submission"
"""The frozen copy's folder inside the run folder."""

CHUNK = 1024 * 1024


class SubmissionRefused(Exception):
    """The artifact cannot be frozen (missing, outside the workspace, a link out): one line."""


@dataclass
class FrozenArtifact:
    path: Path
    """The copy, on the host."""
    submitted: str
    """The artifact as submitted, relative to the workspace."""
    sha256: str
    size_bytes: int


def workspace_relative(workspace: Path, submitted: str, *, workdir: str | None = None) -> str:
    """The submitted path relative to the workspace, worked out without following links.

    Links are judged by `freeze`, which can name the one that leaves; here only the
    text of the path is checked (`..`, an absolute path elsewhere).
    """
    raw = submitted.strip() or "."
    path = Path(raw)
    if path.is_absolute():
        for base in (workdir, str(workspace)):
            if base and (raw == base or raw.startswith(base.rstrip("/") + "/")):
                path = Path(os.path.relpath(raw, base))
                break
        else:
            raise SubmissionRefused(f"the submitted path {submitted!r} is outside the workspace")
    rel = os.path.normpath(path.as_posix())
    if rel == ".." or rel.startswith("../"):
        raise SubmissionRefused(f"the submitted path {submitted!r} is outside the workspace")
    return rel


def freeze(
    workspace: Path, submitted: str, dest_dir: Path, *, workdir: str | None = None
) -> FrozenArtifact:
    """Copy the artifact into `dest_dir` (emptied first) and digest the copy.

    `workdir` is the workspace as the sandbox's commands see it, so an absolute
    link made inside (`/workspace/best.pt`) is read as the workspace file it names.
    Raises `SubmissionRefused` with the reason.
    """
    workspace = workspace.resolve()
    rel = workspace_relative(workspace, submitted, workdir=workdir)
    source = follow_submitted(workspace, rel, workdir)
    if not os.path.lexists(source):
        raise SubmissionRefused(f"nothing was submitted: {rel!r} does not exist in the workspace")
    name = Path(rel).name or "workspace"
    if dest_dir.exists():
        shutil.rmtree(dest_dir)
    dest_dir.mkdir(parents=True)
    target = dest_dir / name
    try:
        mode = os.lstat(source).st_mode
        if stat.S_ISDIR(mode):
            _copy_tree(source, target, top=source, workspace=workspace, workdir=workdir)
        elif stat.S_ISREG(mode):
            _copy_file(source, target)
        else:
            raise SubmissionRefused(f"{rel!r} is not a regular file or a folder")
    except BaseException:
        shutil.rmtree(dest_dir, ignore_errors=True)
        raise
    digest, size = artifact_digest(target)
    return FrozenArtifact(path=target, submitted=rel, sha256=digest, size_bytes=size)


def artifact_digest(path: Path) -> tuple[str, int]:
    """(SHA-256, bytes of file contents) of a file, or of a folder's sorted entries.

    For a folder every entry counts, in the order of its relative path: its kind,
    its path, and a file's content digest or a link's target; so renaming, adding
    or changing anything changes the digest.
    """
    if not path.is_dir() or path.is_symlink():
        digest, size = _file_digest(path)
        return digest, size
    entries: list[tuple[str, bytes]] = []
    total = 0
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            full = Path(root) / name
            rel = full.relative_to(path).as_posix()
            if full.is_symlink():
                entries.append((rel, b"L" + os.readlink(full).encode()))
            elif full.is_dir():
                entries.append((rel, b"D"))
            else:
                digest, size = _file_digest(full)
                total += size
                entries.append((rel, b"F" + digest.encode()))
    outer = hashlib.sha256()
    for rel, what in sorted(entries):
        outer.update(rel.encode("utf-8", "surrogateescape") + b"\0" + what + b"\n")
    return outer.hexdigest(), total


def _file_digest(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _link_target(link: Path, workspace: Path, workdir: str | None) -> tuple[str, Path]:
    """(what the link says, the host path it leads to with every further link followed)."""
    said = os.readlink(link)
    if os.path.isabs(said):
        base = (workdir or "").rstrip("/")
        if base and (said == base or said.startswith(base + "/")):
            host = Path(str(workspace) + said[len(base) :])
        else:
            host = Path(said)
    else:
        host = link.parent / said
    return said, Path(os.path.realpath(host))


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def follow_submitted(workspace: Path, rel: str, workdir: str | None) -> Path:
    """The host path the submitted path names; links on the way must stay in the workspace."""
    current = workspace
    for part in Path(rel).parts:
        if part == ".":
            continue
        current = current / part
        if current.is_symlink():
            said, real = _link_target(current, workspace, workdir)
            if not _inside(real, workspace):
                shown = current.relative_to(workspace).as_posix()
                raise SubmissionRefused(
                    f"the submitted path {rel!r} is refused: {shown} is a symbolic link to "
                    f"{said}, which is outside the workspace (links out are never followed)"
                )
            current = real
    return current


def _copy_file(source: Path, target: Path) -> None:
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, CHUNK)
    os.chmod(target, os.stat(source).st_mode & 0o777)


def _copy_tree(
    source: Path, target: Path, *, top: Path, workspace: Path, workdir: str | None
) -> None:
    """Copy a folder without following links; `top` is the artifact's own folder."""
    target.mkdir()
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        src, dst = Path(entry.path), target / entry.name
        where = src.relative_to(workspace).as_posix()
        if entry.is_symlink():
            said, real = _link_target(src, workspace, workdir)
            if not _inside(real, top):
                raise SubmissionRefused(
                    f"the artifact is refused: {where} is a symbolic link to {said}, which is "
                    "outside the submitted artifact (links out are never followed)"
                )
            os.symlink(os.path.relpath(real, src.parent), dst)
        elif entry.is_dir(follow_symlinks=False):
            _copy_tree(src, dst, top=top, workspace=workspace, workdir=workdir)
        elif entry.is_file(follow_symlinks=False):
            _copy_file(src, dst)
        else:
            raise SubmissionRefused(
                f"the artifact is refused: {where} is not a regular file, folder or link"
            )
