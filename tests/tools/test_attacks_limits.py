"""Memory and disk attacks on every sandbox this machine has: bounded, told, recorded.

Without default limits one command held 4 GiB in a process plus 3 GiB in `/tmp` and
1 GiB in `/dev/shm` (both RAM), and nothing bounded what it wrote into the workspace.
Each attack here runs against the sandboxes of tests/tools/test_sandbox_attacks.py
(its Scene and helpers), with small limits set as a user or a task would set them
(a few hundred MB of memory, a few MB of disk: nothing here allocates gigabytes):

- a process, /tmp and /dev/shm that together pass the memory limit: the command is
  killed and its output says so (a cgroup or a container counts the files too);
- /tmp and /dev/shm alone cannot hold more than their bounds;
- where no cgroup can be had (mlra as `nobody`), the limits recorded are the ones that
  hold: per process, tmpfs sized by a bubblewrap that can, unsized (and said so) by one
  that cannot;
- a command writing past the workspace's disk quota kept by the du watcher (where no
  volume can be had) is stopped and told, mlra refuses a write that does not fit, and
  the sandbox still works once files are deleted (the volume, which the kernel keeps:
  test_workspace_volume.py);
- whole runs: the defaults are in force and recorded in `run_started` with no flag,
  the flags override them, a bad value is one line and exit 2, and a run whose agent
  fills its quota still scores its honest answer;
- the grader's memory is bounded (the task's, else the default) and recorded.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.tasks.evaluators.base import run_evaluation
from mlra.tasks.spec import load_task
from mlra.tools.sandbox.base import SandboxError, SandboxSpec
from mlra.tools.sandbox.default_limits import default_memory, tmpfs_bounds
from mlra.tools.sandbox.local import LocalSandbox
from tests.conftest import TEST_IMAGE, docker_address, docker_problem, mlra_cli
from tests.scripts import call, turn
from tests.tools import test_sandbox_attacks as attacks
from tests.tools.test_sandbox_attacks import (
    RUN_SANDBOXES,
    Box,
    InProcessBox,
    NobodyBox,
    Scene,
    _bundled_bwrap,
    _nobody_problem,
    _run,
    _system_bwrap,
    still_honest,
)

scene = attacks.scene
"""The attack suite's host layout (its fixture, used here under the same name)."""

MEMORY_MB = 256
DISK_MB = 4
TMP_MB, SHM_MB = tmpfs_bounds(MEMORY_MB)
MEMORY_NOTE = f"memory limit of {MEMORY_MB} MB"
QUOTA_NOTE = "over its disk"

CGROUP_SANDBOXES = [
    pytest.param(
        "bwrap-system",
        marks=pytest.mark.skipif(_system_bwrap() is None, reason="no system bwrap"),
    ),
    pytest.param(
        "bwrap-bundled",
        marks=pytest.mark.skipif(_bundled_bwrap() is None, reason="no bundled bwrap"),
    ),
    pytest.param(
        "docker",
        marks=pytest.mark.skipif(docker_problem() is not None, reason=docker_problem() or ""),
    ),
]
"""Sandboxes mlra makes as root here: each holds its commands in a cgroup or a container."""

NOBODY_SANDBOXES = [
    pytest.param(
        "nobody-system",
        marks=pytest.mark.skipif(
            _nobody_problem() is not None or _system_bwrap() is None,
            reason=_nobody_problem() or "no system bwrap",
        ),
    ),
    pytest.param(
        "nobody-bundled",
        marks=pytest.mark.skipif(
            _nobody_problem() is not None or _bundled_bwrap() is None,
            reason=_nobody_problem() or "no bundled bwrap",
        ),
    ),
]
"""bubblewrap started by an mlra running as `nobody`: no cgroup can be made, rlimits only."""


