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

Everything inside the artifact is walked, copied and digested by folder descriptors
(tools/sandbox/trees.py): without recursion, with no path longer than a name (a
folder 3,000 levels deep, a path past PATH_MAX, is frozen whole), never following a
link, and holding at most a chunk of any file and a folder's names in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from shutil import disk_usage

from mlra.tools.read_only import restore_originals
from mlra.tools.sandbox import beneath, trees

SUBMISSION_DIR = "submission"
"""The frozen copy's folder inside the run folder."""

CHUNK = 1024 * 1024
GB = 1_000_000_000

DEFAULT_MAX_SUBMISSION_GB = 200.0
"""The largest artifact frozen unless the task says otherwise ([evaluator] max_submission_gb)."""

KEEP_FREE_BYTES = GB
KEEP_FREE_FRACTION = 0.05
"""The copy must leave this much of the run folder's disk free, whichever is more: a
host whose disk fills up cannot write the log or run the evaluator."""


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
    artifact = _Artifact.open(workspace, source, workdir)
    try:
        survey = _Survey()
        if stat.S_ISDIR(artifact.st.st_mode):
            survey.walk(artifact)
        elif stat.S_ISREG(artifact.st.st_mode):
            survey.add_file(artifact.st)
        else:
            raise SubmissionRefused(f"{rel!r} is not a regular file or a folder")
        dest_dir.mkdir(parents=True)
        try:
            _check_room(rel, survey.size, dest_dir, int(max_gb * GB))
            target = dest_dir / (Path(rel).name or "workspace")
            if stat.S_ISDIR(artifact.st.st_mode):
                survey.copy(artifact, target, int(max_gb * GB))
            else:
                _copy_file(artifact.fd, target)
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


def _amount(n: int) -> str:
    if n >= GB:
        return f"{n / GB:,.1f} GB"
    if n >= 1_000_000:
        return f"{n / 1_000_000:,.1f} MB"
    return f"{n:,} bytes"


def _check_room(rel: str, size: int, dest_dir: Path, max_bytes: int) -> None:
    """Refuse an artifact too big to copy: over the cap, or more than the disk can spare."""
    rule = "(its files' apparent sizes, each hard-linked file counted once)"
    if size > max_bytes:
        raise SubmissionRefused(
            f"the artifact {rel!r} is refused: it holds {_amount(size)} {rule}, more than "
            f"the {_amount(max_bytes)} a submission may hold (the task's "
            "[evaluator] max_submission_gb)"
        )
    usage = disk_usage(dest_dir)
    keep = max(KEEP_FREE_BYTES, int(usage.total * KEEP_FREE_FRACTION))
    if size > usage.free - keep:
        raise SubmissionRefused(
            f"the artifact {rel!r} is refused: it holds {_amount(size)} {rule}, and the "
            f"run folder's disk has {_amount(usage.free)} free, of which the copy must "
            f"leave {_amount(keep)} (1 GB or 5% of the disk, whichever is more)"
        )


