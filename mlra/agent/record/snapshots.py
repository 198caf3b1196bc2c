"""Workspace history: what every agent step changed, kept outside the workspace.

After each tool call the controller scans the workspace and records what
changed in a `workspace_snapshot` event; the changed files' contents go into a
content-addressed store in the run folder (`snapshots/objects/<sha256>`), so
identical contents are kept once however often they recur. Files over a
threshold (checkpoints, datasets) are recorded by size and hash only: keeping a
copy of every checkpoint would cost more disk than the run itself.

From those events alone a replay shows any step's tree, file contents and
diffs, and a fork restores the workspace as it was (agent/record/workspace_history.py).

The workspace is the agent's, so every scan is bounded whatever it holds
(`SnapshotLimits`): the entries one scan walks, the files and bytes it hashes (a
file larger than what is left to read is recorded by size and modification time,
never read: a sparse 40 GB file costs a stat), the store's total size (past its
quota, files are recorded without their contents, and a notice says so once), and
the size of one event (what does not fit is counted in `left_out`, so replay and
fork say what they cannot show; smaller once the run's log nears its size budget,
agent/record/log_budget.py). The walk is by folder descriptors, without
recursion and without following a link (tools/sandbox/trees.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mlra import events as ev
from mlra.tools.sandbox import beneath, trees

SNAPSHOTS_DIR = "snapshots"
MB = 1024 * 1024
DEFAULT_MAX_STORED_BYTES = 8 * MB
DEFAULT_QUOTA_BYTES = 1024 * MB
NO_QUOTA = 2**62
SKIP_DIRS = frozenset({".git", "__pycache__", ".ipynb_checkpoints"})
"""Git's own object store and caches: large, many and rebuilt by tools anyway."""
MAX_PATH_CHARS = 16_384
"""A path longer than this (a folder thousands of levels deep) is skipped and counted."""


@dataclass(frozen=True)
class SnapshotLimits:
    """What one run's snapshots may cost (the run's config sets the first two)."""

    max_stored_bytes: int = DEFAULT_MAX_STORED_BYTES
    """Files larger than this are recorded by hash (and size) only."""
    quota_bytes: int = DEFAULT_QUOTA_BYTES
    """The snapshot store's total on the disk (each object counted by the blocks it
    takes, at least one); past it contents are no longer kept."""
    scan_entries: int = 100_000
    """Entries one scan walks; what sorts after is not looked at."""
    scan_files: int = 5_000
    """Files one scan hashes; other changed files are recorded by size and time."""
    scan_bytes: int = 1024 * MB
    """Bytes one scan reads to hash; a file larger than what is left is not read."""
    event_bytes: int = 256 * 1024
    """Paths one event lists, in JSON bytes; the rest is counted in `left_out`."""


