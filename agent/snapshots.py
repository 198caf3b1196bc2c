"""Workspace history: what every agent step changed, kept outside the workspace.

After each tool call the controller scans the workspace and records what
changed in a `workspace_snapshot` event; the changed files' contents go into a
content-addressed store in the run folder (`snapshots/objects/<sha256>`), so
identical contents are kept once however often they recur. Files over a
threshold (checkpoints, datasets) are recorded by size and hash only: keeping a
copy of every checkpoint would cost more disk than the run itself.

From those events alone a replay shows any step's tree, file contents and
diffs, and a fork restores the workspace as it was.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mlra import events as ev
from mlra.tools.sandbox import beneath
from mlra.tools.sandbox.base import FileInfo

SNAPSHOTS_DIR = "snapshots"
DEFAULT_MAX_STORED_BYTES = 8 * 1024 * 1024
SKIP_DIRS = frozenset({".git", "__pycache__", ".ipynb_checkpoints"})
"""Git's own object store and caches: large, many and rebuilt by tools anyway."""


class SnapshotStore:
    """Content-addressed copies of workspace files, in the run folder."""

    def __init__(self, run_dir: Path) -> None:
        self.objects = run_dir / SNAPSHOTS_DIR / "objects"

    def path(self, sha: str) -> Path:
        return self.objects / sha[:2] / sha

    def has(self, sha: str) -> bool:
        return self.path(sha).exists()

    def ingest(self, fd: int, keep: bool) -> tuple[str, bool]:
        """Hash an open file and, if `keep`, store it, reading it once: the copy kept is
        the content hashed, whatever happens to the file's name meanwhile. Returns the
        sha256 and whether it is stored."""
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
            while chunk := os.read(fd, 1 << 20):
                digest.update(chunk)
                if out is not None:
                    try:
                        out.write(chunk)
                    except OSError:
                        out.close()
                        out, keep = None, False
            sha = digest.hexdigest()
            if out is not None:
                out.close()
                out = None
                target = self.path(sha)
                if not target.exists():
                    assert tmp is not None  # made with `out`
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(tmp, target)
            return sha, keep
        finally:
            if out is not None:
                out.close()
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)

    def get(self, sha: str) -> bytes | None:
        try:
            return self.path(sha).read_bytes()
        except OSError:
            return None


@dataclass
class _Seen:
    size: int
    mtime_ns: int
    sha: str | None


class WorkspaceScanner:
    """Finds what changed in the workspace since the last scan.

    A file is re-hashed only when its size or modification time changed, so a
    scan of an unchanged workspace costs one `stat` per file.
    """

    def __init__(
        self,
        workspace: Path,
        store: SnapshotStore,
        *,
        max_stored_bytes: int = DEFAULT_MAX_STORED_BYTES,
    ) -> None:
        self.workspace = workspace
        self.store = store
        self.max_stored_bytes = max_stored_bytes
        self.index: dict[str, _Seen] = {}

    def load(self, snapshots: Iterable[ev.WorkspaceSnapshot]) -> None:
        """Take up the index a recorded run had reached (for resume and fork)."""
        for snap in snapshots:
            for change in snap.changed:
                self.index[change.path] = _Seen(change.size, change.mtime_ns, change.sha256)
            for path in snap.removed:
                self.index.pop(path, None)

    def _walk(self) -> dict[str, os.stat_result]:
        """Every regular file by lstat; links are skipped, never followed.

        By folder descriptors (os.fwalk), so a folder the agent turns into a link
        while the walk goes on is not entered.
        """
        found: dict[str, os.stat_result] = {}
        if not self.workspace.is_dir():
            return found
        for root, dirs, files, dir_fd in os.fwalk(self.workspace, follow_symlinks=False):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            rel_root = os.path.relpath(root, self.workspace)
            prefix = "" if rel_root == "." else rel_root.replace(os.sep, "/") + "/"
            for name in files:
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue  # deleted while we looked
                if stat.S_ISREG(st.st_mode):
                    found[prefix + name] = st
        return found

    def _ingest(self, rel: str) -> tuple[os.stat_result, str, bool] | None:
        """Hash (and store, if small) a workspace file opened beneath the workspace with
        no link followed: the walk may be long past when the agent swaps a folder."""
        try:
            root = beneath.open_root(self.workspace)
        except OSError:
            return None
        try:
            fd, _ = beneath.open_beneath(root, rel.split("/"), os.O_RDONLY, follow_links=False)
        except (OSError, beneath.Outside):
            return None
        finally:
            os.close(root)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            sha, stored = self.store.ingest(fd, keep=st.st_size <= self.max_stored_bytes)
            return st, sha, stored
        except OSError:
            return None
        finally:
            os.close(fd)

    def scan(self, step: int) -> ev.WorkspaceSnapshot | None:
        """The changes since the last scan as an event, or None when nothing changed."""
        found = self._walk()
        changed: list[ev.FileChange] = []
        for rel, st in sorted(found.items()):
            seen = self.index.get(rel)
            if seen and seen.size == st.st_size and seen.mtime_ns == st.st_mtime_ns:
                continue
            opened = self._ingest(rel)
            if opened is None:
                continue
            st, sha, stored = opened
            self.index[rel] = _Seen(st.st_size, st.st_mtime_ns, sha)
            if seen and seen.sha == sha:
                continue  # touched, not changed
            changed.append(
                ev.FileChange(
                    path=rel, size=st.st_size, sha256=sha, stored=stored, mtime_ns=st.st_mtime_ns
                )
            )
        removed = sorted(set(self.index) - set(found))
        for rel in removed:
            del self.index[rel]
        if not changed and not removed:
            return None
        return ev.WorkspaceSnapshot(step=step, changed=changed, removed=removed)


