"""`mlra batch --parallel K` on one machine: the runs at once share its defaults, each
1/K of the default memory, CPUs and disk, instead of each taking all of it; a limit
the user gave is theirs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.agent.setup.config import RunConfig
from mlra.agent.setup.run_budget import run_budget
from mlra.tasks.spec import load_task
from mlra.tools.sandbox.default_limits import beyond_reserve_mb, default_memory, disk_cap_mb
from tests.conftest import mlra_cli


def _budgets(out: Path) -> list[ev.Budget]:
    found = []
    for log in sorted((out / "runs").glob("*/events.jsonl")):
        started = next(e for e in read_events(log) if isinstance(e, ev.RunStarted))
        assert started.budget is not None
        found.append(started.budget)
    return found


def test_a_batchs_parallel_runs_each_get_half_the_machines_defaults(
    tmp_path: Path, answer_task: Path
) -> None:
    out = tmp_path / "b"
    args = [
        "batch", "--tasks", str(answer_task), "--models", "baseline", "--seeds", "2",
        "--parallel", "2", "--out", str(out), "--isolation", "none", "--no-tui",
    ]  # fmt: skip
    proc = mlra_cli(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    budgets = _budgets(out)
    assert len(budgets) == 2
    memory = default_memory().mb
    assert memory is not None
    cpus = os.cpu_count() or 1
    for budget in budgets:
        assert budget.memory_mb == memory // 2, budget
        assert "1/2 of the default" in budget.sources["memory_mb"]
        assert budget.cpus == round(cpus / 2, 2)
        assert budget.disk_mb is not None and "1/2 of the default" in budget.sources["disk_mb"]
        # Half of the default: half the space free when the batch started, or the cap.
        found = re.search(
            r"half the ([0-9.]+) GiB free .* when the batch started", budget.sources["disk_mb"]
        )
        assert found is not None, budget.sources
        default_mb = min(float(found.group(1)) * 1024 / 2, disk_cap_mb())
        assert abs(budget.disk_mb - default_mb / 2) <= 0.05 * 1024 / 4 + 1, budget
    # One figure for both, measured once: not each run's own after its sibling's volume.
    assert budgets[0].disk_mb == budgets[1].disk_mb
    assert budgets[0].sources["disk_mb"] == budgets[1].sources["disk_mb"]


def test_a_batch_runs_default_disk_is_a_share_of_what_the_batch_found_free(
    tmp_path: Path, answer_task: Path
) -> None:
    """The figure a batch passes (`--machine-free-disk`) is the run's default, whatever
    is free as the run starts: here half as much again as now, as before a sibling's
    volume (a figure whose run's share is still under half what is free now, so no cap
    applies, whatever this machine's disk holds)."""
    now = beyond_reserve_mb(tmp_path)
    config = RunConfig(task="answer", model="baseline", machine_shared_by=2)
    alone = run_budget(load_task(answer_task), config, tmp_path)
    figure = now + now // 2
    batch = config.model_copy(update={"machine_free_mb": figure})
    shared = run_budget(load_task(answer_task), batch, tmp_path)
    assert shared.disk_mb == max(1, min(figure // 2, disk_cap_mb()) // 2)
    assert shared.disk_from_default  # a volume that no longer fits is made smaller
    assert shared.sources["disk_mb"].startswith(
        f"1/2 of the default: half the {figure / 1024:.1f} GiB free on the workspace's disk"
    )
    assert "when the batch started" in shared.sources["disk_mb"]
    # Where no batch measured it, the run measures it as it starts.
    assert "half the" in alone.sources["disk_mb"]
    assert "when the batch started" not in alone.sources["disk_mb"]


def test_a_batch_figure_above_what_is_free_now_is_capped(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A figure far above what is free (a wrong one, or one stale late in a long batch)
    gave a budget the volume never had: 200 GiB recorded ("half the 976562.5 GiB free
    ... when the batch started") while the volume was quietly made smaller."""
    monkeypatch.setenv("MLRA_DISK_CAP_GB", "1000000")  # no cap below the figure's share
    config = RunConfig(task="answer", model="baseline", machine_shared_by=2, machine_free_mb=10**9)
    budget = run_budget(load_task(answer_task), config, tmp_path)
    now = beyond_reserve_mb(tmp_path)
    assert budget.disk_mb is not None and budget.disk_mb <= max(1, now // 2)
    assert budget.disk_from_default
    source = budget.sources["disk_mb"]
    assert "when the batch started" in source
    assert re.search(r"capped at half the [0-9.]+ GiB free beyond the reserve now$", source)


def test_the_batch_s_disk_figure_is_refused_outside_a_shared_batch(
    tmp_path: Path, answer_task: Path
) -> None:
    """`--machine-free-disk` is mlra batch's own: not in `mlra run --help`, and refused
    (one line, exit 2) without `--machine-shared-by` 2 or more."""
    helped = mlra_cli(["run", "--help"], cwd=tmp_path)
    assert helped.returncode == 0 and "--machine-free-disk" not in helped.stdout
    args = ["run", str(answer_task), "--model", "baseline", "--no-tui"]
    refused = mlra_cli([*args, "--machine-free-disk", "0"], cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "mlra: --machine-free-disk is mlra batch's, with --machine-shared-by 2 or more"
    ], refused.stderr
