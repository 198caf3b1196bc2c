"""How pytest-xdist shares the suite out (`--dist loadfile`, pyproject.toml's addopts):
the units of tests one worker runs together, the costly shared fixtures that make some
files one unit, and the longest units first (tests/unit_seconds.json)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.scheduler.protocol import Scheduling

TESTS = Path(__file__).resolve().parent


SHARED_UNITS: dict[str, frozenset[str]] = {
    # The README's runs (tests/readme_runs.py): session fixtures, trainings of minutes.
    "readme": frozenset(
        {
            "tests/agent/test_demo_model.py",
            "tests/tasks/test_grading_progress.py",
            "tests/tasks/test_search_tiny_lm.py",
            "tests/tasks/test_tiny_lm.py",
            "tests/test_readme_commands.py",
        }
    ),
    # The local Ray of tests/batch/conftest.py: a start of 6 to 26 s.
    "local-ray": frozenset(
        {
            "tests/batch/test_batch_ray.py",
            "tests/batch/test_ray_arrivals.py",
            "tests/batch/test_ray_worker_killed.py",
        }
    ),
}
"""Files whose tests share a session or package fixture that is costly to make: each
set is one xdist unit, so one worker makes the fixture once (on two workers, each would
make its own). `pytest_collection_modifyitems` checks every user of one is listed."""

UNIT_FIXTURES = {
    "readme_folder": "readme",
    "readme_baseline_run": "readme",
    "readme_search_run": "readme",
    "readme_demo_run": "readme",
    "local_ray": "local-ray",
}


def xdist_unit(nodeid: str) -> str:
    """The tests one pytest-xdist worker runs together, in order: a file's tests, as the
    files were written to run alone (module fixtures, markers such as a daemon's command
    line); the files of each `SHARED_UNITS` set; and every test that starts a container
    (the `test_docker_*.py` files, and a test with a `docker` parameter), as a
    container's start (and a Docker run's group) removes the containers of mlra
    processes that died, and so would take away the one a killed console or search left
    for another test to find."""
    path, _, rest = nodeid.partition("::")
    params = rest[rest.find("[") + 1 : -1].split("-") if rest.endswith("]") else []
    if path.rpartition("/")[2].startswith("test_docker_") or "docker" in params:
        return "docker"
    for unit, files in SHARED_UNITS.items():
        if path in files:
            return unit
    return path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for a shared costly fixture from a file `SHARED_UNITS` does not
    list fails the collection: under xdist its worker would make that fixture again."""
    for item in items:
        for name in set(getattr(item, "fixturenames", ())) & UNIT_FIXTURES.keys():
            unit = UNIT_FIXTURES[name]
            if xdist_unit(item.nodeid) != unit:
                raise pytest.UsageError(
                    f"{item.nodeid} uses {name}: add its file to SHARED_UNITS[{unit!r}] "
                    "in tests/xdist_units.py, so that one xdist worker makes it once"
                )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Scheduling | None:
    """`--dist loadfile` (addopts), with the Docker tests of every file as one more unit
    and each `SHARED_UNITS` set as one (`xdist_unit`), the longest first; nodeids stay as
    they are, so a failure's line can be run again."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesAndDocker(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

        queue_sorted = False

        def _assign_work_unit(self, node: Any) -> None:
            # Sorted as the first unit is handed out: xdist hands each worker its first
            # units inside schedule(), so a sort after it came too late for them.
            if not self.queue_sorted:
                self.queue_sorted = True
                _longest_first(self.workqueue, slow=_slow_suite(config))
            super()._assign_work_unit(node)

    return FilesAndDocker(config, log)


def _slow_suite(config: pytest.Config) -> bool:
    """Whether this run selects the slow tests (`-m slow`), not the fast suite."""
    expr = str(config.getoption("markexpr", "") or "")
    return "slow" in expr and "not slow" not in expr


UNIT_SECONDS = TESTS / "unit_seconds.json"
"""Each xdist unit's seconds in a full run on the development machine (regenerate with
`python tests/unit_seconds.py JUNIT_XML` after `pytest --junitxml JUNIT_XML`)."""
SLOW_UNIT_SECONDS = TESTS / "unit_seconds_slow.json"
"""The same for the slow suite (`pytest -m slow --junitxml JUNIT_XML`, then
`python tests/unit_seconds.py --slow JUNIT_XML`)."""


def _longest_first(workqueue: dict[str, dict[str, bool]], *, slow: bool = False) -> None:
    """Hand out the longest units first (xdist orders them by their number of tests, so a
    file of a few long runs came last and the suite ended waiting on it alone). A unit
    with no recorded time counts a second a test."""
    import json

    try:
        seconds: dict[str, float] = json.loads(
            (SLOW_UNIT_SECONDS if slow else UNIT_SECONDS).read_text()
        )
    except (OSError, ValueError):
        return
    units = sorted(workqueue.items(), key=lambda kv: -seconds.get(kv[0], float(len(kv[1]))))
    workqueue.clear()
    workqueue.update(units)
