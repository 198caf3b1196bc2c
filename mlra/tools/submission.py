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

The artifact is the agent's work, so nothing about its shape may break the end of
the run or the host: every failure while freezing is a refusal (one line, agent-made
names quoted with repr so none can forge a line of the transcript), and the copy is
bounded before it is made. Its size is the files' apparent sizes, each file counted
once however many hard links it has; it must fit under the task's cap and in the
run folder's disk with room to spare. Hard links are copied once and stay linked,
and holes in sparse files stay holes, so the copy takes no more disk than that size.

Everything inside the artifact is walked, copied (tools/artifact_copy.py) and digested
by folder descriptors (tools/sandbox/trees.py): without recursion, with no path longer
than a name (a folder 3,000 levels deep, a path past PATH_MAX, is frozen whole), never
following a link, and holding at most a chunk of any file and a folder's names in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mlra.tools.artifact_copy import (
    GB,
    OpenArtifact,
    SubmissionRefused,
    Survey,
    check_room,
    copy_file,
    ordered_walk,
)
from mlra.tools.read_only import restore_originals
from mlra.tools.sandbox import sparse_files, trees

SUBMISSION_DIR = "submission"
"""The frozen copy's folder inside the run folder."""

DEFAULT_MAX_SUBMISSION_GB = 200.0
"""The largest artifact frozen unless the task says otherwise ([evaluator] max_submission_gb)."""


def artifact_words(path: str) -> str:
    """An artifact as a sentence names it: MLAgentBench and MLRC-Bench grade the workspace
    itself, whose path `.` made "Submit ." and "evaluating . with script"."""
    return "the workspace" if os.path.normpath(path or ".") == "." else path


@dataclass
class FrozenArtifact:
    path: Path
    """The copy, on the host."""
    submitted: str
    """The artifact as submitted, relative to the workspace."""
    sha256: str
    size_bytes: int
    """Bytes of file contents, each hard-linked file counted once."""
    restored: list[str] = field(default_factory=list)
    """The task's read-only paths the agent had changed, put back in the copy before
    it was digested (tools/read_only.py)."""


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
    workspace: Path,
    submitted: str,
    dest_dir: Path,
    *,
    workdir: str | None = None,
    max_gb: float = DEFAULT_MAX_SUBMISSION_GB,
    originals: Mapping[str, Path] | None = None,
) -> FrozenArtifact:
    """Copy the artifact into `dest_dir` (emptied first) and digest the copy.

    `originals` (workspace-relative path -> the task's file) are the task's read-only
    files: any of them the artifact holds is put back in the copy where it differs.

    `workdir` is the workspace as the sandbox's commands see it, so an absolute
    link made inside (`/workspace/best.pt`) is read as the workspace file it names.
    Raises `SubmissionRefused` with the reason, whatever went wrong, and then leaves
    no `dest_dir`: a run's ending must record a refusal, never crash on the artifact.
    """
    try:
        return _freeze(
            workspace, submitted, dest_dir, workdir=workdir, max_gb=max_gb, originals=originals
        )
    except SubmissionRefused:
        raise
    except Exception as exc:
        raise SubmissionRefused(
            f"the submission could not be frozen: {describe_error(exc)}"
        ) from exc


def describe_error(exc: BaseException) -> str:
    """An unexpected error as one line (an OSError already quotes the file it names)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _freeze(
    workspace: Path,
    submitted: str,
    dest_dir: Path,
    *,
    workdir: str | None,
    max_gb: float,
    originals: Mapping[str, Path] | None = None,
) -> FrozenArtifact:
    remove_tree(dest_dir)
    workspace = workspace.resolve()
    rel = workspace_relative(workspace, submitted, workdir=workdir)
    source = follow_submitted(workspace, rel, workdir)
    if not os.path.lexists(source):
        raise SubmissionRefused(f"nothing was submitted: {rel!r} does not exist in the workspace")
    artifact = OpenArtifact.open(workspace, source, workdir)
    try:
        survey = Survey()
        if stat.S_ISDIR(artifact.st.st_mode):
            survey.walk(artifact)
        elif stat.S_ISREG(artifact.st.st_mode):
            survey.add_file(artifact.st)
        else:
            raise SubmissionRefused(f"{rel!r} is not a regular file or a folder")
        dest_dir.mkdir(parents=True)
        try:
            check_room(rel, survey.size, dest_dir, int(max_gb * GB))
            target = dest_dir / (Path(rel).name or "workspace")
            if stat.S_ISDIR(artifact.st.st_mode):
                survey.copy(artifact, target, int(max_gb * GB))
            else:
                copy_file(artifact.fd, target)
            restored = restore_originals(target, rel, originals) if originals else []
            digest, size = artifact_digest(target)
        except BaseException:
            with contextlib.suppress(Exception):
                remove_tree(dest_dir)
            raise
    finally:
        artifact.close()
    return FrozenArtifact(
        path=target, submitted=rel, sha256=digest, size_bytes=size, restored=restored
    )


def remove_tree(path: Path) -> None:
    """Remove a file or folder however deep (shutil.rmtree recurses, and can run out of
    stack), never following a link inside."""
    trees.remove_tree(path)


def artifact_digest(path: Path) -> tuple[str, int]:
    """(SHA-256, bytes of file contents) of a file, or of a folder's sorted entries.

    For a folder every entry counts, in the order of its relative path: its kind,
    its path, and a file's content digest or a link's target, each field prefixed by
    its length (names and targets are any bytes but NUL, newlines included, so no
    separator could frame them); renaming, adding or changing anything changes the
    digest. A hard-linked file is read, and counted in the size, once.
    """
    if not path.is_dir() or path.is_symlink():
        return _file_digest(path)
    root = os.open(path, trees.DIR_FLAGS)
    files: dict[tuple[int, int], bytes] = {}
    total = 0
    outer = hashlib.sha256()
    try:
        for item in ordered_walk(root):
            mode = item.st.st_mode
            if stat.S_ISLNK(mode):
                kind, data = b"L", os.fsencode(os.readlink(item.name, dir_fd=item.dir_fd))
            elif stat.S_ISDIR(mode):
                kind, data = b"D", b""
            elif stat.S_ISREG(mode):
                key = (item.st.st_dev, item.st.st_ino)
                data = files.get(key, b"")
                if not data:
                    fd = os.open(item.name, os.O_RDONLY | trees.FILE_FLAGS, dir_fd=item.dir_fd)
                    try:
                        digest, size = _fd_digest(fd)
                    finally:
                        os.close(fd)
                    total += size
                    data = digest.encode()
                    if item.st.st_nlink > 1:
                        files[key] = data
                kind = b"F"
            else:
                kind, data = b"S", b""  # never in a copy freeze made
            for part in (item.path, kind, data):
                outer.update(len(part).to_bytes(8, "big") + part)
    finally:
        os.close(root)
    return outer.hexdigest(), total


def _file_digest(path: Path) -> tuple[str, int]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _fd_digest(fd)
    finally:
        os.close(fd)


def _fd_digest(fd: int) -> tuple[str, int]:
    h = hashlib.sha256()
    size = sparse_files.hash_into(fd, h)
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
                    f"the submitted path {rel!r} is refused: {shown!r} is a symbolic link to "
                    f"{said!r}, which is outside the workspace (links out are never followed)"
                )
            current = real
    return current
