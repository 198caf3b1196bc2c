"""Opening workspace paths host-side without ever following a link out of the workspace.

mlra reads and writes workspace files on the host, often as root, while processes
the agent left running (a `setsid` daemon in a Docker container) may change the
workspace at the same moment. Checking a path and then opening it by name is a
race: between the two a folder can become a link to `/root`. So paths are walked
one component at a time from an open descriptor of the workspace, each folder
opened relative to the one before with O_NOFOLLOW, and the last component opened
with O_NOFOLLOW too. A link met on the way is read and its target walked the same
way, from the workspace's root when absolute (only where it names a place inside
the workspace) and from where it stands when relative; a `..` never climbs above
the root. Nothing here opens a path by name from `/`, so whatever the workspace
looks like at any instant, what is opened lies inside it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from mlra.tools.sandbox.dir_stack import DIR_FLAGS, FILE_FLAGS, DirStack

__all__ = ["DIR_FLAGS", "FILE_FLAGS", "Located", "Outside", "locate", "open_beneath", "open_root"]

MAX_LINKS = 40
"""Links followed in one walk before giving up, as the kernel's ELOOP limit."""
MAX_RACES = 16
"""Times an entry may change under a walk (a folder turning into a link) before giving up."""


Created = Callable[[int], None]
"""Told the descriptor of each folder and file a walk creates (to hand it to a user)."""


class Outside(Exception):
    """The path, or a link on it, leads out of the workspace."""


def _lstat(name: str, dir_fd: int) -> os.stat_result:
    """lstat relative to a folder descriptor (a seam the race tests hook into)."""
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def split(path: str) -> list[str]:
    """The components of a relative path; empty ones and '.' are dropped."""
    return [p for p in path.split("/") if p not in ("", ".")]


@dataclass
class Located:
    """A path walked to its last component: the folder holding it, open, and its name."""

    dir_fd: int
    """Owned by the caller, who closes it."""
    name: str
    """One component, never '..'; '.' when the path is the walk's root itself."""
    parts: tuple[str, ...]
    """The path from the root with links resolved: the folders walked, then `name`."""

    @property
    def rel(self) -> str:
        return "/".join(p for p in self.parts if p != ".") or "."


class _Walk:
    """The folders walked so far, as open descriptors (a bounded number of them however
    deep the path: DirStack), and what remains to walk."""

    def __init__(self, root_fd: int, parts: Iterable[str]) -> None:
        self.dirs = DirStack(root_fd)
        self.pending: list[str] = list(reversed(split("/".join(parts))))
        self.links = 0
        self.races = 0

    @property
    def fd(self) -> int:
        return self.dirs.top()

    def names(self) -> list[str]:
        return list(self.dirs.parts)

    def push(self, name: str, fd: int) -> None:
        self.dirs.push_fd(name, fd)

    def push_path(self, path: str) -> None:
        self.pending.extend(reversed(split(path)))

    def up(self) -> None:
        if not self.dirs.depth:
            raise Outside
        self.dirs.pop()

    def to_root(self) -> None:
        while self.dirs.depth:
            self.dirs.pop()

    def raced(self, name: str) -> None:
        """An entry changed between its lstat and its open: look at it again."""
        self.races += 1
        if self.races > MAX_RACES:
            raise OSError(errno.EAGAIN, "the path kept changing while it was opened", name)
        self.pending.append(name)

    def close(self) -> None:
        self.dirs.close()


