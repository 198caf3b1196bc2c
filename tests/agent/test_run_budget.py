"""One budget per run (agent/setup/run_budget.py, tools/sandbox/run_group.py): real searches on
the small `answer` task record the run's budget in `run_started` and each attempt's share
in `attempt_started`, the shares add up to at most the budget, each attempt's sandbox
has its share, and the kernel holds the run's total in a group every sandbox is under."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.run.resume import load_run, resume_controller
from mlra.agent.setup.config import RunConfig
from mlra.agent.setup.run_budget import held_mb, run_budget
from mlra.console.panes.resources import budget_use
from mlra.console.text.run_rows import budget_cell, run_row
from mlra.tasks.spec import load_task
from mlra.tools.sandbox.default_limits import default_memory, machine_memory_mb
from mlra.tools.sandbox.limits import CGROUP_ROOT, own_cgroup
from tests.agent.test_search import _scripted_search
from tests.conftest import answer_task_as
from tests.scripts import call, turn

PAD_MB = 4


def _padded_variants(answer_task: Path, tmp_path: Path) -> Path:
    """The answer task whose recipe takes a variable (four variants) and leaves a 4 MB
    file in its workspace, so that an ended attempt holds disk a later one cannot have."""
    pad = f"head -c {PAD_MB * 1024 * 1024} /dev/urandom > pad.bin; echo {{n}}"
    return answer_task_as(
        answer_task,
        tmp_path,
        "answer-padded",
        (
            'submit = "answer.txt"',
            'submit = "answer.txt"\nvars = { n = "41" }\n'
            'variants = [{}, { n = "40" }, { n = "42" }, { n = "43" }]',
        ),
        ('python -c \\"print(6 * 7)\\"', pad),
    )


def _search(tmp_path: Path, answer_task: Path, **settings: object) -> RunController:
    task = load_task(_padded_variants(answer_task, tmp_path))
    config = RunConfig.model_validate(
        {
            "task": task.name,
            "model": "baseline",
            "runs_dir": tmp_path / "runs",
            "isolation": "none",
            "search": "greedy",
            **settings,
        }
    )
    return RunController(config, task, None)


def _started(run_dir: Path) -> tuple[ev.Budget, list[ev.AttemptStarted]]:
    events = read_events(run_dir / "events.jsonl")
    run = next(e for e in events if isinstance(e, ev.RunStarted))
    assert run.budget is not None
    return run.budget, [e for e in events if isinstance(e, ev.AttemptStarted)]


def _own_limits(run_dir: Path, attempt: str) -> ev.LimitsInForce:
    own = read_events(run_dir / "attempts" / attempt / "events.jsonl")
    started = next(e for e in own if isinstance(e, ev.RunStarted))
    assert started.sandbox.limits is not None
    return started.sandbox.limits


def _held_by() -> set[str]:
    return {"cgroup v1", "cgroup v2"} if os.geteuid() == 0 else {"cgroup v1", "cgroup v2", "none"}


async def test_attempts_at_once_share_the_runs_budget_instead_of_each_taking_the_machine(
    tmp_path: Path, answer_task: Path
) -> None:
    """Two attempts at once, memory and disk left to the defaults: each used to take the
    machine's whole default (twice the machine); now each gets half the run's budget,
    and its sandbox has that share."""
    groups_before = set(_groups_of_this_process())
    controller = _search(tmp_path, answer_task, attempts=2, attempts_parallel=2, cpus=1.0)
    await controller.run(agent_for)
    budget, started = _started(controller.run_dir)
    whole, disk_budget = budget.memory_mb, budget.disk_mb
    assert whole is not None and whole == default_memory().mb and whole <= machine_memory_mb()
    assert budget.held_by in _held_by()
    assert disk_budget is not None and budget.sources["disk_mb"].startswith("default:")
    assert len(started) == 2
    shares = [s.share for s in started if s.share is not None]
    assert len(shares) == 2
    for attempt, share in zip(("a1", "a2"), shares, strict=True):
        assert share is not None and share.memory_mb is not None and share.disk_mb is not None
        assert share.memory_mb == whole // 2
        assert "1/2 of the run's budget" in share.sources["memory_mb"]
        limits = _own_limits(controller.run_dir, attempt)
        assert limits.memory_mb == share.memory_mb
        # Its CPU share a quota the kernel keeps (its own cpu group under the run's; on
        # cgroup v2 where the cpu controller is delegated).
        assert share.cpus == 0.5 and limits.cpus in (None, share.cpus)
        if budget.held_by == "cgroup v1":
            assert limits.cpus == share.cpus, limits
        # A default disk's volume takes less where the suite's other workers took space
        # since (tools/sandbox/volume.py), never more.
        assert limits.disk_mb is not None and limits.disk_mb <= share.disk_mb
    memory = sum(s.memory_mb or 0 for s in shares)
    disk = sum(s.disk_mb or 0 for s in shares)
    assert memory <= whole and disk <= disk_budget
    # `mlra runs` and the Resources pane show the run's use against that budget.
    row = run_row(controller.run_dir)
    assert (row.budget_memory_mb, row.budget_disk_mb) == (budget.memory_mb, budget.disk_mb)
    assert budget_cell(row).startswith("mem ") and " disk " in budget_cell(row)
    events = read_events(controller.run_dir / "events.jsonl")
    sample = next(e for e in events if isinstance(e, ev.ResourceSample))
    if budget.held_by != "none":
        assert sample.pool_mem_mb is not None and sample.pool_processes is not None
    assert budget_use(budget, sample, compact=False).startswith("mem ")
    # The run's group went with the run, its sandboxes' groups in it.
    assert set(_groups_of_this_process()) <= groups_before


async def test_attempts_one_after_another_get_what_the_ended_ones_left_of_the_disk(
    tmp_path: Path, answer_task: Path
) -> None:
    """A 40 MB disk budget and attempts that each leave a 4 MB file: the second and third
    get what the run's workspace and the ended attempts' folders left, so each share and
    what was held before it add up to at most the budget."""
    controller = _search(tmp_path, answer_task, attempts=3, disk_mb=40)
    await controller.run(agent_for)
    budget, started = _started(controller.run_dir)
    assert (budget.disk_mb, budget.sources["disk_mb"]) == (40, "--disk")
    shares = [s.share for s in started if s.share is not None]
    assert len(shares) == 3 and all(s.disk_mb for s in shares)
    disks = [s.disk_mb or 0 for s in shares]
    assert disks[0] <= 40
    assert disks[1] <= disks[0] - PAD_MB and disks[2] <= disks[1] - PAD_MB, disks
    for i, share in enumerate(disks):
        before = [controller.run_dir / "attempts" / a for a in ("a1", "a2", "a3")[:i]]
        assert share + held_mb(before) <= 40
        # One at a time: each has the whole of the memory and processes.
        assert shares[i].memory_mb == budget.memory_mb


async def test_an_attempts_commands_run_in_the_runs_group_whose_limit_kills_a_hog(
    tmp_path: Path, answer_task: Path
) -> None:
    """With a 100 MB budget an attempt's command sits in a cgroup under the run's own, and
    one that takes 300 MB is killed by the kernel, the model told so."""
    if os.geteuid() != 0 and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        pytest.skip("no writable cgroup here")
    hog = "cat /proc/self/cgroup; python3 -c \"x = b'x' * (300 * 2**20); print('kept')\""
    script = {
        "supervisor": [
            turn("", call("attempt_start", instructions="Hog")),
            turn("", call("attempt_wait", attempt="a1")),
            turn("", call("submit", attempt="a1")),
        ],
        "worker": [
            turn("", call("bash", command=hog)),
            turn("", call("report", summary="hogged")),
        ],
    }
    groups_before = set(_groups_of_this_process())
    controller, _, _ = await _scripted_search(
        tmp_path / "runs", answer_task, script, search="llm", attempts=1, memory_mb=100
    )
    budget, started = _started(controller.run_dir)
    if budget.held_by == "none":
        pytest.skip("no writable cgroup here")
    assert budget.memory_mb == 100 and started[0].share is not None
    a1 = read_events(controller.run_dir / "attempts" / "a1" / "events.jsonl")
    out = next(e for e in a1 if isinstance(e, ev.ToolResult) and e.tool == "bash")
    assert f"mlra-{os.getpid()}-run-" in out.output  # the run's group holds the attempt's
    assert "kept" not in out.output and "memory limit" in out.output, out.output
    assert set(_groups_of_this_process()) <= groups_before  # (other tests' in this process)


async def test_a_resumed_run_keeps_the_budget_it_started_with(
    tmp_path: Path, answer_task: Path
) -> None:
    """A run resumed later (when the free disk is another) draws from the budget its
    `run_started` recorded, not from one computed again."""
    script = {"supervisor": [turn("Nothing to do.")]}
    controller, _, _ = await _scripted_search(
        tmp_path / "runs", answer_task, script, search="llm", attempts=1
    )
    budget, _ = _started(controller.run_dir)
    resumed = resume_controller(load_run(controller.run_dir), load_task(answer_task), None)
    assert resumed.config.budget == budget
    assert run_budget(resumed.task, resumed.config, resumed.workspace) == budget


def _groups_of_this_process() -> list[Path]:
    """This process's cgroups still there (a run's group must go with the run)."""
    found: list[Path] = []
    for controller, base in (("", CGROUP_ROOT), ("memory", CGROUP_ROOT / "memory")):
        own = own_cgroup(controller)
        if own is not None:
            found += (base / own.lstrip("/")).glob(f"mlra-{os.getpid()}-*")
    return found


async def test_empty_files_an_ended_attempt_left_count_against_the_next_ones_inodes(
    tmp_path: Path, answer_task: Path
) -> None:
    """A 40 MB disk budget is 2,560 inodes. Each attempt leaves 1,000 empty files (a few
    KB of blocks): counted by blocks alone, every attempt got about as many inodes as the
    first, and three held more than the run's budget. Each share's inodes and the inodes
    the ended attempts hold now add up to at most the run's, the disk budget said spent
    once they would not."""
    task_dir = _padded_variants(answer_task, tmp_path)
    toml = (task_dir / "task.toml").read_text()
    pad = f"head -c {PAD_MB * 1024 * 1024} /dev/urandom > pad.bin; echo {{n}}"
    assert pad in toml
    toml = toml.replace(pad, "mkdir -p e && (cd e && seq 1000 | xargs touch); echo {n}")
    (task_dir / "task.toml").write_text(toml)
    task = load_task(task_dir)
    config = RunConfig(
        task=task.name,
        model="baseline",
        runs_dir=tmp_path / "runs",
        isolation="none",
        search="greedy",
        attempts=3,
        disk_mb=40,
    )
    controller = RunController(config, task, None)
    await controller.run(agent_for)
    budget, started = _started(controller.run_dir)
    assert budget.inodes == 40 * 64
    shares = [s.share for s in started if s.share is not None]
    assert shares and all(s.inodes for s in shares)
    for i, share in enumerate(shares):
        held = sum(
            1 + len(dirs) + len(files)
            for a in ("a1", "a2", "a3")[:i]
            for _, dirs, files in os.walk(controller.run_dir / "attempts" / a)
        )
        assert (share.inodes or 0) + held <= budget.inodes, (i, share.inodes, held)
