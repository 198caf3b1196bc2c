"""A sandbox started by root runs as a host uid of its own (tools/sandbox/run_uid.py).

Bubblewrap started by root maps the sandbox's uid 1000 to host root: a command's inotify
instances counted against root's `fs.inotify.max_user_instances` (taking them all made
every root process on the host fail `inotify_init`), its files were root's, and root-only
files in the folders it is shown were readable. Each attack here is tried against a
sandbox made as a run makes it, by root; assertions are on what the host sees.
"""

from __future__ import annotations

import asyncio
import ctypes
import glob
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mlra.tools.sandbox import run_uid
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.local import LocalSandbox
from mlra.tools.sandbox.volume_settle import settle_before_use

PROBLEM = "these attacks need mlra to run as root" if os.geteuid() != 0 else isolation_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A run folder as mlra makes it (0700, root's), outside /tmp (which the sandbox
    replaces), with its workspace inside."""
    root = Path(tempfile.mkdtemp(prefix="mlra-run-uid-", dir="/var/tmp"))
    os.chmod(root, 0o700)
    (root / "workspace").mkdir(mode=0o700)
    (root / "workspace" / "starter.py").write_text("print('starter')\n")
    yield root
    shutil.rmtree(root, ignore_errors=True)


async def _started(workspace: Path, spec: SandboxSpec | None = None) -> LocalSandbox:
    box = LocalSandbox(workspace, spec or SandboxSpec(), isolation_mode="bwrap")
    await box.start()
    return box


@pytest.fixture
async def box(run_dir: Path) -> AsyncIterator[LocalSandbox]:
    box = await _started(run_dir / "workspace")
    yield box
    await box.close()


async def _sh(box: LocalSandbox, script: str) -> tuple[int | None, str]:
    result = await box.exec(["sh", "-c", script], timeout=60)
    return result.exit_code, result.output


def _host_uids_of(token: str) -> set[int]:
    """The host uids of the processes whose command line holds `token`."""
    uids: set[int] = set()
    for status in glob.glob("/proc/[0-9]*/status"):
        pid = Path(status).parent
        try:
            if token.encode() not in (pid / "cmdline").read_bytes():
                continue
            for line in Path(status).read_text().splitlines():
                if line.startswith("Uid:"):
                    uids.update(int(v) for v in line.split()[1:])
        except OSError:
            continue
    return uids


async def test_commands_run_as_a_uid_no_account_has(box: LocalSandbox, run_dir: Path) -> None:
    uid = box.host_uid
    assert uid is not None and uid not in (0, 1000)
    with pytest.raises(KeyError):
        pwd.getpwuid(uid)
    # Inside it is still uid 1000 (tools that refuse root act as for a user)...
    code, out = await _sh(box, "id -u; echo made > made.txt; python starter.py")
    assert (code, out) == (0, "1000\nstarter\n"), out
    # ...and outside it is the sandbox's own: its files, and its processes.
    workspace = run_dir / "workspace"
    assert (workspace / "made.txt").stat().st_uid == uid
    assert workspace.stat().st_uid == uid and (workspace / "starter.py").stat().st_uid == uid
    token = f"mlra-uid-probe-{os.getpid()}"
    seen: asyncio.Event = asyncio.Event()
    running = asyncio.create_task(
        box.exec(
            ["sh", "-c", f"echo up; while [ ! -e go ]; do sleep 0.05; done # {token}"],
            timeout=60,
            on_output=lambda _s, text: seen.set() if "up" in text else None,
        )
    )
    await asyncio.wait_for(seen.wait(), 30)
    assert _host_uids_of(token) == {uid}
    (workspace / "go").touch()
    assert (await running).exit_code == 0
    # The run folder keeps its mode: other users are kept out of everything but the
    # workspace, which they cannot reach by path either.
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700


async def test_two_sandboxes_at_once_get_different_uids(run_dir: Path) -> None:
    (run_dir / "other").mkdir(mode=0o700)
    first, second = await asyncio.gather(
        _started(run_dir / "workspace"), _started(run_dir / "other")
    )
    try:
        assert first.host_uid is not None and second.host_uid is not None
        assert first.host_uid != second.host_uid
        # Neither can reach the other's files (the other's workspace is not shown, and
        # were it, its 0700 folder is another uid's).
        assert (await _sh(second, "echo b > b.txt"))[0] == 0
        assert (run_dir / "other" / "b.txt").stat().st_uid == second.host_uid
    finally:
        await asyncio.gather(first.close(), second.close())
    # Released at close: the claims folder holds neither any more.
    left = {p.name for p in run_uid.CLAIMS_DIRS[0].glob("*")}
    assert str(first.host_uid) not in left and str(second.host_uid) not in left


def _inotify_init() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.inotify_init1(os.O_CLOEXEC)


INOTIFY_HOG = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
held = []
while True:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
print(f"held {len(held)} errno {ctypes.get_errno()}", flush=True)
while not os.path.exists("go"):
    time.sleep(0.05)
"""