def _make_box(kind: str, scene: Scene, spec: SandboxSpec) -> Box:
    if kind in ("bwrap-system", "bwrap-bundled"):
        binary = _system_bwrap() if kind == "bwrap-system" else _bundled_bwrap()
        assert binary is not None
        return InProcessBox(
            kind,
            LocalSandbox(
                scene.workspace, spec, isolation_mode="bwrap",
                bwrap_search_path=str(Path(binary).parent),
            ),
        )  # fmt: skip
    if kind == "docker":
        from mlra.tools.sandbox.docker_sandbox import DockerSandbox

        return InProcessBox(
            kind,
            DockerSandbox(scene.workspace, spec, image=TEST_IMAGE, run_id=f"limits-{scene.token}"),
        )
    binary = _system_bwrap() if kind == "nobody-system" else _bundled_bwrap()
    made = NobodyBox(scene, str(Path(binary or "").parent))
    made.name = kind
    made.extra = {"memory_mb": spec.memory_mb, "disk_mb": spec.disk_mb}
    # The host side's own copy of the sandbox (for mlra's writes) has the same quota.
    made.host = LocalSandbox(
        scene.workspace, spec, isolation_mode="bwrap", bwrap_search_path=made.search_path
    )
    return made


@pytest.fixture
async def limited(
    request: pytest.FixtureRequest, scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Box]:
    """A sandbox of the kind named by the test's parameter, with small limits."""
    kind: str = request.param
    if kind == "docker":
        monkeypatch.setenv("DOCKER_HOST", docker_address() or "")
    # The du watcher's quota (kept where no volume can be had, as for nobody); the
    # volume's, kept by the kernel, is tested in test_workspace_volume.py.
    spec = SandboxSpec(
        hide_paths=scene.hide_paths(), memory_mb=MEMORY_MB, disk_mb=DISK_MB, disk_volume=False
    )
    made = _make_box(kind, scene, spec)
    if isinstance(made, InProcessBox):
        await made.host.start()
    try:
        yield made
    finally:
        await made.close()


def _limits(box: Box) -> ev.LimitsInForce:
    if isinstance(box, NobodyBox):
        assert box.last_answer is not None, "no command has run as nobody yet"
        return ev.LimitsInForce.model_validate(box.last_answer["limits"])
    return box.host.limits


# --- memory -----------------------------------------------------------------------------

HOG = (
    "dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>/dev/null && echo TMP-HELD;"
    "dd if=/dev/zero of=/dev/shm/fill bs=1M count=50 2>/dev/null && echo SHM-HELD;"
    "python3 -c \"x = bytearray(200 << 20); x[::4096] = b'1' * len(x[::4096]); "
    "print('ALL-HELD')\"; echo python-exit=$?"
)
"""100 MB in /tmp, 50 MB in /dev/shm (each within its own bound), then 200 MB in a
process: 350 MB in all, past a limit of 256 MB only if the files are counted."""


@pytest.mark.parametrize("limited", CGROUP_SANDBOXES, indirect=True)
async def test_a_process_with_tmp_and_shm_over_the_limit_is_killed_and_told(
    limited: Box,
) -> None:
    result = await limited.sh(HOG)
    assert "TMP-HELD" in result.output and "SHM-HELD" in result.output, result.output
    assert "ALL-HELD" not in result.output, "350 MB were held under a 256 MB limit"
    assert MEMORY_NOTE in result.output, result.output
    limits = _limits(limited)
    assert limits.memory_mb == MEMORY_MB and limits.tmpfs_counted is True, limits
    assert limits.via in ("cgroup v1", "cgroup v2", "docker"), limits
    # The files died with the command (bubblewrap) or are still there (a container's
    # /tmp lasts): either way the next command runs.
    await limited.sh("rm -f /tmp/fill /dev/shm/fill")
    await still_honest(limited)


