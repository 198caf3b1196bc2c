"""A search's resource samples in the Docker sandbox (against the real test engine, as
test_docker_sandbox.py): its attempts' containers are the run's use too."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from tests.tools.test_docker_sandbox import _containers, _sandbox

HOLD = 'python3 -c \'import time; b = bytearray(150 * 2**20); open("held", "w").close(); time.sleep(60)\''
"""Holds 150 MB, saying so by a file, until it is killed."""


async def test_a_searchs_samples_count_its_attempts_containers(
    tmp_path: Path,
    client: Any,
    docker_host: str,
) -> None:
    """The run's samples (the Resources pane's Run and Pool lines, `mlra runs`' budget
    column) walked the attempts' commands by host pid, which a container's have none
    of: a Docker search whose attempts trained read as the idle supervisor's 0.5 MB."""
    from mlra.agent.loop.resources import ResourceMonitor

    run = _sandbox(tmp_path / "run" / "workspace", "search-res")
    attempt = _sandbox(tmp_path / "run" / "attempts" / "a1" / "workspace", "search-res/a1")
    await run.start()
    await attempt.start()
    holding = asyncio.ensure_future(attempt.exec(["sh", "-c", HOLD], timeout=120))
    try:
        while not (attempt.workspace / "held").exists():
            assert not holding.done(), holding.result().output
            await asyncio.sleep(0.05)
        monitor = ResourceMonitor(run.workspace, sandbox=run, attempts=lambda: [attempt])
        sample = monitor.sample()
        assert sample.run_mem_mb is not None and sample.run_mem_mb >= 150, sample
    finally:
        await attempt.stop_processes()
        with contextlib.suppress(Exception):
            await holding
        await attempt.close()
        await run.close()
    assert _containers(client, "search-res") == []
