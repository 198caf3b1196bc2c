"""A local sandbox's start cancelled at each of its steps leaves nothing behind.

An attempt stopped by the supervisor (`attempt_stop`), or a search that ends, cancels
the task that awaits its sandbox's start. Each step of the start runs in a thread,
which a cancelled await does not stop: what the thread made after the cancellation
(a uid's claim and its view's binds, a network namespace's holder and slirp4netns, a
cgroup) was never recorded by the sandbox, so its close never undid it, and it stayed
until mlra exited. Each test holds one step once it has made its part, cancels the
start there, lets the step go on as its thread would, closes the sandbox as a run does,
and, once every thread lent has ended, finds nothing of the sandbox on the host.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlra.tools.fetch.box import FetchBox, confinement
from mlra.tools.sandbox import bwrap, limits, local_steps, netns, run_uid
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.limits import SandboxLimits
from mlra.tools.sandbox.local import LocalSandbox
from tests.tools.step_hold import Hold, cancel_held

PROBLEM = "these need mlra to run as root" if os.geteuid() != 0 else isolation_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A workspace in a run folder as mlra makes it (0700, root's, outside /tmp), so the
    sandbox's view binds it."""
    root = Path(tempfile.mkdtemp(prefix="mlra-cancelled-", dir="/var/tmp"))
    os.chmod(root, 0o700)
    (root / "workspace").mkdir(mode=0o700)
    yield root / "workspace"
    shutil.rmtree(root, ignore_errors=True)


def _box(workspace: Path, *, network: bool = False) -> LocalSandbox:
    # The du watcher, not a volume: the volume's own cancel is tested with it.
    spec = SandboxSpec(network=network, disk_volume=False)
    return LocalSandbox(workspace, spec, isolation_mode="bwrap")


def _claims(monkeypatch: pytest.MonkeyPatch) -> list[run_uid.UidClaim]:
    """The uids the sandbox will claim, as they are claimed."""
    claimed: list[run_uid.UidClaim] = []
    real = run_uid.claim

    def recorded() -> run_uid.UidClaim:
        claimed.append(real())
        return claimed[-1]

    monkeypatch.setattr(run_uid, "claim", recorded)
    return claimed


def _left_of(claims: list[run_uid.UidClaim]) -> list[str]:
    """What the host still holds of these claims: their files, their views' binds and
    folders, and processes running as their uids."""
    left: list[str] = []
    mounts = Path("/proc/self/mountinfo").read_text()
    for claim in claims:
        if claim.path.exists():
            left.append(f"the claim {claim.path}")
        if f"{claim.view.folder}/" in mounts:
            left.append(f"binds under {claim.view.folder}")
        if claim.view.folder.exists():
            left.append(f"the view {claim.view.folder}")
        left += [f"process {pid} as uid {claim.uid}" for pid in _pids_of_uid(claim.uid)]
    return left


def _live() -> Iterator[tuple[int, dict[str, str], str]]:
    """Each live process (no zombie): its pid, its status fields and its command."""
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if not fields.get("State", "Z").startswith("Z"):
            yield pid, fields, os.path.basename(argv0)


def _pids_of_uid(uid: int) -> list[int]:
    return [pid for pid, fields, _ in _live() if str(uid) in fields.get("Uid", "").split()]


def _children_running(*names: str) -> list[str]:
    """This process's live children whose command is one of `names`."""
    me = str(os.getpid())
    return [
        f"{name} ({pid})"
        for pid, fields, name in _live()
        if fields.get("PPid") == me and name in names
    ]


@pytest.mark.parametrize(
    "owner, name, nth",
    [
        pytest.param(run_uid, "hand_tree", 1, id="uid-claimed"),
        pytest.param(bwrap, "probe", 2, id="view-bound"),  # the trial command as the uid
    ],
)
async def test_a_start_cancelled_as_its_uid_is_claimed_leaves_no_claim_nor_binds(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, owner: object, name: str, nth: int
) -> None:
    """Cancelled once the uid is claimed and the workspace handed to it: the thread went
    on to record the claim on a sandbox already closed, so the claim file stayed locked,
    its view bound in /run/mlra-uids, until mlra exited. Cancelled once the view binds the
    run folder's workspace and bubblewrap tries it: the claim was given back under the
    thread still using it (now the start waits for the thread, then gives it back)."""
    if not run_uid.wanted():
        pytest.skip("a uid of its own is claimed only as root")
    claims = _claims(monkeypatch)
    hold = Hold(monkeypatch, owner, name, nth)
    box = _box(workspace)
    await cancel_held(asyncio.ensure_future(box.start()), hold, box.close)
    assert claims and _left_of(claims) == []