@dataclass
class _Artifact:
    """The submitted folder or file, open beneath the workspace, and where it lies."""

    fd: int
    st: os.stat_result
    parts: tuple[str, ...]
    """Its path from the workspace, links resolved."""
    root: int
    """The workspace, open: links inside the artifact are judged from it."""
    aliases: tuple[str, ...]
    """Absolute link targets that mean the workspace (as commands see it, as the host does)."""

    @classmethod
    def open(cls, workspace: Path, source: Path, workdir: str | None) -> _Artifact:
        """`source` has no link left on its way (follow_submitted); it is opened beneath
        the workspace without following any, so a folder swapped for a link since is
        refused, not followed."""
        parts = tuple(beneath.split(source.relative_to(workspace).as_posix()))
        root = beneath.open_root(workspace)
        try:
            fd, _ = beneath.open_beneath(root, parts, os.O_RDONLY, follow_links=False)
        except beneath.Outside:
            os.close(root)
            raise SubmissionRefused(
                f"the artifact {'/'.join(parts) or '.'!r} changed into a symbolic link while "
                "it was frozen"
            ) from None
        except BaseException:
            os.close(root)
            raise
        aliases = tuple(a for a in (workdir, str(workspace)) if a)
        return cls(fd, os.fstat(fd), parts, root, aliases)

    def where(self, parts: tuple[str, ...]) -> str:
        return "/".join((*self.parts, *parts))

    def link_text(self, parent: tuple[str, ...], name: str, said: str) -> str:
        """What a link inside the artifact becomes in the copy: a relative link to the
        place it leads to (every further link followed, none out of the workspace).
        SubmissionRefused where that place is outside the artifact."""
        here = (*self.parts, *parent)
        resolved = self._resolve(here, said)
        top = len(self.parts)
        if resolved is None or resolved[:top] != self.parts:
            raise SubmissionRefused(
                f"the artifact is refused: {self.where((*parent, name))!r} is a symbolic link "
                f"to {said!r}, which is outside the submitted artifact (links out are never "
                "followed)"
            )
        return posixpath.relpath("/".join(resolved) or ".", "/".join(here) or ".")

    def _resolve(self, here: tuple[str, ...], said: str) -> tuple[str, ...] | None:
        """The workspace path `said` leads to from the folder `here`, or None out of it."""
        if said.startswith("/"):
            for alias in self.aliases:
                base = alias.rstrip("/")
                if said == base or said.startswith(base + "/"):
                    path = list(beneath.split(said[len(base) :]))
                    break
            else:
                return None
        else:
            path = [*here, *beneath.split(said)]
        try:
            where = beneath.locate(self.root, path, aliases=self.aliases)
        except beneath.Outside:
            return None
        except OSError:
            # Into nothing (a missing folder, a loop): where it says, taken as written.
            lexical = posixpath.normpath("/".join(path)) if path else "."
            if lexical == ".." or lexical.startswith("../"):
                return None
            return tuple(beneath.split(lexical))
        os.close(where.dir_fd)
        return tuple(p for p in where.parts if p != ".")

    def close(self) -> None:
        for fd in (self.fd, self.root):
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass
class _Item:
    """An entry of an ordered walk: its folder is open as `dir_fd` during the yield."""

    path: bytes
    """From the walk's root, the names' own bytes joined by '/'."""
    parent: tuple[str, ...]
    name: str
    st: os.stat_result
    dir_fd: int