class SnapshotStore:
    """Content-addressed copies of workspace files, in the run folder."""

    def __init__(self, run_dir: Path) -> None:
        self.objects = run_dir / SNAPSHOTS_DIR / "objects"
        self._used: int | None = None
        self._block: int | None = None

    def cost(self, size: int, blocks: int = 0) -> int:
        """What an object of `size` bytes takes of the run folder's disk: whole blocks,
        at least one (and an inode). Counting apparent sizes let thousands of distinct
        12-byte files a step (4 KiB each on ext4) fill the host's disk and inodes while
        the store thought it held a few megabytes. `blocks` is what a stored one
        holds (st_blocks), where the file system says more."""
        if self._block is None:
            try:
                self._block = max(os.statvfs(self._existing()).f_frsize, 512)
            except OSError:
                self._block = 4096
        block = self._block
        return max(max(-(-size // block), 1) * block, blocks * 512)

    def _existing(self) -> Path:
        """The store's folder, or the nearest one above it that exists (for statvfs)."""
        path = self.objects
        while not path.exists() and path != path.parent:
            path = path.parent
        return path

    def path(self, sha: str) -> Path:
        return self.objects / sha[:2] / sha

    def has(self, sha: str) -> bool:
        return self.path(sha).exists()

    def used_bytes(self) -> int:
        """The store's size now: counted once (a resumed or forked run's store holds its
        past), then kept up to date as objects are added."""
        if self._used is None:
            total = 0
            try:
                with os.scandir(self.objects) as shards:
                    for shard in shards:
                        if not shard.is_dir(follow_symlinks=False):
                            continue
                        with os.scandir(shard.path) as items:
                            for item in items:
                                try:
                                    st = item.stat(follow_symlinks=False)
                                    total += self.cost(st.st_size, st.st_blocks)
                                except OSError:
                                    continue
            except OSError:
                pass
            self._used = total
        return self._used

    def ingest(self, fd: int, keep: bool, size: int) -> tuple[str | None, bool]:
        """Hash an open file of `size` bytes and, if `keep`, store it, reading it once:
        the copy kept is the content hashed, whatever happens to the file's name
        meanwhile. Returns the sha256 and whether it is stored; the sha256 is None
        where the file held more than `size` bytes (it grew as it was read: its content
        is nothing a later look would find)."""
        digest = hashlib.sha256()
        tmp: str | None = None
        out = None
        if keep:
            try:
                self.objects.mkdir(parents=True, exist_ok=True)
                tmp_fd, tmp = tempfile.mkstemp(dir=self.objects, prefix=".tmp-")
                out = os.fdopen(tmp_fd, "wb")
            except OSError:
                keep = False
        try:
            read = 0
            while read <= size:
                chunk = os.read(fd, min(trees.CHUNK, size + 1 - read))
                if not chunk:
                    break
                read += len(chunk)
                digest.update(chunk)
                if out is not None:
                    try:
                        out.write(chunk)
                    except OSError:
                        out.close()
                        out, keep = None, False
            if read > size:
                return None, False
            sha = digest.hexdigest()
            if out is not None:
                out.close()
                out = None
                target = self.path(sha)
                if not target.exists():
                    assert tmp is not None  # made with `out`
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(tmp, target)
                    self._used = self.used_bytes() + self.cost(read)
            return sha, keep
        finally:
            if out is not None:
                out.close()
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)

    def get(self, sha: str, limit: int = 64 * MB) -> bytes | None:
        """An object's bytes, or None (missing, or over `limit`: a store made with a
        larger threshold than a display wants to hold)."""
        try:
            fd = os.open(self.path(sha), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return trees.read_bounded(fd, limit)
        except (OSError, trees.TooLarge):
            return None
        finally:
            os.close(fd)


@dataclass(slots=True)
class _Seen:
    size: int
    mtime_ns: int
    sha: str | None


@dataclass
class _Scan:
    """One scan's spending and what it could not do."""

    files: int
    bytes: int
    unhashed: int = 0
    changing: int = 0
    too_long: int = 0
    over_quota: int = 0


class WorkspaceScanner:
    """Finds what changed in the workspace since the last scan.

    A file is re-hashed only when its size or modification time changed, so a
    scan of an unchanged workspace costs one `stat` per entry.
    """

    def __init__(
        self,
        workspace: Path,
        store: SnapshotStore,
        *,
        max_stored_bytes: int = DEFAULT_MAX_STORED_BYTES,
        limits: SnapshotLimits | None = None,
    ) -> None:
        self.workspace = workspace
        self.store = store
        self.limits = limits or SnapshotLimits(max_stored_bytes=max_stored_bytes)
        self.index: dict[str, _Seen] = {}
        self.notices: list[str] = []
        """Things the user should hear once (the store's quota reached), for the run's log."""
        self._quota_noted = False
        self._last_notes: list[str] = []
        """What the last event said it left out: a scan that changes nothing and leaves
        out the same (a workspace past the walk's bound) records no event for it."""

    @property
    def max_stored_bytes(self) -> int:
        return self.limits.max_stored_bytes

    def load(self, snapshots: Iterable[ev.WorkspaceSnapshot]) -> None:
        """Take up the index a recorded run had reached (for resume and fork)."""
        for snap in snapshots:
            for change in snap.changed:
                self.index[change.path] = _Seen(change.size, change.mtime_ns, change.sha256)
            for path in snap.removed:
                self.index.pop(path, None)

    def scan(self, step: int, *, listed_bytes: int | None = None) -> ev.WorkspaceSnapshot | None:
        """The changes since the last scan as an event, or None when nothing changed.
        `listed_bytes`: the event lists fewer paths than `event_bytes`, since the run's
        log nears its size budget (agent/record/log_budget.py)."""
        limits = self.limits
        shorter = listed_bytes is not None and listed_bytes < limits.event_bytes
        bound = listed_bytes if listed_bytes is not None and shorter else limits.event_bytes
        spend = _Scan(files=limits.scan_files, bytes=limits.scan_bytes)
        stats = trees.WalkStats()
        found: set[str] = set()
        changed: list[ev.FileChange] = []
        try:
            root = beneath.open_root(self.workspace)
        except OSError:
            root = None
        if root is not None:
            try:
                for entry in trees.walk(
                    root,
                    enter=lambda e: e.name not in SKIP_DIRS,
                    max_entries=limits.scan_entries,
                    stats=stats,
                ):
                    if not stat.S_ISREG(entry.st.st_mode):
                        continue
                    rel = entry.rel
                    if len(rel) > MAX_PATH_CHARS:
                        spend.too_long += 1
                        continue
                    found.add(rel)
                    seen = self.index.get(rel)
                    st = entry.st
                    if seen and seen.size == st.st_size and seen.mtime_ns == st.st_mtime_ns:
                        continue
                    change = self._record(entry, spend)
                    if change is None:
                        found.discard(rel)
                        continue
                    self.index[rel] = _Seen(change.size, change.mtime_ns, change.sha256)
                    if seen and seen.sha is not None and seen.sha == change.sha256:
                        continue  # touched, not changed
                    changed.append(change)
            finally:
                os.close(root)
        removed = self._removed(found, stats)
        for rel in removed:
            del self.index[rel]
        left_out = self._left_out(stats, spend)
        listed, unlisted = _within(changed, removed, bound)
        cut = unlisted != (0, 0)
        if cut:
            left_out.changed, left_out.removed = unlisted
            why = "the run's log is near its size budget, so " if shorter else ""
            left_out.notes.append(
                f"{unlisted[0]:,} changed and {unlisted[1]:,} removed files are not listed: "
                f"{why}one snapshot event lists at most {bound // 1024:,} KiB of paths"
            )
        repeated = left_out.notes == self._last_notes
        self._last_notes = left_out.notes
        if not changed and not removed and (repeated or not left_out.notes):
            return None  # nothing new, not even what could not be looked at
        return ev.WorkspaceSnapshot(
            step=step,
            changed=listed[0],
            removed=listed[1],
            left_out=left_out if left_out.notes else None,
            log_budget_bytes=bound if cut and shorter else None,
        )

    def _record(self, entry: trees.Entry, spend: _Scan) -> ev.FileChange | None:
        """Hash (and store, if small and the store has room) a file the walk is at,
        opened in its folder without following a link; within the scan's budget."""
        fd = trees.open_in(entry.dir_fd, entry.name)
        if fd is None:
            return None  # gone, or no longer a file
        try:
            st = os.fstat(fd)
            size = st.st_size
            if spend.files <= 0 or size > spend.bytes:
                spend.unhashed += 1
                return ev.FileChange(
                    path=entry.rel, size=size, sha256=None, stored=False, mtime_ns=st.st_mtime_ns
                )
            spend.files -= 1
            spend.bytes -= size
            small = size <= self.limits.max_stored_bytes
            room = self.store.used_bytes() + self.store.cost(size) <= self.limits.quota_bytes
            if small and not room:
                spend.over_quota += 1
                self._quota_reached()
            sha, stored = self.store.ingest(fd, keep=small and room, size=size)
            if sha is None:
                spend.changing += 1
            elif small and not stored:
                stored = self.store.has(sha)  # the same content, kept before
            return ev.FileChange(
                path=entry.rel, size=size, sha256=sha, stored=stored, mtime_ns=st.st_mtime_ns
            )
        except OSError:
            return None
        finally:
            os.close(fd)

    def _quota_reached(self) -> None:
        if self._quota_noted:
            return
        self._quota_noted = True
        self.notices.append(
            f"the run's workspace snapshots reached their quota of "
            f"{self.limits.quota_bytes / MB:,.0f} MiB (snapshot_quota_mb): from now on "
            "changed files are recorded by size and hash, without their contents, so a "
            "replay cannot show them and a fork restores them only from the run's workspace"
        )

    def _removed(self, found: set[str], stats: trees.WalkStats) -> list[str]:
        """Indexed files the walk did not find where it looked: not those past where it
        stopped, nor those in a folder it could not read (they may well be there)."""
        gone = []
        for rel in self.index:
            if rel in found:
                continue
            parts = tuple(rel.split("/"))
            if stats.truncated and parts > stats.last:
                continue
            if (stats.unreadable or stats.partly) and stats.maybe_unread(parts):
                continue
            gone.append(rel)
        gone.sort()
        return gone

    def _left_out(self, stats: trees.WalkStats, spend: _Scan) -> ev.SnapshotLeftOut:
        out = ev.SnapshotLeftOut()
        notes = out.notes
        if stats.truncated:
            notes.append(
                f"the scan stopped after {stats.entries:,} entries (its bound): what sorts "
                "after was not looked at"
            )
        if stats.unreadable:
            out.skipped += stats.unreadable
            notes.append(f"{stats.unreadable:,} folder(s) could not be read or changed while read")
        if spend.too_long:
            out.skipped += spend.too_long
            notes.append(
                f"{spend.too_long:,} file(s) with paths over {MAX_PATH_CHARS:,} characters "
                "not recorded"
            )
        if spend.unhashed:
            notes.append(
                f"{spend.unhashed:,} changed file(s) recorded by size and time only, unread: "
                f"one scan reads at most {self.limits.scan_files:,} files and "
                f"{self.limits.scan_bytes / MB:,.0f} MiB"
            )
        if spend.changing:
            notes.append(f"{spend.changing:,} file(s) grew while read: recorded without a hash")
        if spend.over_quota:
            notes.append(
                f"{spend.over_quota:,} file(s) recorded without contents: the snapshot store "
                f"is at its quota of {self.limits.quota_bytes / MB:,.0f} MiB"
            )
        return out


def _within(
    changed: list[ev.FileChange], removed: list[str], budget: int
) -> tuple[tuple[list[ev.FileChange], list[str]], tuple[int, int]]:
    """As many changes, then removals, as fit in `budget` bytes of the event's JSON;
    and how many of each did not."""
    used = 0
    listed: list[ev.FileChange] = []
    for change in changed:
        used += len(json.dumps(change.path)) + 160  # the other fields' JSON
        if used > budget:
            break
        listed.append(change)
    gone: list[str] = []
    if len(listed) == len(changed):
        for rel in removed:
            used += len(json.dumps(rel)) + 1
            if used > budget:
                break
            gone.append(rel)
    return (listed, gone), (len(changed) - len(listed), len(removed) - len(gone))