def locate(
    root_fd: int,
    parts: Iterable[str],
    *,
    aliases: Sequence[str] = (),
    follow_last: bool = True,
    follow_links: bool = True,
    make_parents: bool = False,
    created: Created | None = None,
) -> Located:
    """Walk `parts` from `root_fd` to the folder holding the last component.

    Links on the way are followed only while they stay beneath the root: an
    absolute target is taken as inside the workspace when it starts with one of
    `aliases` (the workspace as commands see it, its host path) and refused
    otherwise. With `follow_links` false any link on the way is refused. The last
    component is followed too when it is a link and `follow_last` is true; it may
    not exist. With `make_parents` missing folders are created on the way.

    Raises Outside, FileNotFoundError for a missing folder on the way,
    NotADirectoryError where a file stands in for a folder.
    """
    walk = _Walk(root_fd, parts)
    try:
        while walk.pending:
            name = walk.pending.pop()
            if name == "..":
                walk.up()
                continue
            last = not walk.pending
            try:
                st = _lstat(name, walk.fd)
            except FileNotFoundError:
                if last:
                    return _located(walk, name)
                if not make_parents:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=walk.fd)
                    if created is not None:
                        fd = os.open(name, DIR_FLAGS, dir_fd=walk.fd)
                        try:
                            created(fd)
                        finally:
                            os.close(fd)
                walk.pending.append(name)
                continue
            if stat.S_ISLNK(st.st_mode):
                if last and not follow_last:
                    return _located(walk, name)
                if not follow_links:
                    raise Outside
                walk.links += 1
                if walk.links > MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
                try:
                    target = os.readlink(name, dir_fd=walk.fd)
                except OSError:
                    walk.raced(name)  # no longer a link
                    continue
                if target.startswith("/"):
                    walk.to_root()
                    target = _inside(target, aliases)
                walk.push_path(target)
                continue
            if last:
                return _located(walk, name)
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), name)
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=walk.fd)
            except (FileNotFoundError, NotADirectoryError):
                walk.raced(name)
                continue
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                walk.raced(name)  # became a link since its lstat
                continue
            walk.push(name, fd)
        # Only '..' or nothing was left: the path is a folder already open.
        return _located(walk, ".")
    finally:
        walk.close()


def _located(walk: _Walk, name: str) -> Located:
    return Located(os.dup(walk.fd), name, (*walk.names(), name))


def _inside(target: str, aliases: Sequence[str]) -> str:
    """An absolute link target as a path below the workspace, or Outside."""
    for alias in aliases:
        base = alias.rstrip("/")
        if target == base or target.startswith(base + "/"):
            return target[len(base) :]
    raise Outside


def open_beneath(
    root_fd: int,
    parts: Iterable[str],
    flags: int,
    mode: int = 0o666,
    *,
    aliases: Sequence[str] = (),
    follow_links: bool = True,
    make_parents: bool = False,
    make_dir: bool = False,
    created: Created | None = None,
) -> tuple[int, str]:
    """Open a path beneath `root_fd`; returns the descriptor and the path walked.

    `flags` are os.open's; O_NOFOLLOW is always added, so a last component that
    turns into a link after it was looked at fails to open and is looked at again.
    With O_CREAT a file created here is reported to `created`; with `make_dir` a
    missing last component is made a folder and opened as one.
    """
    parts = list(parts)
    for _ in range(MAX_RACES):
        where = locate(
            root_fd,
            parts,
            aliases=aliases,
            follow_links=follow_links,
            make_parents=make_parents,
            created=created,
        )
        try:
            fd = _open_last(where, flags, mode, make_dir, created)
        except _Raced:
            continue
        finally:
            os.close(where.dir_fd)
        return fd, where.rel
    raise OSError(errno.EAGAIN, "the path kept changing while it was opened", "/".join(parts))


class _Raced(Exception):
    pass


def _open_last(
    where: Located, flags: int, mode: int, make_dir: bool, created: Created | None
) -> int:
    name, dir_fd = where.name, where.dir_fd
    try:
        if make_dir:
            try:
                os.mkdir(name, 0o777, dir_fd=dir_fd)
            except FileExistsError:
                return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
            fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
            if created is not None:
                created(fd)
            return fd
        if flags & os.O_CREAT and name != ".":
            try:
                fd = os.open(name, flags | FILE_FLAGS | os.O_EXCL, mode, dir_fd=dir_fd)
            except FileExistsError:
                try:
                    return os.open(name, (flags & ~os.O_CREAT) | FILE_FLAGS, dir_fd=dir_fd)
                except FileNotFoundError:
                    raise _Raced from None  # removed since: create it after all
            if created is not None:
                created(fd)
            return fd
        return os.open(name, flags | FILE_FLAGS, mode, dir_fd=dir_fd)
    except OSError as exc:
        # O_NOFOLLOW refuses a link that replaced what was looked at (ELOOP; ENOTDIR
        # with O_DIRECTORY): walk the path again, which follows it only if it stays inside.
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(name, dir_fd)):
            raise _Raced from None
        raise


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(_lstat(name, dir_fd).st_mode)
    except OSError:
        return False


def open_root(path: str | os.PathLike[str]) -> int:
    """A descriptor of the workspace itself (its own path is the host's, trusted)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
