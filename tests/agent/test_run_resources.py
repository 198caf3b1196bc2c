"""The run's own CPU and memory in each resource sample: the process tree of the
sandbox's running commands (a real command in a real local sandbox), not the host's."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import psutil

from mlra.agent.loop.resources import ResourceMonitor
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox

# A child process (so the tree, not just the leader, is counted) that holds ~80 MB
# and keeps one CPU busy until the sandbox kills the command.
HOG = """
import subprocess, sys
CHILD = 'block = bytearray(80 * 2**20)\\n' \\
    'for i in range(0, len(block), 4096): block[i] = 1\\n' \\
    'import os\\n' \\
    'print("ready", os.getpid(), flush=True)\\n' \\
    'while True: pass\\n'
subprocess.run([sys.executable, '-c', CHILD])
"""


async def test_a_sample_holds_the_commands_own_cpu_and_memory(tmp_path: Path) -> None:
    sandbox = LocalSandbox(tmp_path, SandboxSpec(), isolation_mode="none")
    monitor = ResourceMonitor(tmp_path, sandbox=sandbox)
    idle = monitor.sample()
    assert (idle.run_cpu_percent, idle.run_mem_mb, idle.run_processes) == (0.0, 0.0, 0)
    ready = asyncio.Event()
    said: list[str] = []

    def output(stream: str, text: str) -> None:
        said.append(text)
        if re.search(r"ready \d+\n", "".join(said)):
            ready.set()

    command = asyncio.create_task(
        sandbox.exec(["python3", "-c", HOG], timeout=60, on_output=output)
    )
    try:
        await asyncio.wait_for(ready.wait(), 30)
        first = monitor.sample()  # primes each process's CPU counter
        assert first.run_processes is not None and first.run_processes >= 2
        assert first.run_mem_mb is not None and first.run_mem_mb >= 80
        # The sample is checked against the CPU the busy child really got in the same
        # interval (on a loaded machine that is far below one whole CPU), measured
        # apart from the monitor; the interval ends once it has had 0.3 s of CPU.
        match = re.search(r"ready (\d+)", "".join(said))
        assert match is not None
        hog = psutil.Process(int(match.group(1)))
        start_cpu, start = sum(hog.cpu_times()[:2]), time.monotonic()
        while sum(hog.cpu_times()[:2]) - start_cpu < 0.3:  # noqa: ASYNC110 (a CPU counter has no event)
            await asyncio.sleep(0.05)
        busy = monitor.sample()
        got = (sum(hog.cpu_times()[:2]) - start_cpu) / (time.monotonic() - start) * 100
        assert busy.run_cpu_percent is not None
        assert got * 0.5 <= busy.run_cpu_percent <= got * 2 + 10
        assert busy.run_mem_mb is not None and busy.run_mem_mb < busy.ram_used_mb
    finally:
        command.cancel()
        await asyncio.gather(command, return_exceptions=True)
        await sandbox.close()
    after = monitor.sample()
    assert after.run_processes == 0


async def test_a_searching_runs_sample_holds_its_attempts_commands(tmp_path: Path) -> None:
    """While a search's attempts train, the run's own sandbox only waits: the run's
    figures are its attempts' commands, so a working search does not read as idle."""
    (tmp_path / "run").mkdir()
    (tmp_path / "a1").mkdir()
    own = LocalSandbox(tmp_path / "run", SandboxSpec(), isolation_mode="none")
    attempt = LocalSandbox(tmp_path / "a1", SandboxSpec(), isolation_mode="none")
    monitor = ResourceMonitor(tmp_path / "run", sandbox=own, attempts=lambda: [attempt])
    ready = asyncio.Event()
    said: list[str] = []

    def output(stream: str, text: str) -> None:
        said.append(text)
        if re.search(r"ready \d+\n", "".join(said)):
            ready.set()

    command = asyncio.create_task(
        attempt.exec(["python3", "-c", HOG], timeout=60, on_output=output)
    )
    try:
        await asyncio.wait_for(ready.wait(), 30)
        first = monitor.sample()
        assert first.run_processes is not None and first.run_processes >= 2
        assert first.run_mem_mb is not None and first.run_mem_mb >= 80
        match = re.search(r"ready (\d+)", "".join(said))
        assert match is not None
        hog = psutil.Process(int(match.group(1)))
        start_cpu = sum(hog.cpu_times()[:2])
        while sum(hog.cpu_times()[:2]) - start_cpu < 0.3:  # noqa: ASYNC110 (a CPU counter has no event)
            await asyncio.sleep(0.05)
        busy = monitor.sample()
        assert busy.run_cpu_percent is not None and busy.run_cpu_percent > 0
    finally:
        command.cancel()
        await asyncio.gather(command, return_exceptions=True)
        await attempt.close()
        await own.close()


BUSY_GRADER = """
import json, sys, time
from pathlib import Path
out = Path(sys.argv[3])
end = time.monotonic() + 60
while not Path(STOP).exists() and time.monotonic() < end:
    sum(range(100_000))
out.write_text(json.dumps({"score": 1.0}))
"""


async def test_a_runs_sample_holds_its_graders_processes(tmp_path: Path, answer_task: Path) -> None:
    """While a validation is graded the agent only waits on its grader, which runs in a
    sandbox of its own: the run's figures are the grader's, so a run that grades does
    not read as idle (`Run cpu 0%` through a minute of grading)."""
    from mlra.tasks.evaluators.base import run_evaluation
    from mlra.tasks.evaluators.graders_running import graders_in
    from mlra.tasks.spec import load_task
    from tests.conftest import answer_task_as

    task_dir = answer_task_as(
        answer_task,
        tmp_path,
        "busy-grader",
        ('settings = { script = "hidden/check.py" }', 'settings = { script = "hidden/busy.py" }'),
    )
    stop = tmp_path / "stop"  # unconfined (isolation none): the grader sees it
    (task_dir / "hidden" / "busy.py").write_text(f"STOP = {str(stop)!r}\n" + BUSY_GRADER)
    run_dir = tmp_path / "run"
    (run_dir / "workspace").mkdir(parents=True)
    (run_dir / "workspace" / "answer.txt").write_text("42\n")
    own = LocalSandbox(run_dir / "workspace", SandboxSpec(), isolation_mode="none")
    monitor = ResourceMonitor(run_dir / "workspace", sandbox=own)
    work_dir = run_dir / "validations" / "1" / "evaluation"
    grading = asyncio.create_task(
        run_evaluation(
            load_task(task_dir), run_dir / "workspace" / "answer.txt", work_dir, isolation="none"
        )
    )
    try:
        seen = monitor.sample()
        deadline = time.monotonic() + 30
        while (seen.run_cpu_percent or 0) < 20 and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            seen = monitor.sample()
        assert graders_in(run_dir), "the grader never started"
        assert (seen.run_cpu_percent or 0) >= 20, seen
        assert seen.run_processes is not None and seen.run_processes >= 1
    finally:
        stop.write_text("")
        outcome = await grading
        await own.close()
    assert outcome.ok, outcome.error
    assert not graders_in(run_dir)
    assert monitor.sample().run_processes == 0
