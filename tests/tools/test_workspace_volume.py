"""The workspace's disk quota kept by the kernel: a volume of its own (tools/sandbox/volume.py).

Real loop devices, real ext4 images, real bubblewrap: as root on a machine with loop
devices and mkfs.ext4 (skipped, saying why, elsewhere). The volumes are small (tens of
MB, 2,000 inodes) so the attacks end in well under a second each: `fallocate` far past
the quota, a sparse file written past it, files until the inode budget is spent. Each
ends in ENOSPC inside the sandbox, with the host's disk where the image put it, and
after the sandbox closes the workspace is a plain folder with the files, holes kept,
and no mount, loop device or image left.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mlra.tools.sandbox import volume, volume_settle
from mlra.tools.sandbox.base import SandboxError, SandboxSpec
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.default_limits import MIB, free_mb
from mlra.tools.sandbox.env import shown_interpreter
from mlra.tools.sandbox.local import LocalSandbox
from mlra.tools.sandbox.volume_users import loop_mounts
from tests.mount_namespaces import holder as holder_argv

WHY_NOT = volume.unavailable()
BWRAP_PROBLEM = isolation_problem()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no workspace volume: {WHY_NOT}")
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or "")
QUOTA_MB = 48
INODES = 2000


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = (tmp_path / "run" / "workspace").resolve()
    ws.mkdir(parents=True)
    return ws


def _mounted(path: Path) -> bool:
    return any(path in points for points in loop_mounts().values()) or any(
        line.split()[4] == str(path)
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )


def _images(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if volume.TAG in p.name]


def _loops_of(folder: Path) -> list[str]:
    found = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=False).stdout
    return [line for line in found.splitlines() if str(folder) in line]


def _loops_released(folder: Path) -> bool:
    """No loop device is left on `folder`'s images, once any mount namespace made at the
    instant of the unmount (another test's sandbox or Ray node, as it starts) has dropped
    the copy of the volume it was born with: the kernel frees the device after the last."""
    deadline = time.monotonic() + 20.0
    while _loops_of(folder) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _loops_of(folder)


async def _box(workspace: Path) -> LocalSandbox:
    mode = "bwrap" if BWRAP_PROBLEM is None else "none"
    box = LocalSandbox(
        workspace,
        SandboxSpec(disk_mb=QUOTA_MB, disk_inodes=INODES),
        isolation_mode=mode,
    )
    await box.start()
    return box


def _image_bytes(folder: Path) -> int:
    (name,) = [n for n in _images(folder) if n.endswith(".img")]
    return os.stat(folder / name).st_blocks * 512


@needs_bwrap
async def test_fallocate_past_the_quota_is_enospc_inside_and_takes_nothing_more(
    workspace: Path,
) -> None:
    (workspace / "starter.txt").write_text("from the task\n")
    box = await _box(workspace)
    try:
        limits = box.limits
        assert limits.disk_by is not None and limits.disk_by.startswith("ext4 image (loop)")
        assert limits.disk_mb == QUOTA_MB and limits.disk_check_s is None, limits
        assert limits.disk_inodes is not None and INODES <= limits.disk_inodes < INODES + 64
        held = _image_bytes(workspace.parent)
        # Reserved on the host when set up (its extent map's blocks besides), not later.
        assert QUOTA_MB * MIB <= held <= (QUOTA_MB + 1) * MIB, held
        result = await box.exec(
            ["sh", "-c", "cat starter.txt; fallocate -l 8G big; echo rc=$?"], timeout=30
        )
        assert "from the task" in result.output  # carried onto the volume
        assert "No space left on device" in result.output and "rc=1" in result.output, result
        assert "[the workspace is full" in result.output, result.output
        assert result.disk_full and result.disk_note in result.notes  # a grader's says so
        # The host gave nothing beyond the image: its blocks are what they were. (The
        # host's free space is not compared: the suite's other workers make volumes of
        # their own meanwhile.)
        assert _image_bytes(workspace.parent) == held
        # mlra's own write past what is left is refused up front, with one line.
        with pytest.raises(SandboxError, match="disk quota"):
            await box.write_file("more.bin", b"x" * (2 * MIB))
        # Deleting makes room again: the agent is not stopped, only the write failed.
        again = await box.exec(
            ["sh", "-c", "rm -f big && echo ok > small.txt && cat small.txt"], timeout=30
        )
        assert again.exit_code == 0 and "ok" in again.output, again.output
        assert not again.disk_full and again.notes == []
    finally:
        await box.close()
    assert not _mounted(workspace) and _images(workspace.parent) == []
    assert (workspace / "starter.txt").read_text() == "from the task\n"
    assert (workspace / "small.txt").exists()


@needs_bwrap
async def test_a_sparse_file_written_past_the_quota_stops_and_keeps_its_holes(
    workspace: Path,
) -> None:
    box = await _box(workspace)
    try:
        result = await box.exec(
            ["sh", "-c",
             "truncate -s 2G sparse && dd if=/dev/zero of=sparse bs=1M seek=100 count=200 "
             "conv=notrunc 2>&1; echo rc=$?; stat -c %s sparse"],
            timeout=60,
        )  # fmt: skip
        assert "No space left on device" in result.output and "rc=1" in result.output, result
        assert "2147483648" in result.output
    finally:
        await box.close()
    st = os.stat(workspace / "sparse")
    assert st.st_size == 2 << 30
    assert st.st_blocks * 512 <= QUOTA_MB * MIB  # the holes stayed holes on the way out
    assert (
        not _mounted(workspace)
        and _images(workspace.parent) == []
        and _loops_released(workspace.parent)
    )


@needs_bwrap
async def test_files_past_the_inode_budget_are_enospc(workspace: Path) -> None:
    box = await _box(workspace)
    script = (
        "import errno, os\n"
        "n = 0\n"
        "try:\n"
        "    while n < 200_000:\n"
        "        open(f'f{n}', 'w').close(); n += 1\n"
        "except OSError as e:\n"
        "    print('stopped', n, errno.errorcode[e.errno])\n"
    )
    try:
        result = await box.exec([shown_interpreter(), "-c", script], timeout=60)
        assert "ENOSPC" in result.output, result.output
        made = int(result.output.split("stopped", 1)[1].split()[0])
        assert INODES - 20 <= made <= INODES, made
        assert "files and folders it may hold" in result.output
    finally:
        await box.close()
    assert len(os.listdir(workspace)) == made
    assert not _mounted(workspace) and _images(workspace.parent) == []


async def test_the_workspace_comes_back_a_plain_folder_with_everything(workspace: Path) -> None:
    """Starter files, a resumed run's sparse file and hard links, modes, links and an
    empty folder: all on the volume while it is up, all back in a plain folder after."""
    (workspace / "data").mkdir()
    (workspace / "data" / "one.txt").write_text("1")
    os.link(workspace / "data" / "one.txt", workspace / "linked.txt")
    (workspace / "empty").mkdir(mode=0o750)
    (workspace / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (workspace / "run.sh").chmod(0o755)
    (workspace / "to-data").symlink_to("data")
    with open(workspace / "holes.bin", "wb") as f:
        f.truncate(1 << 30)
    box = await _box(workspace)
    try:
        assert _mounted(workspace)
        result = await box.exec(["sh", "-c", "./run.sh && echo two > data/two.txt"], timeout=30)
        assert "ran" in result.output, result.output
    finally:
        await box.close()
    assert not _mounted(workspace) and _images(workspace.parent) == []
    assert (workspace / "data" / "two.txt").read_text() == "two\n"
    assert (
        os.stat(workspace / "linked.txt").st_ino == os.stat(workspace / "data" / "one.txt").st_ino
    )
    assert (workspace / "empty").is_dir() and (workspace / "empty").stat().st_mode & 0o777 == 0o750
    assert os.access(workspace / "run.sh", os.X_OK)
    assert os.readlink(workspace / "to-data") == "data"
    assert os.stat(workspace / "holes.bin").st_blocks == 0
    assert "lost+found" not in os.listdir(workspace)


def _owner_on_cue(workspace: Path) -> subprocess.Popen[str]:
    """An mlra stand-in with its volume mounted on `workspace`, alive (so no settling
    anywhere takes it) until `_kill` is called: what a test checks of the volume before
    its owner dies holds, whatever other tests' sandboxes do meanwhile."""
    owner = subprocess.Popen(
        **_killed_owner(workspace, on_cue=True), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert owner.stdout is not None and owner.stdout.readline() == "mounted\n"
    return owner


def _kill(owner: subprocess.Popen[str]) -> None:
    """The stand-in killed with its volume mounted. From here any sandbox set up on
    the machine (another test's, on another worker) may settle it first: a test checks
    what is left once settling is done (`settle_stale` of its folder waits for one
    under way), not which mlra did it."""
    owner.communicate("die\n")
    assert owner.returncode == -9


def _killed_owner(workspace: Path, *, on_cue: bool = False) -> dict[str, Any]:
    """The command line and environment (subprocess's `args`, `env`) of an mlra stand-in that opens a volume on
    `workspace`, writes a file on it and is killed with it mounted; `on_cue`: it says
    `mounted` and is killed once a line comes on its stdin (a test sets up what it needs
    around the volume first: any sandbox another test starts meanwhile settles the
    volume of an owner that is gone)."""
    cue = "print('mounted', flush=True)\nsys.stdin.readline()\n" if on_cue else ""
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from mlra.tools.sandbox.volume import WorkspaceVolume\n"
        "ws = Path(sys.argv[1])\n"
        f"WorkspaceVolume(ws, {QUOTA_MB}, {INODES}).open()\n"
        "(ws / 'written-on-the-volume.txt').write_text('kept')\n"
        f"{cue}"
        "os.kill(os.getpid(), 9)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return {"args": [sys.executable, "-c", code, str(workspace)], "env": env}


@pytest.mark.parametrize("next_one", ["another run's sandbox", "its resume, with no quota"])
async def test_a_volume_of_an_mlra_that_was_killed_is_carried_back_by_the_next(
    workspace: Path, tmp_path: Path, next_one: str
) -> None:
    (workspace / "before.txt").write_text("before")
    owner = await asyncio.to_thread(_owner_on_cue, workspace)
    assert _mounted(workspace) and len(_images(workspace.parent)) == 2  # the image, its mark
    await asyncio.to_thread(_kill, owner)
    if next_one == "another run's sandbox":  # any sandbox set up on this machine settles it
        other = (tmp_path / "other" / "workspace").resolve()
        other.mkdir(parents=True)
        box = await _box(other)
        await asyncio.to_thread(volume_settle.settle_stale, workspace.parent)  # one under way
    else:  # the same workspace again, without a volume of its own
        box = LocalSandbox(workspace, SandboxSpec(disk_mb=0), isolation_mode="none")
        await box.start()
        assert not _mounted(workspace)
    await box.close()
    assert not _mounted(workspace) and _images(workspace.parent) == []
    assert (workspace / "written-on-the-volume.txt").read_text() == "kept"
    assert (workspace / "before.txt").read_text() == "before"


async def test_a_resume_waits_for_another_mlra_settling_its_workspaces_volume(
    workspace: Path,
) -> None:
    """Any sandbox set up on the machine settles a killed mlra's volume; a resume of that
    run meeting one mid-way (in CI, a neighbouring test's) used to go on at once, and its
    command ran on a workspace half carried back, without files the run had written."""
    owner = await asyncio.to_thread(_owner_on_cue, workspace)
    (image,) = [workspace.parent / n for n in _images(workspace.parent) if n.endswith(".img")]
    await asyncio.to_thread(_kill, owner)
    other = volume_settle._take(image)  # another mlra's settling has begun
    if other is None:
        pytest.skip("another test's sandbox settled the volume first (settling is machine-wide)")

    def resume() -> tuple[bool, bool]:
        volume_settle.settle_before_use(workspace)
        return _mounted(workspace), (workspace / "written-on-the-volume.txt").exists()

    resumed = asyncio.ensure_future(asyncio.to_thread(resume))
    await asyncio.sleep(0.3)  # its chance to go on too early (before, it did at once)
    assert not resumed.done()
    settled = await asyncio.to_thread(
        volume_settle.settle, image, workspace, mounted=True, lock=other
    )
    assert settled.problem is None
    assert await resumed == (False, True)  # it went on once the other had finished
    assert _images(workspace.parent) == []


def test_a_volume_of_a_killed_mlra_not_yet_reaped_is_settled_before_its_resume(
    workspace: Path,
) -> None:
    """A killed mlra whose parent had not reaped it yet (a zombie: its pid still in /proc),
    or whose pid ran something else by then, was taken for alive: its resume stacked a
    volume over the old one, and once the pid was gone, any mlra's settling unmounted the
    top one, the resume's own, from under its sandbox (the old volume came up at the
    workspace, and the resume's later writes were lost at its close)."""
    killed = subprocess.Popen(**_killed_owner(workspace))
    try:
        os.waitid(os.P_PID, killed.pid, os.WEXITED | os.WNOWAIT)  # dead, left a zombie
        # Mounted still, unless another test's sandbox settled it already (machine-wide).
        assert Path(f"/proc/{killed.pid}").exists()
        resumed = volume.WorkspaceVolume(workspace, QUOTA_MB, INODES)
        resumed.open()  # settles what is left first
        mine = os.stat(workspace).st_dev
        try:
            assert (workspace / "written-on-the-volume.txt").read_text() == "kept"
            (workspace / "resumed.txt").write_text("the resume's")
        finally:
            assert killed.wait(timeout=60) == -9  # reaped: its pid is gone now
            volume_settle.settle_stale()  # another mlra's sandbox set up, say
            assert os.stat(workspace).st_dev == mine  # the resume's volume stays its own
            assert resumed.close() is None
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
    assert not _mounted(workspace) and _images(workspace.parent) == []
    assert (workspace / "written-on-the-volume.txt").read_text() == "kept"
    assert (workspace / "resumed.txt").read_text() == "the resume's"


def test_a_new_volume_is_never_stacked_on_a_killed_ones_still_in_use(
    workspace: Path, tmp_path: Path
) -> None:
    """A killed mlra's volume that another mount namespace still has (a container, or a
    sandbox being set up elsewhere) is left mounted; a resume stacked its own on top, and
    whichever mlra settled the old one later unmounted the top one, the resume's, from
    under its sandbox ('the volume did not appear at the workspace', files lost). The
    resume now goes on in the old one, its quota watched, and it is settled later."""
    owner = _owner_on_cue(workspace)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    holder = subprocess.Popen(holder_argv(workspace, elsewhere), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        _kill(owner)  # held elsewhere from before its death: no settling takes it
        with pytest.raises(volume.VolumeFailed, match="still mounted at the workspace"):
            volume.WorkspaceVolume(workspace, QUOTA_MB, INODES).open()
        assert [ps.count(workspace) for ps in loop_mounts().values() if workspace in ps] == [1]
        assert (workspace / "written-on-the-volume.txt").read_text() == "kept"
    finally:
        holder.kill()
        holder.wait()
    volume_settle.settle_stale(workspace.parent)  # no longer used: settled
    assert not _mounted(workspace) and _images(workspace.parent) == []
    assert (workspace / "written-on-the-volume.txt").read_text() == "kept"


def test_a_killed_mlras_volume_a_process_of_it_still_works_in_is_kept_until_it_ends(
    workspace: Path,
) -> None:
    """A killed mlra's grader (or command) run unconfined goes on in the volume, in this
    mount namespace. Any sandbox set up on the machine carried the volume back under it
    and detached it lazily: what the grader wrote after the copy was lost, and its
    `evaluator.json` was off the workspace until the copy got to it, so a grading begun
    then (CI: test_a_stale_evaluator_is_ended_before_the_run_is_graded_again) neither
    found nor ended the grader, and two graded at once. The volume now stays mounted
    until the process ends, and is carried back whole after."""
    owner = _owner_on_cue(workspace)
    grader = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline(); open('late.txt', 'w').write('late')"],
        cwd=workspace, stdin=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _kill(owner)
        volume_settle.settle_stale(workspace.parent)  # another mlra's sandbox set up, say
        assert _mounted(workspace) and len(_images(workspace.parent)) == 2
        assert (workspace / "written-on-the-volume.txt").read_text() == "kept"
    finally:
        grader.communicate("end\n")
    volume_settle.settle_stale(workspace.parent)  # it ended: settled
    assert not _mounted(workspace) and _images(workspace.parent) == []
    assert (workspace / "late.txt").read_text() == "late"
    assert (workspace / "written-on-the-volume.txt").read_text() == "kept"


@pytest.mark.parametrize("removed", ["its run folder", "only its image"])
def test_a_killed_mlras_volume_whose_image_was_deleted_is_unmounted_by_the_next(
    workspace: Path, removed: str
) -> None:
    """A killed run's folder removed by hand (`rm -rf`, pytest's old temporary folders)
    deletes the image under its mount: the mount and its loop device stayed, since the
    settling could not open the image to take its lock, and such mounts piled up on the
    machine until someone unmounted them by hand. Then the settling carried the emptied
    volume back, and the run folder the researcher removed came back (holding an empty
    `workspace`): now it stays removed, while a workspace whose files are still there
    (only the image deleted) keeps them."""
    owner = _owner_on_cue(workspace)
    folder = workspace.parent
    if removed == "its run folder":
        shutil.rmtree(folder, ignore_errors=True)  # all but the mount point itself
    else:
        for name in _images(folder):
            (folder / name).unlink()
    assert _mounted(workspace) and "(deleted)" in " ".join(_loops_of(folder))
    _kill(owner)  # another test's sandbox may settle it first (then [] here)
    settled = volume_settle.settle_stale(folder)
    assert [s.problem for s in settled if s.workspace == workspace] in ([None], [])
    assert not _mounted(workspace) and _loops_released(folder)  # the space is given back
    if removed == "its run folder":
        assert not folder.exists()  # nothing of it comes back
    else:
        assert (workspace / "written-on-the-volume.txt").read_text() == "kept"


async def test_a_volume_whose_image_was_deleted_is_left_to_its_living_owner(
    workspace: Path,
) -> None:
    made = volume.WorkspaceVolume(workspace, QUOTA_MB, INODES)
    await asyncio.to_thread(made.open)
    try:
        (workspace / "mine.txt").write_text("still mine")
        for name in _images(workspace.parent):
            (workspace.parent / name).unlink()
        # Its owner (this process) holds the deleted image open: not stale, not taken.
        settled = await asyncio.to_thread(volume_settle.settle_stale, workspace.parent)
        assert [s for s in settled if s.workspace == workspace] == []
        assert _mounted(workspace) and (workspace / "mine.txt").exists()
    finally:
        assert await asyncio.to_thread(made.close) is None
    assert not _mounted(workspace) and _loops_released(workspace.parent)
    assert (workspace / "mine.txt").read_text() == "still mine"


async def test_a_volume_whose_owner_lives_is_left_alone(workspace: Path) -> None:
    made = volume.WorkspaceVolume(workspace, QUOTA_MB, INODES)
    await asyncio.to_thread(made.open)
    try:
        # Named after this (living) process and locked by it: not stale, not taken.
        assert await asyncio.to_thread(volume_settle.settle_stale, workspace.parent) == []
        assert _mounted(workspace)
    finally:
        assert await asyncio.to_thread(made.close) is None
    assert not _mounted(workspace) and _images(workspace.parent) == []


async def test_a_quota_that_would_take_the_disks_reserve_is_refused_in_one_line(
    workspace: Path,
) -> None:
    folder = workspace.parent
    # More than all that is free: refused whatever the suite's other workers free or take
    # meanwhile (free space less the reserve, plus a margin, was outgrown once).
    too_much = free_mb(folder) + 1024
    box = LocalSandbox(workspace, SandboxSpec(disk_mb=too_much), isolation_mode="none")
    with pytest.raises(volume.VolumeRefused, match="keeps for the logs") as refused:
        await box.start()
    assert "\n" not in str(refused.value)
    await box.close()
    assert _images(folder) == [] and not _mounted(workspace)


async def test_without_a_volume_the_watcher_keeps_the_quota_and_says_so(workspace: Path) -> None:
    box = LocalSandbox(
        workspace, SandboxSpec(disk_mb=QUOTA_MB, disk_volume=False), isolation_mode="none"
    )
    await box.start()
    try:
        limits = box.limits
        assert limits.disk_by == "du watcher (the sandbox asked for it)", limits
        assert limits.disk_check_s is not None and limits.disk_inodes is None
        assert not _mounted(workspace)
    finally:
        await box.close()


async def test_a_volume_that_cannot_be_made_falls_back_to_the_watcher_with_a_notice(
    workspace: Path,
) -> None:
    """A workspace that does not fit in its quota cannot move onto the volume: the run
    goes on under the watcher (which tells the agent it is over), and nothing is lost."""
    (workspace / "big.bin").write_bytes(os.urandom(3 * MIB))
    box = LocalSandbox(workspace, SandboxSpec(disk_mb=2), isolation_mode="none")
    notices = await box.start()
    try:
        assert box.limits.disk_by is not None
        assert box.limits.disk_by.startswith("du watcher (the workspace does not fit"), box.limits
        assert any("not kept by the kernel" in n for n in notices), notices
    finally:
        await box.close()
    assert (workspace / "big.bin").stat().st_size == 3 * MIB
    assert _images(workspace.parent) == [] and not _mounted(workspace)


async def test_a_start_cancelled_as_its_volume_is_made_leaves_none_mounted(
    workspace: Path,
) -> None:
    """The start is cancelled once the image exists, while the volume is being made and
    mounted (an attempt stopped as its sandbox starts): the cancelled await gave up a
    thread that went on to mount the volume, which the sandbox never recorded, so its
    close left it mounted. Now the start undoes it before its cancellation goes on."""
    (workspace / "starter.txt").write_text("from the task\n")
    box = LocalSandbox(
        workspace, SandboxSpec(disk_mb=QUOTA_MB, disk_inodes=INODES), isolation_mode="none"
    )
    starting = asyncio.ensure_future(box.start())
    async with asyncio.timeout(60):
        while not _images(workspace.parent):  # noqa: ASYNC110 (the image is the cue)
            await asyncio.sleep(0.001)
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    await box.close()
    assert not _mounted(workspace) and _images(workspace.parent) == []
    assert _loops_released(workspace.parent)
    assert (workspace / "starter.txt").read_text() == "from the task\n"


def test_the_inode_budget_is_proportional_and_capped() -> None:
    assert volume.default_inodes(913) == 913 * 64
    assert volume.default_inodes(200 * 1024) == volume.MAX_INODES
    assert volume.default_inodes(1) == volume.MIN_INODES


async def test_the_container_writes_to_the_volume_and_gets_enospc_past_it(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Docker sandbox binds the workspace's path after its volume is mounted there:
    the container sees the volume, and the kernel keeps its quota."""
    from tests.conftest import TEST_IMAGE, docker_address, docker_problem

    problem = docker_problem()
    if problem is not None:
        pytest.skip(problem)
    monkeypatch.setenv("DOCKER_HOST", docker_address() or "")
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    (workspace / "starter.txt").write_text("from the task\n")
    box = DockerSandbox(
        workspace,
        SandboxSpec(disk_mb=QUOTA_MB, disk_inodes=INODES),
        image=TEST_IMAGE,
        run_id=f"volume-{os.getpid()}",
    )
    await box.start()
    try:
        limits = box.limits
        assert (limits.disk_by or "").startswith("ext4 image (loop)"), limits
        result = await box.exec(
            ["sh", "-c", "cat starter.txt; head -c 100000000 /dev/zero > big; echo rc=$?"],
            timeout=60,
        )
        assert "from the task" in result.output, result.output
        assert "No space left on device" in result.output and "rc=1" in result.output, result
        assert "[the workspace is full" in result.output, result.output
        assert result.disk_full, result  # the container's too
    finally:
        await box.close()
    assert not _mounted(workspace) and _images(workspace.parent) == []
    assert (workspace / "starter.txt").read_text() == "from the task\n"
    assert 0 < (workspace / "big").stat().st_size < QUOTA_MB * MIB


def test_a_settling_whose_workspace_is_no_longer_mounted_leaves_no_view_bound(
    workspace: Path,
) -> None:
    """Told a volume was mounted at a workspace that no longer was one (unmounted since
    it was listed), the settling bound the plain folder on its view, could not unmount
    the workspace, and left the view bound for good: pytest could not remove the run
    folder (`Device or resource busy`), and the bind stayed on the machine."""
    folder = workspace.parent
    image = folder / f".{workspace.name}.{volume.TAG}-1-0a1b.img"
    image.write_bytes(b"")
    lock = os.open(image, os.O_RDONLY)
    settled = volume_settle.settle(image, workspace, mounted=True, lock=lock, owner_gone=True)
    assert settled.problem is not None and "could not be undone" in settled.problem
    views = [p for p in folder.iterdir() if p.name.startswith(volume_settle.VIEW_PREFIX)]
    assert views == [] and not any(
        str(folder) in line for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )
