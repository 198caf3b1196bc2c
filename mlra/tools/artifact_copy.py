"""Copying a submitted artifact out of the workspace, and what may refuse it.

The copy is made by folder descriptors beneath the workspace (tools/sandbox/beneath.py,
tools/sandbox/trees.py): a survey first walks the artifact in a fixed order, sizing it and
refusing what cannot be copied honestly (a link out of the artifact, a device, a FIFO)
before anything is written; then the copy keeps links inside the artifact as relative
links, hard links linked and holes as holes. Every refusal is a SubmissionRefused with
one line. The freezing that uses it, and the digest of the copy, are in
tools/submission.py.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from shutil import disk_usage

from mlra.tools.sandbox import beneath, sparse_files, trees
from mlra.tools.sandbox.dir_stack import DirStack

GB = 1_000_000_000
KEEP_FREE_BYTES = GB
KEEP_FREE_FRACTION = 0.05
"""The copy must leave this much of the run folder's disk free, whichever is more: a
host whose disk fills up cannot write the log or run the evaluator."""


class SubmissionRefused(Exception):
    """The artifact cannot be frozen (missing, outside the workspace, a link out): one line."""


def _amount(n: int) -> str:
    if n >= GB:
        return f"{n / GB:,.1f} GB"
    if n >= 1_000_000:
        return f"{n / 1_000_000:,.1f} MB"
    return f"{n:,} bytes"


def check_room(rel: str, size: int, dest_dir: Path, max_bytes: int) -> None:
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
class OpenArtifact:
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
    def open(cls, workspace: Path, source: Path, workdir: str | None) -> OpenArtifact:
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
class Item:
    """An entry of an ordered walk: its folder is open as `dir_fd` during the yield."""

    path: bytes
    """From the walk's root, the names' own bytes joined by '/'."""
    parent: tuple[str, ...]
    name: str
    st: os.stat_result
    dir_fd: int


def ordered_walk(root_fd: int) -> Iterator[Item]:
    """Every entry below `root_fd` in the byte order of its path (the order the digest
    frames them in: `a`, `a-b`, then `a/x`), by folder descriptors, without recursion
    and without following a link. A folder's entries are read when it is reached."""
    dirs = DirStack(root_fd)
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
                yield Item(prefix + key, parent, name, st, fd)
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
class Survey:
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

    def walk(self, artifact: OpenArtifact) -> None:
        for item in ordered_walk(artifact.fd):
            mode = item.st.st_mode
            if stat.S_ISLNK(mode):
                said = os.readlink(item.name, dir_fd=item.dir_fd)
                artifact.link_text(item.parent, item.name, said)
            elif stat.S_ISREG(mode):
                self.add_file(item.st)
            elif not stat.S_ISDIR(mode):
                raise _odd(artifact, item)

    def copy(self, artifact: OpenArtifact, target: Path, max_bytes: int) -> None:
        """Copy the artifact into `target` (made here), folder by folder from descriptors."""
        target.mkdir()
        target_fd = os.open(target, trees.DIR_FLAGS)
        first: dict[tuple[int, int], tuple[tuple[str, ...], str]] = {}
        copied = 0
        try:
            with DirStack(target_fd) as out, DirStack(target_fd) as linked:
                for item in ordered_walk(artifact.fd):
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


def _odd(artifact: OpenArtifact, item: Item) -> SubmissionRefused:
    return SubmissionRefused(
        f"the artifact is refused: {artifact.where((*item.parent, item.name))!r} is not a "
        "regular file, folder or link"
    )


def _copy_in_folder(item: Item, at: int, artifact: OpenArtifact) -> int:
    """Copy a file the walk is at into the copy's folder `at`; returns its size."""
    source = trees.open_in(item.dir_fd, item.name)
    if source is None:
        raise _odd(artifact, item)  # no longer a regular file
    try:
        st = os.fstat(source)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(item.name, flags, 0o600, dir_fd=at)
        try:
            size = sparse_files.copy_sparse(source, out)
            os.fchmod(out, st.st_mode & 0o777)
        finally:
            os.close(out)
        return size
    finally:
        os.close(source)


def copy_file(fd: int, target: Path) -> None:
    """Copy an open file's data, leaving its holes as holes: a sparse file the agent made
    as large as it liked must not be written out as that many real zeros."""
    st = os.fstat(fd)
    out = os.open(
        target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        sparse_files.copy_sparse(fd, out)
        os.fchmod(out, st.st_mode & 0o777)
    finally:
        os.close(out)
