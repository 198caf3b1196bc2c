"""Attacks on what mlra itself reads of the agent's work, host-side.

mlra reads the workspace on the agent's behalf outside any sandbox (the file tools,
the console's preview, the snapshot scanner, freezing a submission or a validation,
a fork's restore, a batch shipping a run folder between machines), often as root.
Whatever the agent left there must not become mlra's memory, lead mlra to a host file
through a link, or stop the run: a sparse file of 2 or 40 GB costs nothing on disk; a
link to `/proc/self/environ` is mlra's own environment with its API keys; a name that
is not UTF-8, a folder 3,000 levels deep or a hundred thousand small files are one
command away.

Memory is measured honestly: the readers run in a fresh interpreter, whose peak
resident size (VmHWM, its own: not ru_maxrss, which counts the parent's at fork) is
what it reports at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import encode_event
from mlra.agent.record.snapshots import SnapshotLimits, SnapshotStore, WorkspaceScanner
from mlra.agent.record.workspace_history import WorkspaceHistory
from mlra.agent.run.resume import fork_run, load_run
from mlra.batch.executors import shipping
from mlra.tasks.spec import load_task
from mlra.tools.artifact_copy import SubmissionRefused
from mlra.tools.core import core_tools
from mlra.tools.registry import ToolContext, ToolRegistry, parse_arguments
from mlra.tools.sandbox import trees
from mlra.tools.sandbox.base import SandboxError
from mlra.tools.sandbox.dir_stack import DirStack
from mlra.tools.sandbox.host_copies import copy_in, copy_out
from mlra.tools.submission import freeze
from tests.scripts import call, turn
from tests.tools import test_sandbox_attacks as attacks
from tests.tools.test_sandbox_attacks import Box, Scene, _no_leaks, _run

scene = attacks.scene
"""The attack suite's host layout, with a canary in every secret (its fixture)."""
box = attacks.box
"""Each sandbox this machine has, under attack (the attack suite's fixture)."""

REPO = Path(__file__).resolve().parents[2]
GB = 2**30
ODD = b"caf\xe9 \xff.txt"
"""A name that is not UTF-8 (latin-1, and a byte no encoding makes)."""
PEAK_MB = 200


# --- huge sparse files ------------------------------------------------------------------

READERS = r"""
import asyncio, json, os, resource, sys
from pathlib import Path

from mlra.agent.record.snapshots import SnapshotStore, WorkspaceScanner
from mlra.agent.record.workspace_history import WorkspaceHistory
from mlra.batch.executors import shipping
from mlra.tools.core import core_tools
from mlra.tools.registry import ToolContext, ToolRegistry
from mlra.tools.sandbox.base import SandboxError, SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from mlra.tools.artifact_copy import SubmissionRefused
from mlra.tools.submission import freeze

run_dir = Path(sys.argv[1])
ws = run_dir / "workspace"
seen = {}

async def tools():
    sandbox = LocalSandbox(ws, SandboxSpec(), isolation_mode="none")
    registry = ToolRegistry(core_tools())
    ctx = ToolContext(sandbox=sandbox, agent="worker", call_id="c", on_output=lambda s, t: None,
                      default_timeout_s=60, remaining_s=lambda: 1e9)
    async def use(name, **arguments):
        outcome = await registry.dispatch(name, arguments, ctx)
        return {"ok": outcome.ok, "output": outcome.output[:2000]}
    seen["read whole"] = await use("read_file", path="big.txt")
    seen["read range"] = await use("read_file", path="big.txt", start_line=2, end_line=4)
    seen["read far"] = await use("read_file", path="big.txt", start_line=10**7)
    seen["read binary"] = await use("read_file", path="big.bin")
    seen["edit"] = await use("edit_file", path="big.txt", old_text="line 1\n", new_text="x\n")
    seen["list"] = await use("list_files", path=".")
    try:
        await sandbox.read_file("big.bin")  # what the console's preview reads through
        seen["preview"] = "read whole"
    except SandboxError as exc:
        seen["preview"] = str(exc)
    head, size = await sandbox.read_head("big.txt", 100)
    seen["head"] = [head.decode(), size]

asyncio.run(tools())
scanner = WorkspaceScanner(ws, SnapshotStore(run_dir))
snap = scanner.scan(step=1)
snap.seq = 1
seen["scan"] = [[c.path, c.size, c.sha256, c.stored] for c in snap.changed]
stored = sum(p.stat().st_size for p in (run_dir / "snapshots").rglob("*") if p.is_file())
seen["stored bytes"] = stored
for artifact in ("big.txt", "big.bin"):
    try:
        frozen = freeze(ws, artifact, run_dir / "frozen" / artifact, max_gb=float(sys.argv[2]))
        seen["freeze " + artifact] = [frozen.size_bytes, frozen.sha256]
    except SubmissionRefused as exc:
        seen["freeze " + artifact] = str(exc)
restored = run_dir / "restored"
seen["restore missing"] = WorkspaceHistory([snap], SnapshotStore(run_dir)).restore(
    1, restored, fallbacks=[ws]
)
st = (restored / "big.bin").stat()
seen["restored"] = [st.st_size, st.st_blocks * 512]
shipped = 0
for part in shipping.stream_tar(run_dir / "workspace", "workspace"):
    shipped += len(part)
seen["shipped bytes"] = shipped
# VmHWM: the peak of this process's own memory since it started. Not ru_maxrss, which
# Linux carries over from the parent across fork and exec: a pytest worker that has
# imported torch would lend its 600 MB to this count.
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
seen["peak MB"] = int(hwm.split()[1]) / 1024
print(json.dumps(seen))
"""