async def test_taking_every_inotify_instance_leaves_roots_alone(
    box: LocalSandbox, run_dir: Path
) -> None:
    """The instances count against the sandbox's uid: the command stops at the host's
    per-user limit, and root's `inotify_init` still works meanwhile."""
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    (run_dir / "workspace" / "hog.py").write_text(INOTIFY_HOG)
    said: list[str] = []
    held: asyncio.Event = asyncio.Event()

    def seen(_stream: str, text: str) -> None:
        said.append(text)
        if "held" in "".join(said):
            held.set()

    running = asyncio.create_task(box.exec(["python", "hog.py"], timeout=120, on_output=seen))
    await asyncio.wait_for(held.wait(), 60)
    fd = _inotify_init()
    try:
        assert fd >= 0, f"root's inotify_init failed: errno {ctypes.get_errno()}"
    finally:
        if fd >= 0:
            os.close(fd)
    (run_dir / "workspace" / "go").touch()
    result = await running
    assert result.exit_code == 0, result.output
    count = int(result.output.split()[1])
    if limit < 10_000:  # the limit, not the descriptor limit, stopped it: all of its own
        assert count == limit, result.output


def _root_only_file() -> Path | None:
    """A file in /sys (shown read-only) that only root may read."""
    for path in glob.glob("/sys/kernel/slab/*/total_objects")[:50]:
        st = os.stat(path)
        if st.st_uid == 0 and stat.S_IMODE(st.st_mode) & 0o077 == 0 and st.st_mode & 0o400:
            return Path(path)
    return None


async def test_root_only_files_in_shown_folders_stay_unread(run_dir: Path) -> None:
    shown = run_dir.parent / f"{run_dir.name}-shown"
    shown.mkdir(mode=0o755)
    (shown / "roots-only").write_text("root-only-canary\n")
    (shown / "roots-only").chmod(0o600)
    box = await _started(run_dir / "workspace", SandboxSpec(read_only=[shown]))
    try:
        code, out = await _sh(box, f"cat {shown}/roots-only")
        assert code != 0 and "root-only-canary" not in out, out
        in_sys = _root_only_file()
        if in_sys is not None:
            code, out = await _sh(box, f"cat {in_sys}")
            assert code != 0 and "Permission denied" in out, out
    finally:
        await box.close()
        shutil.rmtree(shown, ignore_errors=True)


async def test_what_mlra_writes_in_is_the_sandboxs_to_change(box: LocalSandbox) -> None:
    """write_file (as root, into folders it makes): the command can change, extend and
    delete what mlra put there, as in any workspace of its own."""
    await box.write_file("notes/deep/plan.md", b"step 1\n")
    code, out = await _sh(
        box, "echo step 2 >> notes/deep/plan.md && touch notes/deep/new && rm notes/deep/plan.md"
    )
    assert code == 0, out


