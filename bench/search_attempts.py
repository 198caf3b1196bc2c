"""What a search over attempts buys in the same time budget, with no LLM.

Each task is run twice through the real CLI with the baseline agent (the task's own
recipe) and the same `--time-limit`: once as one line of work (`--search none
--baseline-validate`, so it has a validation score too), once as a greedy search
(`--search greedy --attempts N`) over the recipe variants the task declares
(`[baseline] variants` in task.toml). The search's attempts take their time shares
from the same budget, so the question is whether trying more recipes and keeping the
best by validation beats training the one recipe, on the hidden test split, and what
selecting on validation costs in the validation-to-test gap.

Printed per configuration: the best validation and when it came on the run clock,
each attempt's validation score and when it finished (`attempt_finished` events), the
graded (submitted) attempt's test score, the validation-to-test gap (test minus
validation), the run's wall time and the machine's load (`uptime`) before and after.
The runs are sequential; on a shared machine the load moves the times (tiny-lm's
recipe trains in about a minute idle, several at a load of 5 on 2 cores), so the
load is part of the figure.

    python bench/search_attempts.py [--tasks tiny-lm[,OTHER]] [--attempts 3]
        [--attempts-parallel 1] [--time-limit 20m] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def offline_env() -> dict[str, str]:
    """As the slow tests run an offline task: no hub, and `python` in a recipe step is
    this interpreter (the one with torch and lm-eval)."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@dataclass
class Point:
    """One scored validation: who earned it, when on the run clock, and its score."""

    who: str
    t: float
    score: float | None
    status: str = "validated"
    note: str = ""


@dataclass
class Outcome:
    config: str
    wall_s: float
    load_before: str
    load_after: str
    status: str = ""
    reason: str = ""
    run_clock_s: float = 0.0
    points: list[Point] = field(default_factory=list)
    graded: str = ""
    graded_validation: float | None = None
    test_score: float | None = None
    gap: float | None = None
    higher_is_better: bool = True
    error: str = ""

    @property
    def best(self) -> Point | None:
        scored = [p for p in self.points if p.score is not None]
        if not scored:
            return None
        sign = 1.0 if self.higher_is_better else -1.0
        # The first to reach the best score: when the search had it.
        return max(scored, key=lambda p: (sign * (p.score or 0.0), -p.t))


def events_of(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def run_once(task: str, config: str, extra: list[str], root: Path, time_limit: str) -> Outcome:
    runs = root / config.split()[0]
    runs.mkdir(parents=True)
    args = ["run", task, "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    args += ["--time-limit", time_limit, *extra]
    load_before = uptime()
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mlra", *args],
        cwd=root,
        env=offline_env(),
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    out = Outcome(config, wall, load_before, uptime())
    folders = [p for p in runs.iterdir() if p.is_dir()]
    if proc.returncode != 0 or len(folders) != 1:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        out.error = f"exit {proc.returncode}: " + " | ".join(tail)
        if len(folders) != 1:
            return out
    run_dir = folders[0]
    result = json.loads((run_dir / "result.json").read_text())
    out.status, out.reason = result["status"], result["reason"]
    out.run_clock_s = result.get("duration_s", 0.0)
    out.test_score = result.get("score")
    out.higher_is_better = result.get("higher_is_better") is not False
    events = events_of(run_dir)
    variants = {
        e["attempt"]: " ".join(f"{k}={v}" for k, v in e.get("variant", {}).items()) or "recipe"
        for e in events
        if e["type"] == "attempt_started"
    }
    for e in events:
        if e["type"] == "attempt_finished":
            note = variants.get(e["attempt"], "")
            if e.get("why"):
                note += f" ({e['why']})"
            out.points.append(Point(e["attempt"], e["t"], e.get("score"), e["status"], note))
        elif e["type"] == "validation" and e.get("split") == "validation":
            out.points.append(Point("run", e["t"], e.get("score") if e.get("ok") else None))
    summary = result.get("attempts")
    if summary:
        out.graded = summary.get("submitted") or ""
        out.graded_validation = summary.get("submitted_validation")
        out.gap = summary.get("validation_to_test_gap")
    else:
        # One line of work: the graded artifact is the one the run last validated.
        last = [p for p in out.points if p.score is not None]
        out.graded = "run"
        out.graded_validation = last[-1].score if last else None
        if out.test_score is not None and out.graded_validation is not None:
            out.gap = round(out.test_score - out.graded_validation, 6)
    return out


def num(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def report(task: str, outcomes: list[Outcome]) -> None:
    print(f"\n== {task}")
    for o in outcomes:
        print(f"\n-- {o.config}")
        print(f"   load before: {o.load_before}")
        if o.error:
            print(f"   ERROR {o.error}")
        best = o.best
        print(
            f"   status {o.status}/{o.reason}; run clock {o.run_clock_s:.0f} s, "
            f"wall {o.wall_s:.0f} s"
        )
        for p in o.points:
            score = num(p.score) if p.score is not None else p.status
            print(f"   {p.who:>4} at {p.t:6.0f} s: validation {score:>10}  {p.note}")
        if best is not None:
            print(f"   best validation {num(best.score)} ({best.who}) at {best.t:.0f} s")
        print(
            f"   graded {o.graded or '-'}: validation {num(o.graded_validation)}, "
            f"test {num(o.test_score)}, gap (test - validation) {num(o.gap, 4)}"
        )
        print(f"   load after:  {o.load_after}")
    width = max(len(o.config) for o in outcomes) + 2
    print(f"\n   {'config':{width}} {'best val':>9} {'at':>6} {'test':>7} {'gap':>8} {'wall':>6}")
    for o in outcomes:
        best = o.best
        print(
            f"   {o.config:{width}} {num(best.score if best else None):>9} "
            f"{(f'{best.t:.0f}s' if best else '-'):>6} {num(o.test_score):>7} "
            f"{num(o.gap):>8} {o.wall_s:5.0f}s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", default="tiny-lm", help="comma-separated task names")
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--attempts-parallel", type=int, default=1)
    parser.add_argument("--time-limit", default="20m", help="the same for every run")
    parser.add_argument("--keep", type=Path, help="keep the run folders here")
    args = parser.parse_args()
    print(f"load before: {uptime()} ({os.cpu_count()} cores)")
    print(f"time limit {args.time_limit} per run; baseline agent; runs one after another")
    if args.keep is not None:  # a folder to keep them in, made if it is not there yet
        args.keep.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="mlra-bench-search-", dir=args.keep))
    greedy = f"greedy --attempts {args.attempts}"
    search = ["--search", "greedy", "--attempts", str(args.attempts)]
    if args.attempts_parallel != 1:
        greedy += f" --attempts-parallel {args.attempts_parallel}"
        search += ["--attempts-parallel", str(args.attempts_parallel)]
    try:
        for task in args.tasks.split(","):
            outcomes = [
                run_once(
                    task,
                    "none --baseline-validate",
                    ["--search", "none", "--baseline-validate"],
                    root / task,
                    args.time_limit,
                ),
            ]
            outcomes.append(run_once(task, greedy, search, root / task, args.time_limit))
            report(task, outcomes)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"\nrun folders: {root}")
    print(f"\nload after: {uptime()}")


if __name__ == "__main__":
    main()
