"""`mlra compare` over long runs: time to read them, to print the text tables, to open
the screen and draw the curves, and the peak memory.

Ten synthetic runs (by default) are written with the real EventLog, each a finished run
whose job printed a loss at 50,000 steps (5,000 `metrics` events of 10 points) and
validated twice; then, in this process:

1. read: every log read and folded (batch/compare/runs.py's `load_all`);
2. text: the matrix and the paired table as `--no-tui` prints them, at 80 columns;
3. screen: with Textual's headless driver at 160x48, the key `c` to the curves drawn,
   and `x` (step/time) to them drawn again;
4. memory: the process's peak resident memory.

    python bench/compare_load.py [--runs 10] [--events 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog


def write_run(runs: Path, name: str, model: str, events: int) -> None:
    log = EventLog(runs / name / EVENTS_FILE)
    sandbox = ev.SandboxInfo(
        kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
    )
    log.append(
        ev.RunStarted(
            run_id=name,
            task="answer",
            task_title="A task",
            model=model,
            limits=ev.Limits(time_limit_s=3600),
            sandbox=sandbox,
            config={"seed": 1, "temperature": 0.1 if model == "m1" else 0.7},
        )
    )
    for k in range(events):
        points = [
            ev.MetricPoint(
                name="loss", value=1.0 / (10 * k + j + 1), step=10 * k + j, wall=k + j / 10
            )
            for j in range(10)
        ]
        log.append(ev.Metrics(source="job:j1", job="j1", points=points, t=float(k)))
    for score in (0.4, 0.6):
        log.append(ev.Validation(artifact="a.txt", ok=True, metric="accuracy", score=score))
    log.append(ev.Submission(path="a.txt"))
    log.append(ev.EvaluationFinished(ok=True, metric="exact_match", score=0.5, normalized=0.5))
    log.append(ev.RunFinished(status="finished", reason="submitted"))
    log.close()


async def screen(runs: list, size: tuple[int, int]) -> tuple[float, float]:
    from mlra.console.screens.compare_screen import CompareApp

    app = CompareApp(runs, x="step")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        start = time.perf_counter()
        await pilot.press("c")
        await pilot.pause()
        curves = time.perf_counter() - start
        start = time.perf_counter()
        await pilot.press("x")
        await pilot.pause()
        return curves, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--events", type=int, default=5000)
    args = parser.parse_args()
    from mlra.batch.compare import matrix, paired
    from mlra.batch.compare.runs import expand, load_all
    from mlra.console.text.compare_text import matrix_text, paired_text

    with tempfile.TemporaryDirectory() as tmp:
        runs_dir = Path(tmp) / "runs"
        for i in range(args.runs):
            write_run(runs_dir, f"r{i:02d}", f"m{i % 2 + 1}", args.events)
        size = (runs_dir / "r00" / EVENTS_FILE).stat().st_size
        print(f"{args.runs} runs, a log of {size / 1e6:.1f} MB each; load {os.getloadavg()[0]:.1f}")
        start = time.perf_counter()
        runs = load_all(expand([runs_dir]))
        read = time.perf_counter() - start
        start = time.perf_counter()
        text = matrix_text(matrix.build(runs), 80)
        for table in paired.paired(runs):
            text += paired_text(table, 80)
        printed = time.perf_counter() - start
        curves, toggled = asyncio.run(screen(runs, (160, 48)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"read and folded: {read:.2f} s ({read / args.runs * 1000:.0f} ms a run)")
    print(f"text tables: {printed * 1000:.1f} ms")
    print(f"screen, c to curves drawn: {curves:.2f} s; x to redrawn: {toggled:.2f} s")
    print(f"peak memory: {peak:.0f} MB; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
