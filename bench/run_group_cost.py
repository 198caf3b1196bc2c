"""What the run-level cgroup (tools/sandbox/run_group.py) costs.

- making and removing a run's group (once a run), median of 50;
- a command (`true`) in the local sandbox, its group made under the run's group or
  under mlra's own as before, and under a run's group with a CPU quota (`--cpus`,
  which on cgroup v1 joins one more group a command); the variants interleaved round
  by round so that the machine's load falls on each alike;
- with `--docker IMAGE` instead (DOCKER_HOST set): a Docker run's group made and
  removed (tools/sandbox/docker_run_group.py: the engine asked, killed runs' leftovers
  looked for), median of 20, and a container started and removed under the run's group
  or as before, interleaved `--rounds` times.

    python bench/run_group_cost.py [--commands 40] [--rounds 5] [--isolation bwrap]
    python bench/run_group_cost.py --docker mlra-test:latest [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import IsolationMode, LocalSandbox
from mlra.tools.sandbox.run_group import RunGroup

VARIANTS = ("own group", "under the run's", "under the run's, --cpus 1")


def group_cost(n: int = 50, kind: type[RunGroup] = RunGroup) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        group = kind(memory_mb=1024, pids=4096, cpus=None)
        group.setup()
        group.close()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def commands(variant: str, isolation: IsolationMode, n: int) -> list[float]:
    group = None
    if variant != "own group":
        group = RunGroup(memory_mb=4096, pids=4096, cpus=1.0 if "cpus" in variant else None)
        group.setup()
    workspace = Path(tempfile.mkdtemp(prefix="mlra-bench-"))
    sandbox = LocalSandbox(
        workspace,
        SandboxSpec(memory_mb=1024, run_group=group),
        isolation_mode=isolation,
    )
    await sandbox.start()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await sandbox.exec(["true"], timeout=30)
        times.append(time.perf_counter() - start)
    await sandbox.close()
    if group is not None:
        group.close()
    return times


async def containers(image: str, rounds: int) -> None:
    from mlra.tools.sandbox.docker_run_group import DockerRunGroup
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    print(f"a Docker run's group made and removed: {group_cost(20, DockerRunGroup):.2f} ms")
    found: dict[str, list[float]] = {"as before": [], "under the run's group": []}
    for _ in range(rounds):
        for variant, times in found.items():
            group = None
            if variant != "as before":
                group = DockerRunGroup(memory_mb=4096, pids=4096, cpus=None)
                print(f"  {group.setup()} {group.not_held or ''}".rstrip())
            workspace = Path(tempfile.mkdtemp(prefix="mlra-bench-"))
            sandbox = DockerSandbox(workspace, SandboxSpec(memory_mb=1024, run_group=group),
                                    image=image, run_id="bench-run-group")  # fmt: skip
            start = time.perf_counter()
            await sandbox.start()
            await sandbox.close()
            times.append(time.perf_counter() - start)
            if group is not None:
                group.close()
    for variant, times in found.items():
        print(
            f"a container started and removed {variant:22} median {statistics.median(times) * 1000:.0f} ms"
        )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--isolation", choices=["none", "bwrap"], default="bwrap")
    parser.add_argument("--docker", metavar="IMAGE")
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}")
    if args.docker:
        await containers(args.docker, args.rounds)
        print(f"load {os.getloadavg()[0]:.1f}")
        return
    print(f"a run's group made and removed: {group_cost():.2f} ms")
    found: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            isolation: IsolationMode = "bwrap" if args.isolation == "bwrap" else "none"
            found[variant] += await commands(variant, isolation, args.commands)
    for variant, times in found.items():
        print(f"{args.isolation} {variant:28} median {statistics.median(times) * 1000:.2f} ms")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
