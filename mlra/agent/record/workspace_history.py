"""A recorded run's workspace read back from its `workspace_snapshot` events.

The scanner (agent/record/snapshots.py) writes what each step changed into the events and
the content-addressed store; this side only reads them: any step's tree, a file's
contents and its diff for replay, and the whole workspace restored for a fork. A file
recorded without its contents (too large, or past the store's quota) is copied from
the run's own workspace or another fallback only where it is still the very file that
was recorded, opened beneath that folder, so a fork never copies a host file in its place.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.snapshots import SnapshotStore
from mlra.tools.sandbox import beneath, sparse_files
from mlra.tools.sandbox.base import FileInfo
from mlra.tools.sandbox.dir_stack import DirStack


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
        for path, (change, recorded) in files.items():
            # The file's own time as the scan saw it, as the live Files pane shows it (the
            # scan's time for a log that has none): a starter file copied in keeps its time.
            ts = change.mtime_ns / 1e9 if change.mtime_ns else recorded
            infos[path] = FileInfo(path=path, is_dir=False, size=change.size, mtime=ts)
            end = len(path)
            while (cut := path.rfind("/", 0, end)) > 0:
                key = path[:cut]
                if key in infos:
                    break  # and so are the folders above it
                infos[key] = FileInfo(path=key, is_dir=True, size=0, mtime=ts)
                end = cut
        return sorted(infos.values(), key=lambda i: i.path)

    def not_recorded(self, seq: int | None = None) -> list[str]:
        """What the snapshots up to `seq` say they left unrecorded, one line for each
        snapshot that did (a replay's or a fork's honest account of its gaps)."""
        out = []
        for snap in self.snapshots:
            if seq is not None and snap.seq > seq:
                break
            if snap.left_out is not None and snap.left_out.notes:
                out.append(f"after step {snap.step}: " + "; ".join(snap.left_out.notes))
        return out

    def read_at(self, path: str, seq: int | None = None) -> bytes | None:
        entry = self.files_at(seq).get(path)
        if entry is None or entry[0].sha256 is None:
            return None
        return self.store.get(entry[0].sha256)

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
        each fallback folder (the source run's workspace, the task's starter files);
        files recorded by size and time only (never read), by those. Paths are made
        folder by folder from open descriptors, so a path past PATH_MAX is restored
        like any other, with its name's exact bytes (os.fsencode of the recorded str).
        """
        missing: list[str] = []
        roots = [Path(f) for f in fallbacks]
        target.mkdir(parents=True, exist_ok=True)
        target_fd = os.open(target, beneath.DIR_FLAGS)
        try:
            with DirStack(target_fd) as dirs:
                # Sorted as tuples: a folder's files together, a subfolder's right after.
                for path, (change, _) in sorted(
                    self.files_at(seq).items(), key=lambda item: item[0].split("/")
                ):
                    parts = path.split("/")
                    try:
                        at = dirs.move_to(parts[:-1], create=True)
                        out = os.open(
                            parts[-1],
                            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | beneath.FILE_FLAGS,
                            0o666,
                            dir_fd=at,
                        )
                    except OSError:
                        missing.append(path)
                        continue
                    try:
                        if self._restore_one(path, change, out, roots):
                            continue
                    finally:
                        os.close(out)
                    os.unlink(parts[-1], dir_fd=dirs.top())
                    missing.append(path)
        finally:
            os.close(target_fd)
        return missing

    def _restore_one(self, path: str, change: ev.FileChange, out: int, roots: list[Path]) -> bool:
        if change.sha256 and self.store.has(change.sha256):
            try:
                source = os.open(self.store.path(change.sha256), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                source = None
            if source is not None:
                try:
                    sparse_files.copy_sparse(source, out)
                    return True
                finally:
                    os.close(source)
        return any(_copy_if_same(root, path, change, out) for root in roots)


def _copy_if_same(root: Path, path: str, change: ev.FileChange, out: int) -> bool:
    """Copy `path` under `root` into the open file `out` if it is the recorded file: the
    same hash, or for a file recorded unread, the same size and modification time.
    Opened beneath `root` (another run's workspace, whose agent may have left processes
    running), so a link or a swapped folder there cannot make a fork copy a host file;
    holes are kept, and at most a chunk is held in memory."""
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
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != change.size:
            return False
        if change.sha256 is None:
            if st.st_mtime_ns != change.mtime_ns:
                return False
        else:
            digest = hashlib.sha256()
            sparse_files.hash_into(fd, digest)
            if digest.hexdigest() != change.sha256:
                return False
        os.ftruncate(out, 0)
        sparse_files.copy_sparse(fd, out)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