def _sparse(path: Path, size: int, head: bytes = b"") -> None:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    if path.stat().st_blocks * 512 > 16 * 2**20:
        pytest.skip("this file system does not keep holes")


@pytest.mark.parametrize("size_gb", [2, 40])
def test_huge_sparse_files_never_become_mlras_memory(tmp_path: Path, size_gb: int) -> None:
    run_dir = tmp_path / "run"
    ws = run_dir / "workspace"
    ws.mkdir(parents=True)
    text = b"".join(b"line %d\n" % n for n in range(1, 2001))
    _sparse(ws / "big.txt", size_gb * GB, text)  # text, then gigabytes of holes
    _sparse(ws / "big.bin", size_gb * GB)
    # A 2 GB artifact is frozen whole (copied sparsely, digested in chunks); the 40 GB
    # one is refused by a cap of 10 GB, as digesting 40 GB would take the test 30 s.
    proc = subprocess.run(
        [sys.executable, "-c", READERS, str(run_dir), "10"],
        capture_output=True, text=True, cwd=REPO, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout)
    assert seen["peak MB"] < PEAK_MB, seen

    whole = seen["read whole"]
    assert not whole["ok"] and f"big.txt is {size_gb}.0 GiB, too large" in whole["output"]
    assert "start_line and end_line" in whole["output"] and "sed -n" in whole["output"]
    assert seen["read range"]["ok"] and "line 2\n" in seen["read range"]["output"]
    assert "too large to count its lines" in seen["read range"]["output"]
    far = seen["read far"]
    assert not far["ok"] and "is not within its first 256.0 MiB" in far["output"]
    assert "binary file" in seen["read binary"]["output"]
    assert not seen["edit"]["ok"] and "too large for edit_file" in seen["edit"]["output"]
    assert f"big.bin  {size_gb}.0 GiB" in seen["list"]["output"]
    assert "more than the 8.0 MiB that can be read whole" in seen["preview"]
    head, size = seen["head"]
    assert len(head) == 100 and head.startswith("line 1\nline 2\n") and size == size_gb * GB

    # Recorded by size and time only: larger than what one scan reads, never hashed.
    assert sorted(seen["scan"]) == [
        ["big.bin", size_gb * GB, None, False],
        ["big.txt", size_gb * GB, None, False],
    ]
    assert seen["stored bytes"] == 0
    if size_gb <= 10:
        assert seen["freeze big.bin"][0] == size_gb * GB
    else:
        assert "more than the 10.0 GB a submission may hold" in seen["freeze big.bin"]
    # The fork's restore takes them from the source workspace, holes kept.
    assert seen["restore missing"] == []
    assert seen["restored"][0] == size_gb * GB and seen["restored"][1] < 16 * 2**20
    assert seen["shipped bytes"] < 2**20  # a sparse member: the data only


# --- links to host files and to /proc ----------------------------------------------------