@pytest.mark.parametrize("limited", CGROUP_SANDBOXES, indirect=True)
async def test_tmp_and_shm_alone_hold_no_more_than_their_bounds(limited: Box) -> None:
    result = await limited.sh(
        "dd if=/dev/zero of=/tmp/big bs=1M count=300 2>/dev/null;"
        "echo tmp=$(wc -c < /tmp/big); rm -f /tmp/big;"
        "dd if=/dev/zero of=/dev/shm/big bs=1M count=300 2>/dev/null;"
        "echo shm=$(wc -c < /dev/shm/big); rm -f /dev/shm/big"
    )
    sizes = dict(
        line.split("=", 1) for line in result.output.splitlines() if line[:4] in ("tmp=", "shm=")
    )
    limits = _limits(limited)
    tmp_bound = (limits.tmp_mb or MEMORY_MB) << 20
    shm_bound = (limits.shm_mb or MEMORY_MB) << 20
    assert 0 < int(sizes["tmp"]) <= tmp_bound, (result.output, limits)
    assert 0 < int(sizes["shm"]) <= shm_bound, (result.output, limits)
    if limited.name != "bwrap-system":  # bubblewrap 0.8 cannot size a tmpfs
        assert (limits.tmp_mb, limits.shm_mb) == (TMP_MB, SHM_MB), limits
    await still_honest(limited)


@pytest.mark.parametrize("limited", NOBODY_SANDBOXES, indirect=True)
async def test_without_a_cgroup_the_limits_recorded_are_the_ones_that_hold(
    limited: Box,
) -> None:
    # One process past the limit is refused its memory (RLIMIT_DATA), and told.
    result = await limited.sh("python3 -c \"x = bytearray(400 << 20); print('HELD')\"")
    assert "HELD" not in result.output and MEMORY_NOTE in result.output, result.output
    limits = _limits(limited)
    assert limits.via == "rlimit" and limits.tmpfs_counted is False, limits
    assert any("per process" in note for note in limits.notes), limits.notes
    if limited.name == "nobody-bundled":
        # bubblewrap 0.11 sizes /tmp and /dev/shm: files there stop at their bounds.
        assert (limits.tmp_mb, limits.shm_mb) == (TMP_MB, SHM_MB), limits
        result = await limited.sh(
            "dd if=/dev/zero of=/tmp/big bs=1M count=300 2>/dev/null; wc -c < /tmp/big"
        )
        assert int(result.output.split()[-1]) <= TMP_MB << 20, result.output
    else:
        # bubblewrap 0.8 cannot: the log says /tmp and /dev/shm are bounded by nothing.
        assert limits.tmp_mb is None and limits.shm_mb is None, limits
        assert any("cannot size a tmpfs" in note for note in limits.notes), limits.notes
    await still_honest(limited)


# --- disk -------------------------------------------------------------------------------

WRITER = (
    "i=0; while [ $i -lt 1000 ]; do head -c 262144 /dev/zero > chunk-$i || exit 1; "
    "i=$((i+1)); sleep 0.01; done; echo WROTE-ALL"
)
"""256 KB at a time, 250 MB if nothing stopped it."""


@pytest.mark.parametrize("limited", [*CGROUP_SANDBOXES, *NOBODY_SANDBOXES], indirect=True)
async def test_writing_past_the_disk_quota_is_stopped_and_told(limited: Box, scene: Scene) -> None:
    result = await limited.sh(WRITER)
    assert "WROTE-ALL" not in result.output
    assert QUOTA_NOTE in result.output and f"quota of {DISK_MB:.1f} MB" in result.output, (
        result.output[-2000:]
    )
    held = sum(p.stat().st_blocks * 512 for p in scene.workspace.glob("chunk-*"))
    assert held < 100 << 20, f"{held} bytes written under a {DISK_MB} MB quota"
    # mlra's own write is refused while the workspace is over its quota...
    with pytest.raises(SandboxError, match="disk quota"):
        await limited.host.write_file("more.bin", b"x" * 100_000)
    assert not (scene.workspace / "more.bin").exists()
    # ...and deleting files works: the agent can get back under it and go on.
    result = await limited.sh("rm -f chunk-*; echo cleaned")
    assert "cleaned" in result.output and QUOTA_NOTE not in result.output, result.output
    await still_honest(limited)
    # A write larger than the whole quota is refused up front.
    with pytest.raises(SandboxError, match="disk quota"):
        await limited.host.write_file("huge.bin", b"x" * ((DISK_MB + 1) << 20))