def _ordered(root_fd: int) -> Iterator[_Item]:
    """Every entry below `root_fd` in the byte order of its path (the order the digest
    frames them in: `a`, `a-b`, then `a/x`), by folder descriptors, without recursion
    and without following a link. A folder's entries are read when it is reached."""
    dirs = trees.DirStack(root_fd)
    # Per folder: its path, its items still to visit (sort key, name, whether it is the
    # visit of a subfolder's contents), and the stat of each subfolder as first seen.
    frames: list[
        tuple[tuple[str, ...], bytes, list[tuple[bytes, str, bool]], dict[str, os.stat_result]]
    ] = []

    def listing(fd: int) -> list[tuple[bytes, str, bool]]:
        items: list[tuple[bytes, str, bool]] = []
        with os.scandir(fd) as found:
            for item in found:
                key = os.fsencode(item.name)
                items.append((key, item.name, False))
                try:
                    if item.is_dir(follow_symlinks=False):
                        items.append((key + b"/", item.name, True))
                except OSError:
                    continue
        items.sort(reverse=True)  # popped from the end: smallest first
        return items

    try:
        frames.append(((), b"", listing(dirs.top()), {}))
        while frames:
            parent, prefix, items, seen = frames[-1]
            if not items:
                frames.pop()
                if frames:
                    dirs.pop()
                continue
            key, name, contents = items.pop()
            fd = dirs.top()
            if not contents:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    seen[name] = st
                yield _Item(prefix + key, parent, name, st, fd)
                continue
            first = seen.pop(name, None)
            if first is None:
                continue  # it was not a folder when visited
            try:
                sub = os.open(name, trees.DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # turned into a link or gone: what it held is not walked
            if (os.fstat(sub).st_dev, os.fstat(sub).st_ino) != (first.st_dev, first.st_ino):
                os.close(sub)
                continue
            dirs.push_fd(name, sub)
            frames.append(((*parent, name), prefix + key, listing(sub), {}))
    finally:
        dirs.close()


@dataclass
class _Survey:
    """What a folder artifact holds, read before anything is copied, so the copy can
    be refused whole (a link out, a device, too big); the copy walks it again, judging
    each entry the same way, so nothing changed in between gets through either."""

    size: int = 0
    seen: set[tuple[int, int]] = field(default_factory=set)
    """Files with more than one hard link, counted once."""

    def add_file(self, st: os.stat_result) -> None:
        if st.st_nlink > 1:
            key = (st.st_dev, st.st_ino)
            if key in self.seen:
                return
            self.seen.add(key)
        self.size += st.st_size

    def walk(self, artifact: _Artifact) -> None:
        for item in _ordered(artifact.fd):
            mode = item.st.st_mode
            if stat.S_ISLNK(mode):
                said = os.readlink(item.name, dir_fd=item.dir_fd)
                artifact.link_text(item.parent, item.name, said)
            elif stat.S_ISREG(mode):
                self.add_file(item.st)
            elif not stat.S_ISDIR(mode):
                raise _odd(artifact, item)

    def copy(self, artifact: _Artifact, target: Path, max_bytes: int) -> None:
        """Copy the artifact into `target` (made here), folder by folder from descriptors."""
        target.mkdir()
        target_fd = os.open(target, trees.DIR_FLAGS)
        first: dict[tuple[int, int], tuple[tuple[str, ...], str]] = {}
        copied = 0
        try:
            with trees.DirStack(target_fd) as out, trees.DirStack(target_fd) as linked:
                for item in _ordered(artifact.fd):
                    mode = item.st.st_mode
                    at = out.move_to(item.parent)
                    if stat.S_ISDIR(mode):
                        os.mkdir(item.name, 0o777, dir_fd=at)
                    elif stat.S_ISLNK(mode):
                        said = os.readlink(item.name, dir_fd=item.dir_fd)
                        text = artifact.link_text(item.parent, item.name, said)
                        os.symlink(text, item.name, dir_fd=at)
                    elif stat.S_ISREG(mode):
                        key = (item.st.st_dev, item.st.st_ino)
                        if key in first:
                            where, name = first[key]
                            os.link(
                                name, item.name, src_dir_fd=linked.move_to(where), dst_dir_fd=at
                            )
                            continue
                        copied += _copy_in_folder(item, at, artifact)
                        if copied > max_bytes:
                            raise SubmissionRefused(
                                f"the artifact {artifact.where(()) or '.'!r} is refused: it "
                                "grew past the size it was checked at while it was copied"
                            )
                        if item.st.st_nlink > 1:
                            first[key] = (item.parent, item.name)
                    else:
                        raise _odd(artifact, item)
        finally:
            os.close(target_fd)


def _odd(artifact: _Artifact, item: _Item) -> SubmissionRefused:
    return SubmissionRefused(
        f"the artifact is refused: {artifact.where((*item.parent, item.name))!r} is not a "
        "regular file, folder or link"
    )


def _copy_in_folder(item: _Item, at: int, artifact: _Artifact) -> int:
    """Copy a file the walk is at into the copy's folder `at`; returns its size."""
    source = trees.open_in(item.dir_fd, item.name)
    if source is None:
        raise _odd(artifact, item)  # no longer a regular file
    try:
        st = os.fstat(source)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(item.name, flags, 0o600, dir_fd=at)
        try:
            size = trees.copy_sparse(source, out)
            os.fchmod(out, st.st_mode & 0o777)
        finally:
            os.close(out)
        return size
    finally:
        os.close(source)


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
        for item in _ordered(root):
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
    size = trees.hash_into(fd, h)
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


def _copy_file(fd: int, target: Path) -> None:
    """Copy an open file's data, leaving its holes as holes: a sparse file the agent made
    as large as it liked must not be written out as that many real zeros."""
    st = os.fstat(fd)
    out = os.open(
        target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        trees.copy_sparse(fd, out)
        os.fchmod(out, st.st_mode & 0o777)
    finally:
        os.close(out)
