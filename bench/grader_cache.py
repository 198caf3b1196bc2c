"""What the shared Hugging Face cache costs a grading (as root: the grader runs as a uid
of its own and reads the cache through its own view of it, tasks/evaluators/grader_user.py).

A synthetic cache laid out as huggingface_hub and datasets lay theirs out: `--repos` Hub
repositories of `--files` blobs each (a snapshot of links to them, a ref), and a
datasets cache inside HF_HOME of `--datasets` prepared datasets of `--shards` arrow files
each, a lock and a downloads folder beside. A grading of the tiny `answer` task (its
check script reads the answer and nothing of the cache) is timed whole, `run_evaluation`
from call to outcome, with HF_HOME naming that cache and with no cache at all (median
of `--rounds`, interleaved); the difference is what the cache costs a grading. That task
has no network, so its grading is offline. A network task's grading mirrors the Hub's
cache too, entry by entry: the mirror alone is timed for that case (`Mirrors.build` with
the Hub online, as the grader's uid would own it), and its removal.

    python bench/grader_cache.py [--repos 400] [--files 100] [--datasets 50] [--shards 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from mlra.tasks.evaluators.base import run_evaluation
from mlra.tasks.spec import load_task

ANSWER_TASK = Path(__file__).resolve().parent.parent / "tests" / "data" / "tasks" / "answer"


def make_cache(root: Path, repos: int, files: int, datasets: int, shards: int) -> int:
    """The cache's entries made (folders, files and links)."""
    made = 0
    hub = root / "hub"
    for r in range(repos):
        repo = hub / f"models--org--model{r}"
        (repo / "blobs").mkdir(parents=True)
        (repo / "refs").mkdir()
        snap = repo / "snapshots" / ("0" * 40)
        snap.mkdir(parents=True)
        (repo / "refs" / "main").write_text("0" * 40)
        for f in range(files):
            blob = f"{r:08x}{f:032x}"
            (repo / "blobs" / blob).write_bytes(b"x")
            os.symlink(f"../../blobs/{blob}", snap / f"file{f}.safetensors")
        made += 5 + 2 * files
    ds = root / "datasets"
    for d in range(datasets):
        folder = ds / f"set{d}" / "default" / "0.0.0" / ("a" * 16)
        folder.mkdir(parents=True)
        for s in range(shards):
            (folder / f"set{d}-train-{s:05d}-of-{shards:05d}.arrow").write_bytes(b"x")
        (folder / "dataset_info.json").write_text("{}")
        made += 4 + shards + 1
    (ds / "downloads").mkdir(parents=True, exist_ok=True)
    (ds / "_set0_default_0.0.0.lock").write_text("")
    (root / "token").write_text("hf_secret\n")
    return made + 4


def mirror_alone(base: Path, cache: Path) -> tuple[float, float]:
    """Seconds to build and to remove the grader's mirror of `cache` with the Hub online."""
    from mlra.tasks.evaluators.grader_user import Mirrors

    work = base / "mirror-alone"
    work.mkdir()
    mirrors = Mirrors.plan({"HF_HOME": str(cache)}, work)
    start = time.perf_counter()
    mirrors.build(None)
    built = time.perf_counter() - start
    start = time.perf_counter()
    mirrors.remove()
    return built, time.perf_counter() - start


async def grade_once(base: Path, n: int) -> float:
    task = load_task(ANSWER_TASK)
    answer = base / f"frozen-{n}" / "answer.txt"
    answer.parent.mkdir()
    answer.write_text("42\n")
    start = time.perf_counter()
    outcome = await run_evaluation(task, answer, base / f"evaluation-{n}")
    took = time.perf_counter() - start
    assert outcome.ok and outcome.score == 1.0, outcome.error
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repos", type=int, default=400)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--datasets", type=int, default=50)
    parser.add_argument("--shards", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mlra-bench-grader-cache-", dir="/var/tmp"))
    try:
        cache = base / "hf"
        start = time.perf_counter()
        entries = make_cache(cache, args.repos, args.files, args.datasets, args.shards)
        print(f"synthetic cache: {entries:,} entries, made in {time.perf_counter() - start:.1f} s")
        with_cache, without = [], []
        for n in range(args.rounds):
            os.environ.pop("HF_DATASETS_CACHE", None)
            os.environ["HF_HOME"] = str(cache)
            with_cache.append(asyncio.run(grade_once(base, 2 * n)))
            os.environ["HF_HOME"] = str(base / "no-cache")  # not a folder: no cache shown
            without.append(asyncio.run(grade_once(base, 2 * n + 1)))
        a, b = statistics.median(with_cache), statistics.median(without)
        print(
            f"a grading with the cache {a:.2f} s, without {b:.2f} s "
            f"(medians of {args.rounds}): the cache costs {a - b:.2f} s; load {os.getloadavg()[0]:.1f}"
        )
        built, removed = mirror_alone(base, cache)
        print(
            f"a network task's grading: its mirror (the Hub's cache included) built in "
            f"{built:.2f} s, removed in {removed:.2f} s; load {os.getloadavg()[0]:.1f}"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