async def test_a_background_job_writing_past_the_quota_is_stopped(scene: Scene) -> None:
    """Every command of the sandbox is stopped, not only the one that wrote last."""
    sandbox = LocalSandbox(
        scene.workspace,
        SandboxSpec(hide_paths=scene.hide_paths(), disk_mb=DISK_MB, disk_volume=False),
        isolation_mode="bwrap",
    )
    await sandbox.start()
    try:
        idle = asyncio.create_task(sandbox.exec(["sh", "-c", "sleep 120; echo SLEPT"], timeout=150))
        writer = await sandbox.exec(["sh", "-c", WRITER], timeout=60)
        sleeper = await asyncio.wait_for(idle, 30)
        assert QUOTA_NOTE in writer.output and QUOTA_NOTE in sleeper.output
        assert "SLEPT" not in sleeper.output
    finally:
        await sandbox.close()


async def test_a_command_started_while_a_quota_stop_sweeps_the_sandbox_runs_after_it(
    scene: Scene,
) -> None:
    """A stop kills the running commands, then sweeps what is left in the sandbox; the
    stopped command's result comes back before the sweep. The agent's next command,
    the `rm` getting back under the quota, started in that gap and was swept with no
    output (exit -9 on CI). It now starts once the stop is done."""
    sandbox = LocalSandbox(
        scene.workspace,
        SandboxSpec(hide_paths=scene.hide_paths(), disk_mb=DISK_MB, disk_volume=False),
        isolation_mode="bwrap",
    )
    real_stop = sandbox._stop_for_quota
    sweeping, release = asyncio.Event(), asyncio.Event()

    async def stop_with_a_slow_sweep() -> None:
        await real_stop()
        sweeping.set()
        await release.wait()
        await real_stop()  # the sweep: whatever runs in the sandbox now is killed

    sandbox._stop_for_quota = stop_with_a_slow_sweep  # type: ignore[method-assign]
    await sandbox.start()
    try:
        writer = await sandbox.exec(["sh", "-c", WRITER], timeout=60)
        assert QUOTA_NOTE in writer.output, writer.output
        await asyncio.wait_for(sweeping.wait(), 30)
        cleaning = asyncio.create_task(
            sandbox.exec(["sh", "-c", "touch started; rm -f chunk-*; echo cleaned"], timeout=60)
        )
        # Given a moment, it has not started: it waits for the sweep (on an idle
        # machine it would have started by now; a loaded one only makes this weaker).
        done, _ = await asyncio.wait({cleaning}, timeout=1.0)
        assert not done and not (scene.workspace / "started").exists()
        release.set()
        cleaned = await asyncio.wait_for(cleaning, 60)
        assert "cleaned" in cleaned.output and QUOTA_NOTE not in cleaned.output, cleaned
    finally:
        release.set()
        await sandbox.close()


# --- whole runs -------------------------------------------------------------------------


FULL_NOTE = "[the workspace is full"


def _on_a_volume(limits: ev.LimitsInForce) -> bool:
    return (limits.disk_by or "").startswith("ext4 image")


