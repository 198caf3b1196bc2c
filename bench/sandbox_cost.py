"""What the local sandbox's confinement costs per command.

Each variant runs `true` many times through the same path the agent's commands
take (`LocalSandbox.exec`: a new session, streamed pipes, the process group
killed and waited for), except the first, which is plain asyncio subprocess:

- plain: `asyncio.create_subprocess_exec`, no sandbox at all;
- none: `LocalSandbox` with isolation "none" (rlimits, the env marker);
- bwrap (before issue 13): the old bubblewrap settings, the host's root shown
  read-only with masks, no user namespace, no limits;
- bwrap strict, rlimits: the hardened command line (user namespace, cap-drop
  ALL, allow-list view) with rlimits only;
- bwrap strict, no disk quota: as below, without the workspace's quota watcher
  (a `du` of the workspace every 0.5 s, in the background);
- bwrap strict: as the sandbox runs by default here, cgroup limits included
  where this machine lets mlra make a cgroup, /tmp and /dev/shm sized where the
  bubblewrap can, and the disk quota watched;
- bwrap strict, network task, host network: a task with `network = true` as it ran
  before issue 37, in the host's network namespace (MLRA_HOST_NETWORK=1 now);
- bwrap strict, network task, own namespace: the same task as it runs now, each
  command joining the sandbox's namespace (nsenter) whose way out is slirp4netns;
  the namespace's set-up, once a sandbox, is printed apart.

Target: the strict sandbox within 10 ms a command of plain subprocess.

    python bench/sandbox_cost.py [--commands 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from mlra.tools.sandbox import limits as limits_module
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.bwrap import INSIDE_HOME, INSIDE_WORKDIR
from mlra.tools.sandbox.local import LocalSandbox


async def plain(commands: int, cwd: Path) -> list[float]:
    times = []
    for _ in range(commands):
        start = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            "true", cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        await proc.communicate()
        times.append(time.perf_counter() - start)
    return times


class OldBwrapSandbox(LocalSandbox):
    """The bubblewrap settings mlra used before the allow-list (for comparison only)."""

    def _bwrap_argv(self, inside_cwd: str, command: list[str], network: object = None) -> list[str]:
        assert self.bwrap is not None
        argv = [self.bwrap]
        for entry in sorted(os.scandir("/"), key=lambda e: e.name):
            target = "/" + entry.name
            if target in ("/dev", "/proc", "/tmp", INSIDE_WORKDIR):
                continue
            if entry.is_symlink():
                argv += ["--symlink", os.readlink(target), target]
            elif entry.is_dir() or entry.is_file():
                argv += ["--ro-bind", target, target]
        argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        argv += ["--bind", str(self.workspace), INSIDE_WORKDIR, "--dir", INSIDE_HOME]
        argv += ["--remount-ro", "/", "--chdir", inside_cwd, "--unshare-pid"]
        argv += ["--die-with-parent", "--unshare-net", "--", *command]
        return argv


async def through(sandbox: LocalSandbox, commands: int) -> list[float]:
    await sandbox.start()
    for _ in range(5):  # warm caches (the /etc scan, the version check)
        await sandbox.exec(["true"], timeout=30)
    times = []
    for _ in range(commands):
        start = time.perf_counter()
        result = await sandbox.exec(["true"], timeout=30)
        times.append(time.perf_counter() - start)
        assert result.exit_code == 0, result.output
    await sandbox.close()
    return times


async def side_by_side(ws: Path, commands: int) -> list[tuple[str, list[float], str]]:
    """The default sandbox and a network task's, on the host's network and in its own
    namespace, one command of each in turn: the machine's load falls on all three alike."""
    offline = LocalSandbox(ws, SandboxSpec(memory_mb=4096), isolation_mode="bwrap")
    os.environ["MLRA_HOST_NETWORK"] = "1"
    shared = LocalSandbox(ws, SandboxSpec(memory_mb=4096, network=True), isolation_mode="bwrap")
    await shared.start()
    del os.environ["MLRA_HOST_NETWORK"]
    own = LocalSandbox(ws, SandboxSpec(memory_mb=4096, network=True), isolation_mode="bwrap")
    boxes = {"(in turn) no network": offline, "(in turn) network, host": shared}
    boxes["(in turn) network, own netns"] = own
    times: dict[str, list[float]] = {name: [] for name in boxes}
    for box in boxes.values():
        await box.start()
        for _ in range(5):
            await box.exec(["true"], timeout=30)
    for _ in range(commands):
        for name, box in boxes.items():
            start = time.perf_counter()
            result = await box.exec(["true"], timeout=30)
            times[name].append(time.perf_counter() - start)
            assert result.exit_code == 0, result.output
    for box in boxes.values():
        await box.close()
    return [(name, times[name], (boxes[name].network_via or "").split(":")[0]) for name in boxes]


async def main(commands: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        rows: list[tuple[str, list[float], str]] = [
            ("plain subprocess", await plain(commands, ws), "")
        ]
        none = LocalSandbox(ws, SandboxSpec(), isolation_mode="none")
        rows.append(("LocalSandbox, isolation none", await through(none, commands), ""))
        old = OldBwrapSandbox(ws, SandboxSpec(), isolation_mode="bwrap")
        old._limits = limits_module.SandboxLimits(memory_mb=None, pids=None, file_size_mb=None)
        rows.append(("bwrap, before issue 13", await through(old, commands), ""))
        saved = limits_module.SandboxLimits._setup_v2, limits_module.SandboxLimits._setup_v1
        limits_module.SandboxLimits._setup_v2 = lambda self, name: False  # type: ignore[method-assign]
        limits_module.SandboxLimits._setup_v1 = lambda self, name: None  # type: ignore[method-assign]
        strict_rl = LocalSandbox(ws, SandboxSpec(memory_mb=4096), isolation_mode="bwrap")
        rows.append(
            ("bwrap strict, rlimits", await through(strict_rl, commands), strict_rl.limits.via)
        )
        limits_module.SandboxLimits._setup_v2, limits_module.SandboxLimits._setup_v1 = saved
        unwatched = LocalSandbox(ws, SandboxSpec(memory_mb=4096, disk_mb=0), isolation_mode="bwrap")
        rows.append(
            (
                "bwrap strict, no disk quota",
                await through(unwatched, commands),
                unwatched.limits.via,
            )
        )
        strict = LocalSandbox(ws, SandboxSpec(memory_mb=4096), isolation_mode="bwrap")
        rows.append(("bwrap strict (default)", await through(strict, commands), strict.limits.via))
        starts = []
        for _ in range(5):
            start = time.perf_counter()
            opened = LocalSandbox(ws, SandboxSpec(network=True, disk_mb=0), isolation_mode="bwrap")
            await opened.start()
            starts.append(time.perf_counter() - start)
            await opened.close()
        rows += await side_by_side(ws, commands)
    base = statistics.median(rows[0][1])
    load = os.getloadavg()
    print(f"{commands} commands each; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        f"a network sandbox's start (namespace, slirp4netns, a probe): median "
        f"{statistics.median(starts) * 1000:.1f} ms of 5"
    )
    print(f"{'variant':34} {'median':>8} {'p90':>8} {'over plain':>11}  limits")
    for name, times, via in rows:
        med = statistics.median(times)
        p90 = statistics.quantiles(times, n=10)[-1]
        print(
            f"{name:34} {med * 1000:7.1f}ms {p90 * 1000:7.1f}ms {(med - base) * 1000:+10.1f}ms  {via}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=200)
    asyncio.run(main(parser.parse_args().commands))