async def test_a_start_cancelled_as_its_network_is_made_leaves_no_process(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled once the namespace's holder and slirp4netns run and bubblewrap tries the
    namespace: the thread went on to record the network on a sandbox already closed, so
    both processes ran on, as the sandbox's uid and root, until mlra exited."""
    problem = netns.network_problem()
    if problem is not None:
        pytest.skip(problem)
    claims = _claims(monkeypatch)
    hold = Hold(monkeypatch, netns, "network_for_sandbox")
    box = _box(workspace, network=True)
    await cancel_held(asyncio.ensure_future(box.start()), hold, box.close)
    assert _children_running("slirp4netns", "unshare", "cat") == []
    assert _left_of(claims) == []


async def test_a_start_cancelled_as_its_cgroup_is_made_leaves_no_cgroup(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled as the sandbox's cgroups are about to be made (the old groups of dead
    mlra processes beside them just removed): the thread made them after the sandbox
    closed, so they stayed, named after this process, which no later mlra removes while
    it lives."""
    if not _own_groups(SandboxLimits(memory_mb=64, pids=64, file_size_mb=None)):
        pytest.skip("no cgroup can be made here")
    before = set(_groups_of_this_process())
    claims = _claims(monkeypatch)
    hold = Hold(monkeypatch, limits, "_remove_stale_groups")
    box = _box(workspace)
    await cancel_held(asyncio.ensure_future(box.start()), hold, box.close)
    assert set(_groups_of_this_process()) - before == set()
    assert _left_of(claims) == []


def _own_groups(made: SandboxLimits) -> bool:
    """Whether a sandbox's cgroups can be made here (made and removed again)."""
    made.setup()
    held = made.version is not None
    made.close()
    return held


def _groups_of_this_process() -> list[Path]:
    """The cgroups named after this process, in every hierarchy (v1's and v2's)."""
    pattern = f"{limits.GROUP_PREFIX}{os.getpid()}-*"
    return [
        group
        for depth in ("", "*/", "*/*/", "*/*/*/", "*/*/*/*/")
        for group in limits.CGROUP_ROOT.glob(f"{depth}{pattern}")
    ]


async def test_a_start_cancelled_in_a_step_that_hangs_ends_and_the_step_undoes_itself(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that never ends must not hold a stopped attempt for good: the start waits
    for it no longer than the step's bound, and its thread undoes what it made when it
    ends (here the cgroups, held until after the sandbox closed)."""
    if not _own_groups(SandboxLimits(memory_mb=64, pids=64, file_size_mb=None)):
        pytest.skip("no cgroup can be made here")
    before = set(_groups_of_this_process())
    monkeypatch.setattr(local_steps, "CGROUPS_WAIT_S", 0.01)
    hold = Hold(monkeypatch, limits, "_remove_stale_groups")
    box = _box(workspace)
    starting = asyncio.ensure_future(box.start())
    await hold.reached()
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting  # the step still held
    await box.close()
    hold.let_go()
    await asyncio.get_running_loop().shutdown_default_executor()
    assert set(_groups_of_this_process()) - before == set()


async def test_a_fetch_step_cancelled_as_its_uid_is_claimed_leaves_no_claim(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch step (a clone, an arXiv read) claims a uid of its own the same way, in a
    thread, before its try that gives it back: cancelled as the uid was claimed and the
    staging folder handed to it (the agent's turn stopped), the claim stayed locked."""
    if not run_uid.wanted():
        pytest.skip("a uid of its own is claimed only as root")
    claims = _claims(monkeypatch)
    hold = Hold(monkeypatch, run_uid, "hand_tree")
    staging = workspace.parent / ".fetch-x"
    staging.mkdir(mode=0o700)
    box = FetchBox(staging, bwrap=confinement(allow_unconfined=False))
    stepping = asyncio.ensure_future(box.run(["true"], timeout_s=60))
    await cancel_held(stepping, hold, _nothing_to_close)
    assert claims and _left_of(claims) == []


async def _nothing_to_close() -> None:
    """A fetch step has no close: it gives its uid back as it ends."""


async def test_a_start_cancelled_as_the_workspace_is_carried_onto_its_volume_stops_the_copy(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt's workspace (its copy of its parent, gigabytes) is carried onto its
    volume as its sandbox starts: a stop landing then used to wait for the whole copy and
    then for the copy back, minutes for a big parent. Now the copy stops at its next file,
    the volume is dropped, and the workspace is whole in its plain folder."""
    from mlra.tools.sandbox import volume, volume_copy

    if (why := volume.unavailable()) is not None:
        pytest.skip(f"no workspace volume: {why}")
    for n in range(200):
        (workspace / f"{n}.txt").write_text(f"file {n}\n")
    box = LocalSandbox(workspace, SandboxSpec(disk_mb=48), isolation_mode="bwrap")
    hold = Hold(monkeypatch, volume_copy, "_copy_file", see=lambda copied, *_: copied)
    await cancel_held(asyncio.ensure_future(box.start()), hold, box.close)
    assert len(hold.seen) == 1, "the copy went on once its start was given up"
    assert not workspace.is_mount()
    assert not [p for p in workspace.parent.iterdir() if volume.TAG in p.name]
    assert sorted(p.read_text() for p in workspace.iterdir()) == sorted(
        f"file {n}\n" for n in range(200)
    )
