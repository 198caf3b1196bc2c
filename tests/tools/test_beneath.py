"""Host-side file access cannot be raced out of the workspace.

A process the agent leaves running can turn a workspace folder into a link to
`/root` at any instant. These tests make that happen at the worst instant,
deterministically: between the moment the walk looks at an entry (its lstat)
and the moment it opens it, by hooking the walk's lstat.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mlra.agent.record.snapshots import SnapshotStore, WorkspaceScanner
from mlra.tools.sandbox import beneath, trees
from mlra.tools.sandbox.base import SandboxError, SandboxSpec
from mlra.tools.sandbox.host_copies import copy_in, copy_out
from mlra.tools.sandbox.local import LocalSandbox

SECRET = "host secret d0c4e"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws.resolve()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host folder the agent must never reach, holding a secret."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(SECRET)
    return out


@pytest.fixture
def sandbox(workspace: Path) -> LocalSandbox:
    return LocalSandbox(workspace, SandboxSpec(), isolation_mode="none")


@contextmanager
def swapped_after_lstat(
    monkeypatch: pytest.MonkeyPatch, entry: Path, make: Callable[[], None]
) -> Iterator[list[str]]:
    """Replace `entry` (via `make`) right after the walk's first lstat of it has seen
    it as it was: the instant a check-then-open race would exploit."""
    real = beneath._lstat
    swaps: list[str] = []

    def hooked(name: str, dir_fd: int) -> os.stat_result:
        st = real(name, dir_fd)
        if name == entry.name and not swaps and not stat.S_ISLNK(st.st_mode):
            swaps.append(name)
            make()
        return st

    monkeypatch.setattr(beneath, "_lstat", hooked)
    try:
        yield swaps
    finally:
        monkeypatch.setattr(beneath, "_lstat", real)


def folder_to_link(folder: Path, target: Path) -> Callable[[], None]:
    def make() -> None:
        folder.rename(folder.with_name(folder.name + ".was"))
        folder.symlink_to(target)

    return make


def unchanged(outside: Path) -> bool:
    return (
        sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
        and (outside / "secret.txt").read_text() == SECRET
    )


async def test_a_folder_turned_into_a_link_mid_walk_is_not_followed(
    sandbox: LocalSandbox,
    workspace: Path,
    outside: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    async def read() -> object:
        return await sandbox.read_file("d/secret.txt")

    async def write() -> object:
        return await sandbox.write_file("d/planted.txt", b"planted")

    async def listing() -> object:
        return await sandbox.list_tree("d/")

    async def copy() -> object:
        return await copy_out(sandbox, "d/secret.txt", tmp_path / "copied.txt")

    for op in (read, write, listing, copy):
        d = workspace / "d"
        d.mkdir()
        (d / "secret.txt").write_text("decoy")
        with swapped_after_lstat(monkeypatch, d, folder_to_link(d, outside)) as swaps:
            with pytest.raises(SandboxError, match="outside the workspace"):
                await op()
        assert swaps == ["d"], op.__name__  # the swap did happen mid-walk
        assert unchanged(outside), op.__name__
        d.unlink()
        (workspace / "d.was").rename(d)
        os.unlink(d / "secret.txt")
        d.rmdir()
    assert not (tmp_path / "copied.txt").exists()


async def test_a_file_turned_into_a_link_before_its_open_is_not_followed(
    sandbox: LocalSandbox, workspace: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    note = workspace / "note.txt"
    for op in ("read", "write"):
        note.write_text("mine")

        def make() -> None:
            note.unlink()
            note.symlink_to(outside / "secret.txt")

        with swapped_after_lstat(monkeypatch, note, make) as swaps:
            with pytest.raises(SandboxError, match="outside the workspace"):
                if op == "read":
                    await sandbox.read_file("note.txt")
                else:
                    await sandbox.write_file("note.txt", b"overwritten")
        assert swaps == ["note.txt"]
        assert unchanged(outside), op
        note.unlink()


async def test_links_that_stay_inside_the_workspace_still_work(
    sandbox: LocalSandbox, workspace: Path, outside: Path
) -> None:
    (workspace / "runs" / "3").mkdir(parents=True)
    (workspace / "runs" / "3" / "metrics.json").write_text("{}")
    (workspace / "latest").symlink_to("runs/3")
    (workspace / "pinned").symlink_to(f"{sandbox.workdir}/runs/3")
    (workspace / "runs" / "up").symlink_to("../..")  # relative, but leads out
    assert await sandbox.read_file("latest/metrics.json") == b"{}"
    assert await sandbox.read_file("pinned/metrics.json") == b"{}"
    assert await sandbox.write_file("latest/new.txt", b"x") == "runs/3/new.txt"
    assert sandbox.resolve("latest/../3/new.txt") == "runs/3/new.txt"
    with pytest.raises(SandboxError, match="outside the workspace"):
        await sandbox.read_file(f"runs/up/{outside.name}/secret.txt")
    with pytest.raises(SandboxError, match="outside the workspace"):
        await sandbox.write_file("runs/up/planted.txt", b"x")
    # A listing shows links as links and never walks into them.
    tree = {i.path: i.is_dir for i in await sandbox.list_tree(".", max_depth=5)}
    assert tree["latest"] is False and "latest/metrics.json" not in tree
    assert not any(p.startswith("runs/up/") for p in tree)
    assert unchanged(outside)


async def test_a_fifo_in_place_of_a_file_is_refused_rather_than_hanging(
    sandbox: LocalSandbox, workspace: Path
) -> None:
    os.mkfifo(workspace / "pipe")
    with pytest.raises(SandboxError, match="not a regular file"):
        await sandbox.read_file("pipe")


async def test_copy_in_and_out_keep_to_the_workspace(
    sandbox: LocalSandbox, workspace: Path, outside: Path, tmp_path: Path
) -> None:
    src = tmp_path / "starter"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("a = 1\n")
    await copy_in(sandbox, src, "code")
    assert (workspace / "code" / "pkg" / "a.py").read_text() == "a = 1\n"
    (workspace / "code" / "leak").symlink_to(outside / "secret.txt")
    (workspace / "code" / "alias.py").symlink_to("pkg/a.py")
    await copy_out(sandbox, "code", tmp_path / "out")
    copied = tmp_path / "out"
    assert (copied / "pkg" / "a.py").read_text() == "a = 1\n"
    assert (copied / "alias.py").read_text() == "a = 1\n"  # a link inside is copied as its file
    assert not (copied / "leak").exists()  # one that leads out is left out
    (workspace / "into").symlink_to(outside)
    with pytest.raises(SandboxError, match="outside the workspace"):
        await copy_in(sandbox, src, "into/code")
    assert unchanged(outside)


@pytest.mark.parametrize("when", ["before it is entered", "once it is open"])
def test_the_snapshot_scanner_never_reads_through_a_folder_turned_link(
    workspace: Path, outside: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    d = workspace / "d"
    d.mkdir()
    (d / "secret.txt").write_text("decoy")
    scanner = WorkspaceScanner(workspace, SnapshotStore(tmp_path / "run"))
    # The walk lists a folder's names, then d becomes a link to the host folder: before
    # the walk opens d (after the workspace's listing), or after (d's own listing).
    listed = trees._names
    calls: list[int] = []

    def list_then_swap(
        fd: int, budget: int | None, dirs_first: bool = False
    ) -> tuple[list[str], bool]:
        names = listed(fd, budget, dirs_first)
        calls.append(fd)
        if len(calls) == (1 if when == "before it is entered" else 2):
            folder_to_link(d, outside)()
        return names

    monkeypatch.setattr(trees, "_names", list_then_swap)
    snap = scanner.scan(step=1)
    stored = [
        p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()
    ]  # what a replay or a fork would show the agent
    assert SECRET.encode() not in stored
    assert (workspace / "d").is_symlink()
    if when == "before it is entered":
        assert snap is None  # d is a link by the time it is looked at: never entered
    else:  # the folder open is the one that was there: its own file is what is read
        assert snap is not None and [c.path for c in snap.changed] == ["d/secret.txt"]
        assert b"decoy" in stored
    assert unchanged(outside)