def test_a_uid_is_never_handed_out_twice_nor_one_a_process_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a range of one uid: a second claim fails while the first holds it, a claim
    left by a process that is gone is taken back, and a uid some process runs as is
    never claimed."""
    first_uid = run_uid.FIRST_UID + 4242
    monkeypatch.setattr(run_uid, "FIRST_UID", first_uid)
    monkeypatch.setattr(run_uid, "UID_COUNT", 1)
    monkeypatch.setattr(run_uid, "TRIES", 3)
    held = run_uid.claim()
    assert held.uid == first_uid
    with pytest.raises(OSError):
        run_uid.claim()
    # A killed mlra's claim: a child that claimed it and died without releasing.
    held.release()
    leftover = subprocess.run(
        ["python", "-c", "from mlra.tools.sandbox import run_uid as r; r.FIRST_UID="
         f"{first_uid}; r.UID_COUNT=1; print(r.claim().uid)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert leftover.stdout.strip() == str(first_uid)
    again = run_uid.claim()
    assert again.uid == first_uid
    again.release()
    # A process running as the uid (a killed run's container, say) keeps it taken.
    sleeper = subprocess.Popen(
        [*run_uid.switch_prefix(first_uid), "sleep", "60"], stdout=subprocess.PIPE
    )
    try:
        while first_uid not in run_uid._live_uids():  # until the switch is done
            assert sleeper.poll() is None
        with pytest.raises(OSError):
            run_uid.claim()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_without_setpriv_python_switches_the_uid_and_keeps_only_the_given_groups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run_uid, "TOOLS_PATH", "/nonexistent")
    uid = run_uid.FIRST_UID + 77
    out = subprocess.run(
        [*run_uid.switch_prefix(uid, [44]), "/bin/sh", "-c", "id -u; id -g; id -G"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert out == [str(uid), str(uid), str(uid), "44"]
    out = subprocess.run(
        [*run_uid.switch_prefix(uid), "/bin/sh", "-c", "id -G"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert out == [str(uid)]


def test_gpu_nodes_given_to_a_group_keep_that_group(tmp_path: Path) -> None:
    """A host whose NVIDIA nodes are 0660 to a `video` group: the sandbox's uid keeps
    that group (and never root's), else its GPUs would not open."""
    open_to_all, to_video, to_root = (tmp_path / n for n in ("all", "video", "root"))
    for node, mode, gid in ((open_to_all, 0o666, 0), (to_video, 0o660, 44), (to_root, 0o660, 0)):
        node.touch()
        os.chown(node, 0, gid)
        node.chmod(mode)
    assert run_uid.device_groups([str(open_to_all), str(to_video), str(to_root)]) == [44]


def test_a_killed_mlras_binds_are_undone_before_anything_is_settled(run_dir: Path) -> None:
    """An mlra killed with its sandbox's stand-ins bound (a workspace volume among them)
    leaves the binds on the host; the next sandbox set up undoes them first."""
    workspace = run_dir / "workspace"
    killed = subprocess.run(
        ["python", "-c", "import os; from mlra.tools.sandbox import run_uid as r; c = r.claim(); "
         f"c.view.stage(['bwrap', '--bind', {str(workspace)!r}, '/workspace']); "
         "print(c.view.points[" + repr(str(workspace)) + "]); os._exit(9)"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert killed.returncode == 9, killed.stderr
    point = killed.stdout.strip()
    assert point in Path("/proc/self/mountinfo").read_text()
    settle_before_use(workspace)
    assert point not in Path("/proc/self/mountinfo").read_text()
    assert not Path(point).parent.exists()
    assert (workspace / "starter.py").read_text() == "print('starter')\n"  # never walked


def test_a_view_left_bound_after_its_claim_was_given_back_is_undone(run_dir: Path) -> None:
    """A sandbox's start cancelled while its thread went on (an attempt stopped as it
    starts) gave its uid back, then bound a view for it: nothing made the binds again
    known, as the sweep found views by their claims, and a python root stayed bound in
    /run/mlra-uids for good. Binding after the claim is given back is refused now, and a
    view with no claim is undone by the next sandbox set up."""
    workspace = run_dir / "workspace"
    late = run_uid.claim()
    late.release()
    with pytest.raises(OSError, match="given back"):
        late.view.stage(["bwrap", "--bind", str(workspace), "/workspace"])
    assert not late.view.folder.exists()
    orphan = run_uid.claim()
    orphan.view.stage(["bwrap", "--bind", str(workspace), "/workspace"])
    point = orphan.view.points[str(workspace)]
    assert orphan.fd is not None
    orphan.path.unlink()  # given back as a release cut short leaves it: binds kept
    os.close(orphan.fd)
    assert point in Path("/proc/self/mountinfo").read_text()
    settle_before_use(workspace)
    assert point not in Path("/proc/self/mountinfo").read_text()
    assert not orphan.view.folder.exists()
