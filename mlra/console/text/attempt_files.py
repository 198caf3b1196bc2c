"""What the console reads from an attempt's own run folder: its log, its workspace's
files, a small file's text, and the diff of two attempts' workspaces.

An attempt's folder is named by the run's own log (`attempt_started.folder`); it is
read only where it lies inside the run's folder. The workspace is what the attempt's
agent wrote, and a running attempt may change it while it is read: it is walked and
its files opened from a descriptor of the workspace, a component at a time, never
through a link (tools/sandbox/beneath.py, as the sandboxes' own host-side reads), only
regular files are read, with O_NONBLOCK (a FIFO named like a file does not hang the
console), and only their first bytes. What is read is shown, never obeyed: the
dialogs escape it (mlra/terminal_text.py).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.attempt_tree import AttemptNode
from mlra.agent.record.eventlog import EVENTS_FILE, read_events
from mlra.tools.sandbox import beneath, trees

MAX_FILES = 2000
"""Files listed per workspace; past this the listing says more were left out."""
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".ipynb_checkpoints", ".venv", "node_modules"})
DIFF_FILE_BYTES = 64_000
"""Files larger than this are compared by content but not diffed line by line."""
HASH_BYTES = 64_000_000
"""Files larger than this are compared by size alone."""
DIFF_LINES = 4000
"""The diff shown is cut after this many lines."""
PREVIEW_BYTES = 200_000


@dataclass(frozen=True)
class WorkspaceFile:
    path: str
    """Relative to the workspace, with '/' separators."""
    size: int


def attempt_folder(run_dir: Path | None, node: AttemptNode) -> Path | None:
    """The attempt's run folder, where it lies inside the run's; None otherwise."""
    return node.folder_in(run_dir) if run_dir is not None else None


def attempt_events(folder: Path | None) -> tuple[list[ev.Event], str]:
    """The attempt's own events, and why there are none where there are none."""
    if folder is None:
        return [], "its folder is not known here (a run shown without its folder)"
    try:
        return read_events(folder / EVENTS_FILE), ""
    except FileNotFoundError:
        return [], "its log has not been written yet"
    except Exception as exc:  # a damaged log: say so, show the rest of the dialog
        return [], f"its log cannot be read: {exc}"


def list_files(workspace: Path) -> tuple[list[WorkspaceFile], bool]:
    """The workspace's regular files (links and folders such as .git left out), sorted,
    and whether more were left out."""
    out: list[WorkspaceFile] = []
    try:
        root = beneath.open_root(workspace)
    except OSError:
        return out, False
    more = False
    try:
        for entry in trees.walk(root, enter=lambda e: e.name not in SKIPPED_DIRS):
            if not entry.is_file:
                continue
            if len(out) >= MAX_FILES:
                more = True
                break
            out.append(WorkspaceFile(entry.rel, entry.st.st_size))
    except OSError:
        pass  # changed while walked: what was listed stands, the next look sees the rest
    finally:
        os.close(root)
    return sorted(out, key=lambda f: f.path), more


def _open(workspace: Path, rel: str) -> int | None:
    """A regular file of the workspace, opened beneath it without following a link."""
    try:
        root = beneath.open_root(workspace)
    except OSError:
        return None
    try:
        fd, _ = beneath.open_beneath(root, beneath.split(rel), os.O_RDONLY, follow_links=False)
    except (OSError, beneath.Outside):
        return None
    finally:
        os.close(root)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def read_head(workspace: Path, rel: str, limit: int = PREVIEW_BYTES) -> bytes | None:
    """Up to `limit` bytes of a regular file of the workspace; None if it is not one."""
    fd = _open(workspace, rel)
    if fd is None:
        return None
    try:
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _digest(workspace: Path, rel: str) -> str | None:
    fd = _open(workspace, rel)
    if fd is None:
        return None
    try:
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def _is_text(data: bytes) -> bool:
    return b"\0" not in data[:8192]


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="replace").splitlines()


def workspaces_diff(a_dir: Path, b_dir: Path, a_label: str, b_label: str) -> str:
    """A unified diff of two workspaces' text files (from `a` to `b`), small files line by
    line; larger or binary ones are said to differ; files alike are left out."""
    a_files, a_more = list_files(a_dir)
    b_files, b_more = list_files(b_dir)
    sizes_a = {f.path: f.size for f in a_files}
    sizes_b = {f.path: f.size for f in b_files}
    out: list[str] = []
    for path in sorted(set(sizes_a) | set(sizes_b)):
        if len(out) >= DIFF_LINES:
            out.append(f"… the diff is cut here ({DIFF_LINES} lines)")
            break
        out.extend(_file_diff(a_dir, b_dir, a_label, b_label, path, sizes_a, sizes_b))
    for label, more in ((a_label, a_more), (b_label, b_more)):
        if more:
            out.append(
                f"… {label}'s workspace has more than {MAX_FILES} files: the rest not compared"
            )
    return "\n".join(out[: DIFF_LINES + 3])


def _file_diff(
    a_dir: Path,
    b_dir: Path,
    a_label: str,
    b_label: str,
    path: str,
    sizes_a: dict[str, int],
    sizes_b: dict[str, int],
) -> list[str]:
    in_a, in_b = path in sizes_a, path in sizes_b
    from_name = f"{a_label}/{path}" if in_a else "/dev/null"
    to_name = f"{b_label}/{path}" if in_b else "/dev/null"
    size_a, size_b = sizes_a.get(path, 0), sizes_b.get(path, 0)
    if max(size_a, size_b) > DIFF_FILE_BYTES:
        if in_a and in_b:
            if size_a == size_b and (
                size_a > HASH_BYTES or _digest(a_dir, path) == _digest(b_dir, path)
            ):
                return []
            return [f"Files {from_name} and {to_name} differ ({size_a:,} and {size_b:,} bytes)"]
        return [f"Only in {a_label if in_a else b_label}: {path} ({max(size_a, size_b):,} bytes)"]
    data_a = (read_head(a_dir, path, DIFF_FILE_BYTES) or b"") if in_a else b""
    data_b = (read_head(b_dir, path, DIFF_FILE_BYTES) or b"") if in_b else b""
    if in_a and in_b and data_a == data_b:
        return []
    if not (_is_text(data_a) and _is_text(data_b)):
        return [f"Binary files {from_name} and {to_name} differ"]
    return list(
        difflib.unified_diff(
            _lines(data_a), _lines(data_b), fromfile=from_name, tofile=to_name, lineterm=""
        )
    )


def validation_metrics(
    events: list[ev.Event], finished: ev.AttemptFinished | None
) -> dict[str, float]:
    """The metrics of the validation the attempt's score was earned on (its kept copy's,
    else its last successful one), from its own log."""
    validations = [e for e in events if isinstance(e, ev.Validation) and e.ok]
    if finished is not None and finished.sha256:
        for v in reversed(validations):
            if v.sha256 == finished.sha256:
                return dict(v.metrics)
    return dict(validations[-1].metrics) if validations else {}
