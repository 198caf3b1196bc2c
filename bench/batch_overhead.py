"""What a batch costs per run beyond the run itself, locally and on Ray.

The same N runs (the tiny `answer` test task, baseline agent: a real `mlra run`
of about a second) are started one by one with `mlra run`, then as one
`mlra batch --parallel 1` with each executor, so the runs themselves take the
same time and the difference is the batch's: its start-up, reading the run
folders, waiting on and placing each run, the progress display and the report
(tables and plots). Ray's own start-up (a local Ray started on the spot) is
shown apart, since a cluster is usually running already. Targets: under 0.2 s
per run locally, under 2 s per run on Ray.

    python bench/batch_overhead.py [--runs 8] [--no-ray]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASK = Path(__file__).resolve().parent.parent / "tests" / "data" / "tasks" / "answer"


def mlra(*args: str, cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "mlra", *args],
        cwd=cwd,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")},
    )
    return time.perf_counter() - start


def one_by_one(runs: int, root: Path) -> float:
    runs_dir = Path(tempfile.mkdtemp(prefix="single-", dir=root))
    total = 0.0
    for seed in range(1, runs + 1):
        total += mlra(
            "run", str(TASK), "--model", "baseline", "--no-tui", "--isolation", "none",
            "--runs-dir", str(runs_dir), "--run-id", f"s{seed}", "--seed", str(seed),
            cwd=root,
        )  # fmt: skip
    return total


def batch(runs: int, root: Path, executor: str) -> tuple[float, float]:
    """The whole batch, and the same command again once every run is done (fixed costs)."""
    out = Path(tempfile.mkdtemp(prefix=f"{executor}-", dir=root))
    args = ["batch", "--tasks", str(TASK), "--models", "baseline", "--seeds", str(runs)]
    args += ["--parallel", "1", "--isolation", "none", "--no-tui", "--executor", executor]
    args += ["--out", str(out)]
    return mlra(*args, cwd=root), mlra(*args, cwd=root)


def ray_start() -> float:
    code = "import ray, time; t = time.perf_counter(); ray.init(include_dashboard=False); print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many (noise)")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    n = args.runs
    executors = ["local"] + ([] if args.no_ray else ["ray"])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # Interleaved and the best of each kept: other load on the machine only adds time.
        best: dict[str, tuple[float, float]] = {}
        single = float("inf")
        for _ in range(args.repeat):
            single = min(single, one_by_one(n, root))
            for executor in executors:
                whole, again = batch(n, root, executor)
                old = best.get(executor, (float("inf"), float("inf")))
                best[executor] = (min(old[0], whole), min(old[1], again))
        print(f"{n} runs one by one: {single:.2f} s ({single / n:.2f} s a run)")
        rows = []
        for executor in executors:
            whole, again = best[executor]
            over = (whole - single) / n
            marginal = (whole - again - single) / n
            print(
                f"{executor}: batch {whole:.2f} s; overhead {over:.3f} s a run over {n} runs; "
                f"{marginal:.3f} s a run besides the once-a-batch costs (start-up, folder scan, "
                f"report and plots: {again:.2f} s)"
            )
            rows.append((executor, over, again))
        if not args.no_ray:
            start = ray_start()
            ray_over = next(over for name, over, _ in rows if name == "ray")
            print(
                f"ray start-up (local Ray on the spot): {start:.2f} s; overhead a run without it: "
                f"{ray_over - start / n:.3f} s"
            )


if __name__ == "__main__":
    main()
