"""What a workspace volume's settling removes from the plain folder it carries the
workspace back to: only the old copy the workspace left under the volume.

CI once lost a file a test wrote into a killed run's workspace just before resuming it
(`test_resume.py`, the recipe step waiting for `go-B5`): another test's sandbox was
settling that run's volume, the file landed in the plain folder once the volume was
off it, and settling cleared the whole folder before copying the volume back. A
researcher writing into a killed run's workspace as another mlra starts loses it the
same way. Real volumes, as root (skipped elsewhere, saying why).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlra.tools.sandbox import volume, volume_settle
from mlra.tools.sandbox.volume import WorkspaceVolume

WHY_NOT = volume.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no workspace volume: {WHY_NOT}")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = (tmp_path / "run" / "workspace").resolve()
    ws.mkdir(parents=True)
    (ws / "starter.txt").write_text("starter")
    (ws / "data").mkdir()
    (ws / "data" / "old.txt").write_text("old")
    return ws


def _write_once_unmounted(monkeypatch: pytest.MonkeyPatch, workspace: Path, name: str) -> None:
    """`name` is written into the workspace the instant its volume is off it, as a
    researcher's editor or shell would while the volume is settled."""
    unmount = volume_settle.unmount

    def then_write(path: Path) -> None:
        unmount(path)
        if path == workspace:
            (workspace / name).write_text("mine")

    monkeypatch.setattr(volume_settle, "unmount", then_write)


def test_a_file_written_as_the_volume_is_carried_back_is_kept(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = WorkspaceVolume(workspace, 32, 1000)
    made.open()
    (workspace / "on-the-volume.txt").write_text("kept")
    _write_once_unmounted(monkeypatch, workspace, "go")
    assert made.close() is None
    assert (workspace / "go").read_text() == "mine"
    assert (workspace / "on-the-volume.txt").read_text() == "kept"
    assert (workspace / "starter.txt").read_text() == "starter"


def test_an_old_copy_left_under_the_volume_does_not_come_back(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What could not be cleared from under the volume when the workspace moved onto
    it is named in its mark and cleared at settling: a file deleted on the volume stays
    deleted, one written meanwhile is kept."""
    monkeypatch.setattr(volume, "clear_folder", lambda root, names=None: None)
    made = WorkspaceVolume(workspace, 32, 1000)
    made.open()
    (workspace / "starter.txt").unlink()
    (workspace / "data" / "old.txt").unlink()
    _write_once_unmounted(monkeypatch, workspace, "go")
    assert made.close() is None
    assert sorted(os.listdir(workspace)) == ["data", "go"]
    assert os.listdir(workspace / "data") == []


@pytest.mark.parametrize("mark", ["", "not json", '["../x"]'])
def test_a_mark_that_names_nothing_clears_the_whole_old_copy(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, mark: str
) -> None:
    """A mark left empty (killed between the move and naming what was left) or written
    otherwise: all under the volume is taken for the old copy, as before marks named."""
    monkeypatch.setattr(volume, "clear_folder", lambda root, names=None: None)
    monkeypatch.setattr(volume, "write_left_under", lambda moved, names: None)
    made = WorkspaceVolume(workspace, 32, 1000)
    made.open()
    assert made.image is not None
    Path(f"{made.image}{volume_settle.MOVED}").write_text(mark)
    (workspace / "starter.txt").unlink()
    assert made.close() is None
    assert sorted(os.listdir(workspace)) == ["data"]
    assert os.listdir(workspace / "data") == ["old.txt"]