class WorkspaceHistory:
    """The workspace as it was after any event of a recorded run.

    `files_at(seq)` folds the snapshot events up to that sequence number; a
    replay asks for the same few points again and again, so the snapshot
    events are kept in order and folded on demand (they are few next to the
    run's other events).
    """

    def __init__(self, events: Iterable[ev.Event], store: SnapshotStore) -> None:
        self.store = store
        self.snapshots: list[ev.WorkspaceSnapshot] = [
            e for e in events if isinstance(e, ev.WorkspaceSnapshot)
        ]
        self._times: dict[int, float] = {s.seq: s.ts for s in self.snapshots}

    def files_at(self, seq: int | None = None) -> dict[str, tuple[ev.FileChange, float]]:
        """path -> (its latest recorded version, when it was recorded) as of `seq`."""
        files: dict[str, tuple[ev.FileChange, float]] = {}
        for snap in self.snapshots:
            if seq is not None and snap.seq > seq:
                break
            for change in snap.changed:
                files[change.path] = (change, snap.ts)
            for path in snap.removed:
                files.pop(path, None)
        return files

    def tree_at(self, seq: int | None = None) -> list[FileInfo]:
        files = self.files_at(seq)
        infos: dict[str, FileInfo] = {}
        for path, (change, ts) in files.items():
            infos[path] = FileInfo(path=path, is_dir=False, size=change.size, mtime=ts)
            parent = Path(path).parent
            while parent != Path("."):
                key = parent.as_posix()
                if key not in infos:
                    infos[key] = FileInfo(path=key, is_dir=True, size=0, mtime=ts)
                parent = parent.parent
        return sorted(infos.values(), key=lambda i: i.path)

    def read_at(self, path: str, seq: int | None = None) -> bytes | None:
        entry = self.files_at(seq).get(path)
        if entry is None or entry[0].sha256 is None:
            return None
        return self.store.get(entry[0].sha256)

    def changed_at(self, seq: int) -> ev.WorkspaceSnapshot | None:
        """The snapshot recorded at exactly this event, if any."""
        for snap in self.snapshots:
            if snap.seq == seq:
                return snap
        return None

    def diff(self, path: str, seq: int) -> str:
        """A unified diff of `path` between the step before `seq` and `seq`."""
        before_seq = max((s.seq for s in self.snapshots if s.seq < seq), default=0)
        old = self.read_at(path, before_seq) if before_seq else None
        new = self.read_at(path, seq)
        if old is None and new is None:
            return ""
        try:
            old_lines = (old or b"").decode().splitlines(keepends=True)
            new_lines = (new or b"").decode().splitlines(keepends=True)
        except UnicodeDecodeError:
            return f"binary file {path} changed"
        return "".join(difflib.unified_diff(old_lines, new_lines, f"a/{path}", f"b/{path}", n=3))

    def restore(self, seq: int, target: Path, *, fallbacks: Iterable[Path] = ()) -> list[str]:
        """Write the workspace as of `seq` into `target`; returns files it could not restore.

        Files kept by hash only are looked for, by hash, at the same path under
        each fallback folder (the source run's workspace, the task's starter files).
        """
        missing: list[str] = []
        roots = [Path(f) for f in fallbacks]
        for path, (change, _) in sorted(self.files_at(seq).items()):
            dest = target / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            if change.sha256 and self.store.has(change.sha256):
                shutil.copyfile(self.store.path(change.sha256), dest)
                continue
            for root in roots:
                if _copy_if_same(root, path, change, dest):
                    break
            else:
                missing.append(path)
        return missing


def _copy_if_same(root: Path, path: str, change: ev.FileChange, dest: Path) -> bool:
    """Copy `path` under `root` to `dest` if it is the recorded file. Opened beneath
    `root` (another run's workspace, whose agent may have left processes running), so
    a link or a swapped folder there cannot make a fork copy a host file."""
    try:
        root_fd = beneath.open_root(root)
    except OSError:
        return False
    try:
        fd, _ = beneath.open_beneath(root_fd, path.split("/"), os.O_RDONLY, aliases=(str(root),))
    except (OSError, beneath.Outside):
        return False
    finally:
        os.close(root_fd)
    with os.fdopen(fd, "rb") as source:
        st = os.fstat(source.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size != change.size:
            return False
        if change.sha256 is not None:
            digest = hashlib.sha256()
            while chunk := source.read(1 << 20):
                digest.update(chunk)
            if digest.hexdigest() != change.sha256:
                return False
            source.seek(0)
        with open(dest, "wb") as target:
            shutil.copyfileobj(source, target)
    return True