def _plant_links(scene: Scene) -> None:
    # mlra's environment as /proc shows it (the one it was started with): a canary too.
    with open("/proc/self/environ", "rb") as f:
        started = [v for v in f.read().split(b"\0") if v.startswith(b"PATH=")]
    scene.canaries["mlra's environment"] = os.fsdecode(started[0])
    ws = scene.workspace
    (ws / "leak.txt").symlink_to(scene.hidden / "secret.txt")
    (ws / "environ").symlink_to("/proc/self/environ")
    (ws / "mlra-environ").symlink_to(f"/proc/{os.getpid()}/environ")
    (ws / "home").symlink_to(scene.home)
    (ws / "up").symlink_to("../../../tasks")
    (ws / "inside.txt").symlink_to("question.txt")  # stays inside: fine to follow


HOST_PATHS = [
    "leak.txt",
    "environ",
    "mlra-environ",
    "home/.bashrc",
    "home/.env",
    "up/answer-attack/hidden/secret.txt",
]


async def test_links_out_of_the_workspace_read_nothing_of_the_host_through_any_sandbox(
    box: Box, scene: Scene
) -> None:
    _plant_links(scene)
    host = box.host
    seen: list[str] = []
    for path in HOST_PATHS:
        for read in (host.read_file(path), host.read_head(path, 1 << 20)):
            with pytest.raises(SandboxError, match="outside the workspace"):
                await read
    assert await host.read_file("inside.txt") == (scene.workspace / "question.txt").read_bytes()
    listed = await host.list_tree(".", max_depth=6)
    seen += [f"{i.path} {i.size}" for i in listed]
    assert not any(i.path.startswith(("home/", "up/")) for i in listed)

    registry = ToolRegistry(core_tools())
    ctx = ToolContext(
        sandbox=host, agent="worker", call_id="c", on_output=lambda s, t: None,
        default_timeout_s=60, remaining_s=lambda: 1e9,
    )  # fmt: skip

    async def use(name: str, **arguments: object) -> str:
        args, problem = parse_arguments(dict(arguments))
        outcome = await registry.dispatch(name, args, ctx, parse_error=problem)
        return outcome.output

    for path in HOST_PATHS:
        seen.append(await use("read_file", path=path))
        seen.append(await use("read_file", path=path, start_line=1, end_line=3))
        seen.append(await use("edit_file", path=path, old_text="API", new_text="x"))
        seen.append(await use("list_files", path=path.rsplit("/", 1)[0]))
    seen.append(await use("list_files", path=".", depth=5))
    out = scene.root / "copied-out"
    await copy_out(host, ".", out)
    for path in out.rglob("*"):
        if path.is_file():
            seen.append(path.read_text(errors="replace"))
    assert not (out / "leak.txt").exists() and not (out / "environ").exists()
    assert (out / "inside.txt").read_bytes() == (scene.workspace / "question.txt").read_bytes()
    _no_leaks(scene, "\n".join(seen))
    assert (scene.hidden / "secret.txt").read_text().startswith("hidden-secret")


def test_links_out_of_the_workspace_reach_no_snapshot_copy_fork_or_shipment(
    scene: Scene, tmp_path: Path
) -> None:
    _plant_links(scene)
    run_dir = scene.run_dir
    scanner = WorkspaceScanner(scene.workspace, SnapshotStore(run_dir))
    snap = scanner.scan(step=1)
    assert snap is not None
    snap.seq = 1
    assert sorted(c.path for c in snap.changed) == ["question.txt"]  # links are not files
    texts = [encode_event(snap).decode()]

    for artifact in (".", "leak.txt", "environ", "home", "up/answer-attack/hidden"):
        with pytest.raises(SubmissionRefused) as refused:
            freeze(scene.workspace, artifact, tmp_path / "frozen", workdir="/workspace")
        texts.append(str(refused.value))
        assert not (tmp_path / "frozen").exists()

    restored = tmp_path / "restored"
    history = WorkspaceHistory([snap], SnapshotStore(run_dir))
    assert history.restore(1, restored, fallbacks=[scene.workspace]) == []
    assert sorted(os.listdir(restored)) == ["question.txt"]

    shipped = b"".join(shipping.stream_tar(run_dir, run_dir.name))
    back = tmp_path / "back"
    shipping.unpack([shipped], back)
    left_out = (back / run_dir.name / shipping.LEFT_OUT).read_text()
    assert "leak.txt" in left_out and "outside the folder" in left_out
    for path in back.rglob("*"):
        if path.is_file() and not path.is_symlink():
            texts.append(path.read_text(errors="replace"))
    for path in run_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            texts.append(path.read_text(errors="replace"))
    _no_leaks(scene, "\n".join(texts))


