"""What the engine itself costs per tool step, and how fast `mlra --help` starts.

A tool step through the engine is: dispatch by name, argument validation, the
sandbox's exec with streamed output, truncation, and two log writes (call and
result, each flushed). It is compared with running the same command with plain
`subprocess.run`. Targets: at most 5 ms of overhead per step without bwrap, and
`mlra --help` under 0.3 s.

    python bench/engine_overhead.py [--steps 200]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from mlra.tools.core import core_tools
from mlra.tools.registry import ToolRegistry
from mlra.tools.sandbox.bwrap import find_bwrap

TASK = Path(__file__).resolve().parent.parent / "tests" / "data" / "tasks" / "answer"
COMMAND = "true"


def plain_subprocess(steps: int, cwd: Path) -> list[float]:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        subprocess.run(["bash", "-c", COMMAND], cwd=cwd, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return times


async def engine_steps(steps: int, runs_dir: Path, isolation: str) -> list[float]:
    config = RunConfig(task="answer", model="baseline", runs_dir=runs_dir, isolation=isolation)  # type: ignore[arg-type]
    controller = RunController(config, load_task(TASK), None)
    await controller.start()
    registry = ToolRegistry(core_tools())
    times = []
    try:
        for n in range(steps):
            call = ToolCallRequest(id=f"c{n}", name="bash", arguments={"command": COMMAND})
            start = time.perf_counter()
            outcome = await controller.execute_tool("worker", call, registry)
            times.append(time.perf_counter() - start)
            assert outcome.ok, outcome.output
    finally:
        assert controller.sandbox is not None
        await controller.sandbox.close()
        assert controller.log is not None
        controller.log.close()
    return times


def help_startup(repeats: int) -> list[float]:
    exe = shutil.which("mlra") or sys.executable
    argv = [exe, "--help"] if exe != sys.executable else [exe, "-m", "mlra", "--help"]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return times


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.2f} ms (p90 {sorted(values)[int(len(values) * 0.9)] * 1000:.2f} ms)"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = plain_subprocess(args.steps, Path(tmp))
        engine = asyncio.run(engine_steps(args.steps, Path(tmp) / "runs-none", "none"))
        print(f"plain subprocess.run:        {ms(base)}")
        print(f"engine step, no isolation:   {ms(engine)}")
        print(
            f"  overhead per step:         {(statistics.median(engine) - statistics.median(base)) * 1000:.2f} ms"
        )
        if find_bwrap() is not None:
            boxed = asyncio.run(engine_steps(args.steps, Path(tmp) / "runs-bwrap", "bwrap"))
            print(f"engine step, bubblewrap:     {ms(boxed)}")
            print(
                f"  overhead per step:         {(statistics.median(boxed) - statistics.median(base)) * 1000:.2f} ms"
            )
    startup = help_startup(20)
    print(f"mlra --help:                 {ms(startup)}")


if __name__ == "__main__":
    main()
