"""A Ray cluster whose head dies under a running batch (slow: a real Ray head).

Ray's core ends the driver's process about 60 s after its head's GCS is gone, saying so
only in `<out>/ray.log`: the batch vanished from the terminal with no line and no report.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.batch.ray_cluster import RayCluster, ray_cluster, why_no_cluster
from tests.batch.test_batch import MODEL, supervisor_fallback
from tests.batch.test_ray_cluster import start_driver, wait_for_command
from tests.conftest import ANSWER_TASK
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(why_no_cluster() is not None, reason=str(why_no_cluster())),
]


@pytest.fixture
def head_only(tmp_path: Path) -> Iterator[RayCluster]:
    with ray_cluster(tmp_path / "driver", second_node=False) as started:
        yield started


def test_a_batch_whose_cluster_head_dies_says_so_with_the_report(head_only: RayCluster) -> None:
    task = head_only.hidden / "answer"
    shutil.copytree(ANSWER_TASK, task)
    out = head_only.hidden / "b"
    marker = "sleep 41.5"  # the agent's long command, found among the head's processes
    script = {
        "supervisor:fallback": supervisor_fallback(),
        "worker:fallback": turn("Waiting.", call("bash", command=marker, timeout=90)),
    }
    with ScriptedModelServer(script) as server:
        args = ["batch", "--tasks", str(task), "--models", MODEL, "--seeds", "1"]
        args += ["--executor", "ray", "--ray-address", head_only.address, "--out", str(out)]
        args += ["--base-url", server.url_for("openai"), "--isolation", "none", "--no-tui"]
        driver = start_driver(head_only, args)
        try:
            wait_for_command(head_only.head, marker, driver, "the run never reached its command")
            head_only.head.stop()
            stdout, stderr = driver.communicate(timeout=120)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.communicate()
    assert driver.returncode == 1, stdout[-3000:] + stderr[-3000:]
    said = stdout + stderr
    assert "Traceback" not in said, said[-3000:]
    lost = [line for line in stdout.splitlines() if "the Ray cluster was lost" in line]
    assert len(lost) == 1, stdout[-3000:]
    assert "the same command resumes the batch" in lost[0]
    assert f"report {out / 'report.md'}" in lost[0]
    assert (out / "report.md").is_file()