# --- any bytes in a name ------------------------------------------------------------------


def test_a_name_that_is_not_utf8_goes_through_a_whole_run_replay_fork_and_shipping(
    scene: Scene, tmp_path: Path
) -> None:
    name = os.fsdecode(ODD)
    run = _run(
        scene,
        "local",
        [
            turn("", call("bash", command="printf latin > \"$(printf 'caf\\351 \\377.txt')\"; ls")),
            turn("", call("list_files", path=".")),
            turn("", call("read_file", path=name)),  # the model can say it back, escaped
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    )
    assert run.code == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.evaluation.ok and run.evaluation.score == 1.0
    read = [e for e in run.events if isinstance(e, ev.ToolResult) and e.tool == "read_file"]
    assert read[0].ok and "latin" in read[0].output
    # The log holds the name exactly: written as JSON escapes, read back to the same str.
    changes = [c for e in run.events if isinstance(e, ev.WorkspaceSnapshot) for c in e.changed]
    (odd,) = [c for c in changes if c.path == name]
    assert os.fsencode(odd.path) == ODD
    raw = (run.run_dir / "events.jsonl").read_bytes()
    assert b"caf\\udce9 \\udcff.txt" in raw and ODD not in raw

    history = WorkspaceHistory(run.events, SnapshotStore(run.run_dir))
    assert history.read_at(name) == b"latin"
    assert name in [i.path for i in history.tree_at()]

    # A fork before the answer was written restores the name's very bytes.
    source = load_run(run.run_dir)
    forked = fork_run(
        source, load_task(scene.task), at_step=4, run_dir=tmp_path / "fork", model="baseline"
    )
    restored = os.listdir(os.fsencode(forked.run_dir / "workspace"))
    assert ODD in restored and b"answer.txt" not in restored
    assert (forked.run_dir / "workspace" / name).read_bytes() == b"latin"

    # Replay, headless: the name is shown, not crashed on.
    from tests.conftest import mlra_cli

    shown = mlra_cli(["replay", str(run.run_dir), "--no-tui"], cwd=scene.cwd)
    assert shown.returncode == 0, shown.stderr
    assert "caf" in shown.stdout

    back = tmp_path / "back"
    shipping.unpack(shipping.stream_tar(run.run_dir, "run"), back)
    assert ODD in os.listdir(os.fsencode(back / "run" / "workspace"))


# --- a folder 3,000 levels deep ------------------------------------------------------------

DEEP = 3000
MAKE_DEEP = (
    'python3 -c "import os\n'
    f"for _ in range({DEEP}):\n"
    "    os.mkdir('d'); os.chdir('d')\n"
    "open('bottom.txt', 'w').write('found')\""
)


def test_a_folder_3000_deep_breaks_no_later_snapshot_fork_replay_submission_or_shipping(
    scene: Scene, tmp_path: Path
) -> None:
    run = _run(
        scene,
        "local",
        [
            turn("", call("bash", command=MAKE_DEEP)),
            turn("", call("bash", command="echo 42 > answer.txt; echo notes > notes.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    )
    assert run.code == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.evaluation.ok and run.evaluation.score == 1.0
    snaps = [e for e in run.events if isinstance(e, ev.WorkspaceSnapshot)]
    bottom = "d/" * DEEP + "bottom.txt"
    recorded = {c.path for s in snaps for c in s.changed}
    assert bottom in recorded  # the deep file itself, path past PATH_MAX and all
    assert {"answer.txt", "notes.txt"} <= recorded  # and what later steps changed
    assert not [e for e in run.events if isinstance(e, ev.Notice) and "snapshot" in e.message]

    # Replay's tree, and a fork at the last step, have the deep file.
    history = WorkspaceHistory(run.events, SnapshotStore(run.run_dir))
    assert history.read_at(bottom) == b"found"
    assert len([i for i in history.tree_at() if i.is_dir]) == DEEP
    forked = fork_run(
        load_run(run.run_dir), load_task(scene.task), at_step=3,
        run_dir=tmp_path / "fork", model="baseline",
    )  # fmt: skip
    assert forked.events[-1].type == "run_forked"
    fork_ws = forked.run_dir / "workspace"
    assert (fork_ws / "answer.txt").read_text() == "42\n"
    fd = os.open(fork_ws, os.O_RDONLY)
    with DirStack(fd) as dirs:
        at = dirs.move_to(["d"] * DEEP)
        found = os.open("bottom.txt", os.O_RDONLY, dir_fd=at)
        assert os.read(found, 10) == b"found"
        os.close(found)
    os.close(fd)

    # The whole workspace as a submission, and the run folder shipped to another machine.
    frozen = freeze(run.run_dir / "workspace", ".", tmp_path / "frozen")
    assert frozen.size_bytes == len("found") + len("42\n") + len("notes\n") + len(
        (scene.task / "starter" / "question.txt").read_bytes()
    )
    back = tmp_path / "back"
    shipping.unpack(shipping.stream_tar(run.run_dir, "run"), back)
    assert (back / "run" / "workspace" / "answer.txt").read_text() == "42\n"
    assert "deeper than 128 folders" in (back / "run" / shipping.LEFT_OUT).read_text()
    for folder in (tmp_path / "frozen", back, forked.run_dir, run.run_dir):
        trees.remove_tree(folder)  # pytest's own clean-up recurses


# --- many small files ---------------------------------------------------------------------


def test_many_small_files_bound_the_snapshot_event_the_scan_and_the_store(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    for d in range(12):
        folder = ws / f"shard-{d:02d}"
        folder.mkdir(parents=True)
        for i in range(1000):
            (folder / f"example-{i:05d}.json").write_text(f'{{"id": {d * 1000 + i}}}\n' * 8)
    limits = SnapshotLimits(quota_bytes=256 * 1024, scan_files=3000)
    scanner = WorkspaceScanner(ws, SnapshotStore(tmp_path / "run"), limits=limits)
    snap = scanner.scan(step=1)
    assert snap is not None and snap.left_out is not None
    line = encode_event(snap)
    assert len(line) < limits.event_bytes + 16 * 1024  # the issue saw a 15.8 MB line
    listed = len(snap.changed)
    assert snap.left_out.changed == 12_000 - listed > 0
    notes = " ".join(snap.left_out.notes)
    assert "not listed" in notes and "recorded by size and time only" in notes
    assert "quota" in notes
    hashed = [c for c in snap.changed if c.sha256 is not None]
    assert len(hashed) <= 3000
    store = sum(p.stat().st_size for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert store <= limits.quota_bytes
    assert len(scanner.notices) == 1 and "quota of 0 MiB" in scanner.notices[0]

    # Nothing changed: nothing to say. One more file past the quota: one entry, no new notice.
    assert scanner.scan(step=2) is None
    (ws / "late.txt").write_text("late\n" * 1000)
    later = scanner.scan(step=3)
    assert later is not None and [c.path for c in later.changed] == ["late.txt"]
    assert later.changed[0].stored is False and later.changed[0].sha256 is not None
    assert len(scanner.notices) == 1

    # A bound on the entries one scan walks: no removal is claimed past where it stopped.
    walked = WorkspaceScanner(
        ws, SnapshotStore(tmp_path / "run2"), limits=SnapshotLimits(scan_entries=5000)
    )
    walked.index = dict(scanner.index)
    cut = walked.scan(step=4)
    assert cut is not None and cut.left_out is not None and cut.removed == []
    assert "stopped after 5,000 entries" in " ".join(cut.left_out.notes)
    assert walked.scan(step=5) is None  # the same gap again is no news


def test_tiny_distinct_files_fill_the_snapshot_store_by_the_disk_they_take(
    tmp_path: Path,
) -> None:
    """1,000 distinct 12-byte files: 12 KB to their sizes, 4 MB and 1,000 inodes of the
    run folder's disk once stored (a block each). Counted by sizes, a 256 KiB store took
    them all, and an agent rewriting 5,000 such files a step filled the host's disk
    and inodes beside a store that thought itself nearly empty."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(1000):
        (ws / f"{i:04d}").write_text(f"{i:012d}")
    limits = SnapshotLimits(quota_bytes=256 * 1024)
    scanner = WorkspaceScanner(ws, SnapshotStore(tmp_path / "run"), limits=limits)
    snap = scanner.scan(step=1)
    assert snap is not None and len(snap.changed) == 1000
    assert all(c.sha256 is not None for c in snap.changed)  # every file still hashed
    block = os.statvfs(tmp_path).f_frsize
    objects = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    taken = sum(max(p.stat().st_blocks * 512, block) for p in objects)
    assert taken <= limits.quota_bytes
    assert len(objects) <= limits.quota_bytes // block
    assert len(scanner.notices) == 1 and "quota" in scanner.notices[0]
    # A store opened again (a resume) counts what it holds the same way: nothing more fits.
    (ws / "late").write_text("late")
    again = WorkspaceScanner(ws, SnapshotStore(tmp_path / "run"), limits=limits)
    again.index = dict(scanner.index)
    later = again.scan(step=2)
    assert later is not None and later.changed[0].stored is False


def test_many_small_files_in_a_whole_run_keep_the_log_small(scene: Scene, tmp_path: Path) -> None:
    make = (
        'python3 -c "import os\n'
        "for d in range(20):\n"
        "    os.makedirs(f'data/{d}')\n"
        "    for i in range(1000):\n"
        "        open(f'data/{d}/{i}.txt', 'w').write(str(i) * 50)\""
    )
    run = _run(
        scene,
        "local",
        [
            turn("", call("bash", command=make)),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
        # Room for the 20,000 files whatever the runs disk has free: the default quota
        # (and its inode budget) shrinks with the machine's free space.
        flags=["--disk", "512m"],
    )
    assert run.code == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.evaluation.ok and run.evaluation.score == 1.0
    lines = (run.run_dir / "events.jsonl").read_bytes().splitlines()
    biggest = max(len(line) for line in lines if b'"workspace_snapshot"' in line)
    assert biggest < 512 * 1024
    snaps = [e for e in run.events if isinstance(e, ev.WorkspaceSnapshot)]
    assert any(s.left_out is not None and s.left_out.changed for s in snaps)
    assert "answer.txt" in {c.path for s in snaps for c in s.changed}
    assert "the workspace snapshot after step 1 left out:" in run.stdout  # said as it ran
    assert run.started.config["snapshot_quota_mb"] == 1024.0  # the store's quota, recorded
    # A fork says what it cannot restore, since it was never recorded.
    forked = fork_run(
        load_run(run.run_dir), load_task(scene.task), at_step=3,
        run_dir=tmp_path / "fork", model="baseline",
    )  # fmt: skip
    fork_event = next(e for e in forked.events if isinstance(e, ev.RunForked))
    assert fork_event.not_recorded and "after step 1:" in fork_event.not_recorded[0]
    assert (forked.run_dir / "workspace" / "answer.txt").read_text() == "42\n"


async def test_copy_in_keeps_links_as_links_and_copies_deep_folders(
    scene: Scene, tmp_path: Path
) -> None:
    # What a research tool brings in (a clone) can hold links to host files and deep folders.
    from mlra.tools.sandbox.base import SandboxSpec
    from mlra.tools.sandbox.local import LocalSandbox

    source = tmp_path / "clone"
    source.mkdir()
    fd = os.open(source, os.O_RDONLY)
    with DirStack(fd) as dirs:  # pathlib's mkdir recurses, one call a level
        bottom = os.open(
            "bottom.txt", os.O_WRONLY | os.O_CREAT, dir_fd=dirs.move_to(["d"] * 1500, create=True)
        )
        os.write(bottom, b"found")
        os.close(bottom)
    os.close(fd)
    (source / "README.md").symlink_to(scene.hidden / "secret.txt")
    sandbox = LocalSandbox(scene.workspace, SandboxSpec(), isolation_mode="none")
    await copy_in(sandbox, source, "repos/clone")
    copied = scene.workspace / "repos" / "clone"
    assert os.readlink(copied / "README.md") == str(scene.hidden / "secret.txt")
    with pytest.raises(SandboxError, match="outside the workspace"):
        await sandbox.read_file("repos/clone/README.md")
    listed = await sandbox.list_tree("repos/clone", max_depth=3000)
    assert any(i.path.endswith("/bottom.txt") for i in listed)
    trees.remove_tree(source)
    trees.remove_tree(copied)