@pytest.mark.parametrize("sandbox", RUN_SANDBOXES)
def test_the_defaults_are_in_force_and_recorded_with_no_flag(scene: Scene, sandbox: str) -> None:
    run = _run(
        scene,
        sandbox,
        [
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    )
    assert run.code == 0, run.stderr
    info = run.started.sandbox
    assert info is not None and info.limits is not None
    limits = info.limits
    expected = default_memory()
    assert limits.memory_mb == expected.mb, limits
    assert limits.sources["memory_mb"] == expected.source, limits.sources
    assert limits.sources["disk_mb"].startswith("default: half the"), limits.sources
    assert limits.disk_mb is not None and 0 < limits.disk_mb <= 200 * 1024, limits
    if _on_a_volume(limits):  # root with loop devices: the kernel keeps the quota
        assert limits.disk_check_s is None and limits.disk_inodes, limits
    else:
        assert limits.disk_check_s is not None and limits.disk_by, limits
    assert limits.tmpfs_counted is True, limits  # a cgroup (root here) or the container
    if sandbox == "docker":
        assert (limits.tmp_mb, limits.shm_mb) == tmpfs_bounds(expected.mb or 0), limits
    assert run.evaluation.ok and run.evaluation.score == 1.0
    grader = run.evaluation.evaluator_limits
    assert grader is not None and grader.memory_mb == expected.mb, grader
    assert grader.disk_mb and grader.sources["disk_mb"].startswith("default:"), grader


@pytest.mark.parametrize("sandbox", RUN_SANDBOXES)
def test_a_run_that_fills_its_quota_is_told_and_still_scores(scene: Scene, sandbox: str) -> None:
    quota_mb = 1
    run = _run(
        scene,
        sandbox,
        [
            turn("", call("bash", command=WRITER)),
            turn("", call("write_file", path="more.txt", content="x" * (1200 * 1024))),
            turn("", call("bash", command="rm -f chunk-*; echo 42 > answer.txt; echo done")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
        flags=["--disk", f"{quota_mb}m", "--memory", "300m"],
    )
    assert run.code == 0, run.stderr
    limits = run.started.sandbox.limits
    assert limits is not None
    assert (limits.disk_mb, limits.memory_mb) == (quota_mb, 300), limits
    assert limits.sources["disk_mb"] == "--disk" and limits.sources["memory_mb"] == "--memory"
    results = [e for e in run.events if isinstance(e, ev.ToolResult) and e.agent == "worker"]
    writer, write_file, cleanup = results[:3]
    told = FULL_NOTE if _on_a_volume(limits) else QUOTA_NOTE  # ENOSPC, or a stop
    assert told in writer.output and "WROTE-ALL" not in writer.output, writer.output
    assert not write_file.ok and "disk quota" in write_file.output, write_file.output
    assert cleanup.ok and "done" in cleanup.output, cleanup.output
    assert not (run.run_dir / "workspace" / "more.txt").exists()
    assert run.evaluation.ok and run.evaluation.score == 1.0
    assert json.loads((run.run_dir / "result.json").read_text())["score"] == 1.0


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--memory", "0", "too small"),
        ("--memory", "2m", "too small"),
        ("--memory", "lots", "not a size"),
        ("--memory", "inf", "not a size"),
        ("--disk", "-5g", "too small"),
        ("--disk", "5x", "not a size"),
        ("--disk", "9999999t", "too large"),
    ],
)
def test_a_limit_that_makes_no_sense_is_one_line_and_exit_2(
    scene: Scene, flag: str, value: str, said: str
) -> None:
    proc = mlra_cli(
        ["run", str(scene.task), "--model", "baseline", "--no-tui", f"{flag}={value}"],
        cwd=scene.cwd,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and said in lines[0], proc.stderr


# --- the grader -------------------------------------------------------------------------

GRADER_HOG = """\
import json, sys
from pathlib import Path

artifact, root, out = (Path(a) for a in sys.argv[1:4])
hog = bytearray(400 << 20)
hog[::4096] = b"1" * len(hog[::4096])
out.write_text(json.dumps({"score": 1.0}))
"""


async def test_the_graders_memory_is_bounded_and_recorded(scene: Scene, tmp_path: Path) -> None:
    toml = scene.task / "task.toml"
    toml.write_text(toml.read_text().replace("[resources]\n", "[resources]\nmemory_gb = 0.25\n"))
    (scene.hidden / "check.py").write_text(GRADER_HOG)
    artifact = tmp_path / "answer.txt"
    artifact.write_text("42\n")
    outcome = await run_evaluation(
        load_task(scene.task), artifact, tmp_path / "grading", isolation="bwrap"
    )
    assert not outcome.ok and outcome.score is None
    assert outcome.error is not None and MEMORY_NOTE in outcome.error, outcome.error
    limits: Any = outcome.details["limits"]
    assert limits["memory_mb"] == MEMORY_MB, limits
    assert limits["sources"]["memory_mb"] == "the task's [resources] memory_gb", limits
    assert limits["disk_mb"] > 0 and limits["sources"]["disk_mb"].startswith("default:"), limits


def test_a_tasks_limits_are_capped_at_what_the_machine_can_give(scene: Scene) -> None:
    from mlra.agent.setup.config import RunConfig
    from mlra.agent.setup.run_setup import limit_choices

    toml = scene.task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[resources]\n", "[resources]\nmemory_gb = 100000\ndisk_gb = 1e9\n"
        )
    )
    task = load_task(scene.task)
    config = RunConfig(task=task.name, model="baseline")
    memory_mb, disk_mb, sources = limit_choices(task, config, scene.workspace)
    assert memory_mb == default_memory().mb
    assert "capped at this machine's default" in sources["memory_mb"]
    assert disk_mb is not None and disk_mb < 1e9 * 1024
    assert "capped at 90% of the" in sources["disk_mb"]
    # The user's flags are taken as given, `none` included.
    flagged = RunConfig(task=task.name, model="baseline", memory_mb=0, disk_mb=5)
    assert limit_choices(task, flagged, scene.workspace) == (
        0,
        5,
        {"memory_mb": "--memory none: no limit", "disk_mb": "--disk"},
    )


