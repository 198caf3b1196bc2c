"""The local Ray the slow batch tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="package")
def local_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A local Ray in this process, started once for every file of tests/batch that asks
    (test_batch_ray.py, test_ray_arrivals.py, test_ray_worker_killed.py): a start took 6
    to 26 s on the 2 shared cores, and one a file made three. The tests leave it as they
    found it (a killed worker is replaced by Ray). Its workers keep shipped task folders in
    a cache of the suite's own. The two-node cluster of test_ray_cluster.py is
    `ray start` processes of its own, apart from this one."""
    ray = pytest.importorskip("ray")
    cache = tmp_path_factory.mktemp("task-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLRA_TASK_CACHE", str(cache))
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield cache
    finally:
        ray.shutdown()
