"""A seed's success is its first attempt with an outcome, and the endings that are the
run's own (a window too small for its request, a replay that diverged, Ray killing it for
its memory, every attempt used up with none) are judged, and failed. Before, the first
attempt that started was counted, even one a passing provider error ended, and those
endings were left out of the rate: a weak model's runs that overflowed its window read
as no failures, and a batch resumed to its end still read partial."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from mlra import events as ev
from mlra.agent.loop.overflow_mend import WINDOW_CANNOT_HOLD
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.agent.record.run_result import write_result
from mlra.agent.record.state import RunState
from mlra.batch.report import write_report
from mlra.batch.spec import SPEC_FILE
from mlra.batch.state import (
    DRIVERS,
    OUT_OF_MEMORY,
    RETIRED,
    RUNS,
    Placement,
    RunCard,
    driving,
    lost_attempt,
    write_card,
)
from tests.batch.test_batch_endings import MODEL, _run
from tests.batch.test_partial_report import SUCCESS, _table_row


def _batch(out: Path, seeds: int, max_attempts: int = 2) -> None:
    (out / SPEC_FILE).parent.mkdir(parents=True, exist_ok=True)
    (out / SPEC_FILE).write_text(json.dumps({"max_attempts": max_attempts}), encoding="utf-8")
    for seed in range(1, seeds + 1):
        card = RunCard(run_id=f"answer__m__s{seed}", task="answer", model=MODEL, seed=seed)
        write_card(out, card)


def _overflowed(run_dir: Path, seed: int) -> None:
    """A run ended as mlra ended one whose request the model's window cannot hold before
    its `run_finished` recorded the cause (read by its words: test_ending_cause.py)."""
    log = EventLog(run_dir / EVENTS_FILE)
    state = RunState()
    log.subscribe(state.apply)
    _start(log, run_dir, seed)
    message = f"{WINDOW_CANNOT_HOLD} (8,192 tokens) cannot hold supervisor's request"
    log.append(ev.RunFinished(status="error", reason="provider_error", message=message))
    log.close()
    write_result(state, run_dir)


def _start(log: EventLog, run_dir: Path, seed: int) -> None:
    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    log.append(
        ev.RunStarted(
            run_id=run_dir.name, task="answer", task_title="A", model=MODEL,
            limits=ev.Limits(time_limit_s=60), sandbox=sandbox, config={"seed": seed},
        )
    )  # fmt: skip


@contextlib.contextmanager
def _driven_by_another_batch(out: Path, run_id: str) -> Iterator[None]:
    """The run's `.drivers/` lock, held as another `mlra batch` process holds it."""
    (out / DRIVERS).mkdir(parents=True, exist_ok=True)
    fd = os.open(out / DRIVERS / run_id, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


def _report(out: Path) -> tuple[str, dict]:
    write_report(out, plots=False)
    md = (out / "report.md").read_text(encoding="utf-8")
    return md, json.loads((out / "report.json").read_text(encoding="utf-8"))


def test_a_seeds_first_outcome_counts_and_the_agents_own_endings_are_failures(
    tmp_path: Path,
) -> None:
    """Seed 1 succeeds; seed 2's first try met a passing provider error and its retry
    succeeded; seed 3 met the provider error on both its tries (no attempts left); seed 4
    overflowed its model's window; seed 5's replay diverged; seed 6 was killed by Ray for
    its memory on every try. 2 of 6 succeeded, and the batch, ended, is not partial."""
    runs, retired = tmp_path / RUNS, tmp_path / RETIRED
    _batch(tmp_path, 6)
    _run(runs / "answer__m__s1", seed=1, score=1.0)
    _run(retired / "answer__m__s2__a1", seed=2, status="error", reason="provider_error")
    _run(runs / "answer__m__s2", seed=2, score=1.0)
    _run(retired / "answer__m__s3__a1", seed=3, status="error", reason="provider_error")
    _run(runs / "answer__m__s3", seed=3, status="error", reason="provider_error")
    _overflowed(runs / "answer__m__s4", seed=4)
    _run(runs / "answer__m__s5", seed=5, status="error", reason="replay_diverged")
    oom = Placement(node_id="ab" * 8, host="nodeB", outcome=OUT_OF_MEMORY, detail="killed")
    for _ in range(2):
        lost_attempt(tmp_path, "answer__m__s6", oom)

    md, report = _report(tmp_path)
    assert "Partial report" not in md and report["partial"] is None, md
    assert _table_row(md, MODEL)[SUCCESS] == "33%"  # 2 of 6, not 2 of 2
    counted = {r["run_id"]: r for r in report["runs"] if r["counted"]}
    assert counted["answer__m__s2"]["attempt"] == 2 and counted["answer__m__s2"]["success"]
    assert [counted[f"answer__m__s{s}"]["success"] for s in (3, 4, 5, 6)] == [False] * 4


def test_a_batch_resumed_to_its_end_is_not_partial(tmp_path: Path) -> None:
    """Seed 1's first attempt was stopped by a Ctrl-C and set aside; the batch, run
    again, started it afresh and it succeeded: that is its outcome."""
    _batch(tmp_path, 2, max_attempts=3)
    _run(tmp_path / RETIRED / "answer__m__s1__a1", seed=1, status="stopped", reason="stopped")
    _run(tmp_path / RUNS / "answer__m__s1", seed=1, score=1.0)
    _run(tmp_path / RUNS / "answer__m__s2", seed=2, score=0.0)
    md, report = _report(tmp_path)
    assert "Partial report" not in md and report["partial"] is None, md
    assert _table_row(md, MODEL)[SUCCESS] == "50%"


def test_a_provider_error_with_attempts_left_is_no_outcome(tmp_path: Path) -> None:
    """A batch stopped after a run's first try met a provider error: it would be retried,
    so it is not judged, and the report says it is partial."""
    _batch(tmp_path, 2, max_attempts=3)
    _run(tmp_path / RUNS / "answer__m__s1", seed=1, score=1.0)
    _run(tmp_path / RUNS / "answer__m__s2", seed=2, status="error", reason="provider_error")
    md, _ = _report(tmp_path)
    assert "Partial report: 2 of 2 runs ran; 1 stopped before an outcome." in md, md
    assert _table_row(md, MODEL)[SUCCESS] == "100% of 1 judged"


def test_a_report_while_the_batch_runs_says_what_runs_and_what_waits(tmp_path: Path) -> None:
    """`mlra report DIR` while its batch runs: seed 2 is running (its log open), seed 3
    is held by the batch (its driver lock) and not begun. Before: "1 never started, and
    1 stopped before an outcome"."""
    _batch(tmp_path, 3)
    _run(tmp_path / RUNS / "answer__m__s1", seed=1, score=1.0)
    with contextlib.ExitStack() as held:
        live = tmp_path / RUNS / "answer__m__s2"
        log = EventLog(live / EVENTS_FILE)
        held.callback(log.close)
        _start(log, live, 2)
        for seed in (2, 3):
            held.enter_context(_driven_by_another_batch(tmp_path, f"answer__m__s{seed}"))
        md, report = _report(tmp_path)
    assert "Partial report: 1 of 3 runs ran; 1 still running, and 1 queued." in md, md
    assert report["partial"]["running"] == 1 and report["partial"]["queued"] == 1
    assert _table_row(md, MODEL)[SUCCESS] == "100% of 1 judged"


def test_a_report_the_batch_writes_holding_its_own_runs_calls_none_queued_by_another(
    tmp_path: Path,
) -> None:
    """The report a batch writes as its Ray cluster goes, its own runs' locks still held:
    its queued run was "queued by an mlra batch still running", that batch being itself,
    ending. It was stopped before it began."""
    _batch(tmp_path, 2)
    _run(tmp_path / RUNS / "answer__m__s1", seed=1, score=1.0)
    with driving(tmp_path, "answer__m__s2") as mine:
        assert mine
        md, report = _report(tmp_path)
    assert "queued by an mlra batch still running" not in md
    assert ": not started: the batch was stopped before it began" in md, md
    assert "Partial report: 1 of 2 runs ran; 1 never started." in md
    assert report["partial"]["queued"] == 0