async def test_closing_the_quota_watcher_ends_it_even_when_a_cancel_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Python 3.11 `asyncio.wait_for` returns the result of an awaitable that finished
    as the task was cancelled, so a watcher could lose close()'s cancel and go on for
    ever (a sandbox's close hung under load). close() cancels until the watcher ends."""
    from mlra.tools.sandbox.disk_quota import WorkspaceQuota

    quota = WorkspaceQuota(tmp_path, 1)
    measuring = asyncio.Event()
    lost = 0

    async def measure_swallowing_one_cancel() -> tuple[int | None, float]:
        nonlocal lost
        measuring.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if lost:
                raise
            lost += 1  # as wait_for does when what it waits on finished meanwhile
        return 0, 0.0

    monkeypatch.setattr(quota, "_scan_async", measure_swallowing_one_cancel)
    quota.used = 0

    async def stop() -> None:
        pass

    quota._task = asyncio.get_running_loop().create_task(quota._watch(stop))
    watcher = quota._task
    await measuring.wait()
    closing = asyncio.create_task(quota.close())
    done, _ = await asyncio.wait({closing}, timeout=30)  # waits; cancels nothing
    assert closing in done and watcher.done() and lost == 1


async def test_what_a_stopped_writer_wrote_as_it_died_does_not_stop_the_next_command(
    tmp_path: Path,
) -> None:
    """The scan that finds the workspace over its quota comes before the stop, and the
    writer goes on until killed (a megabyte or more on a loaded machine). Counted from
    the scan, those last writes read as growth at the next scan, and the agent's next
    command, the `rm` getting it back under the quota, was stopped too (CI, bwrap)."""
    from mlra.tools.sandbox.disk_quota import WorkspaceQuota

    quota = WorkspaceQuota(tmp_path, 1)
    scans = 0
    scanned = asyncio.Condition()
    real_scan = quota._scan_async

    async def counted_scan() -> tuple[int | None, float]:
        nonlocal scans
        found = await real_scan()
        async with scanned:
            scans += 1
            scanned.notify_all()
        return found

    async def scans_after(count: int) -> None:
        async with scanned:
            await scanned.wait_for(lambda: scans >= count)

    stops: list[int] = []

    async def stop() -> None:
        stops.append(scans)
        if len(stops) == 1:  # the writer's last 3 MB, written as it was being killed
            (tmp_path / "last.bin").write_bytes(os.urandom(3 << 20))

    quota._scan_async = counted_scan  # type: ignore[method-assign]
    await quota.start(stop)
    try:
        (tmp_path / "first.bin").write_bytes(os.urandom(2 << 20))  # over a 1 MB quota
        while not stops:
            await asyncio.wait_for(scans_after(scans + 1), 30)
        # Three scans after the stop with nothing written: nothing more is stopped...
        await asyncio.wait_for(scans_after(stops[0] + 3), 30)
        assert len(stops) == 1, stops
        # ...while writing more than the slack past what the stop left is stopped again.
        (tmp_path / "more.bin").write_bytes(os.urandom(2 << 20))
        seen = scans
        while len(stops) == 1:
            await asyncio.wait_for(scans_after(seen + 1), 30)
            seen += 1
        assert len(stops) == 2
    finally:
        await quota.close()
