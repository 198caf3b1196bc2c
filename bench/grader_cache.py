"""What the shared Hugging Face cache costs a grading (as root: the grader runs as a uid
of its own and reads the cache through its own view of it, tasks/evaluators/grader_user.py).

A synthetic cache laid out as huggingface_hub and datasets lay theirs out: `--repos` Hub
repositories of `--files` blobs each (a snapshot of links to them, a ref), and a
datasets cache inside HF_HOME of `--datasets` prepared datasets of `--shards` arrow files
each, a lock and a downloads folder beside. A grading of the tiny `answer` task (its
check script reads the answer and nothing of the cache) is timed whole, `run_evaluation`
from call to outcome, with HF_HOME naming that cache and with no cache at all (median
of `--rounds`, interleaved); the difference is what the cache costs a grading. That task
has no network, so its grading is offline; the same task with `network = true` is graded
alike, with and without the cache (its grading has the Hub online, so its cache is the
grader's own to write: grader_user.py). The grader's caches alone are timed too, made
(`Mirrors.build`, as mlra's user) and removed outside a grading, with the Hub offline and
online.

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


def mirror_alone(base: Path, cache: Path, *, online: bool) -> tuple[float, float]:
    """Seconds to make and to remove the grader's own caches of `cache` (the Hub online
    or offline), outside a grading."""
    from mlra.tasks.evaluators.grader_user import Mirrors

    work = base / f"mirror-alone-{'online' if online else 'offline'}"
    work.mkdir()
    env = {"HF_HOME": str(cache)} | ({} if online else {"HF_HUB_OFFLINE": "1"})
    mirrors = Mirrors.plan(env, work)
    start = time.perf_counter()
    mirrors.build(None)
    built = time.perf_counter() - start
    start = time.perf_counter()
    mirrors.remove()
    return built, time.perf_counter() - start


def network_task(base: Path) -> Path:
    """The `answer` task with the network on: its grading has the Hub online."""
    folder = base / "answer-network"
    shutil.copytree(ANSWER_TASK, folder)
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("network = false", "network = true"))
    return folder


async def grade_once(base: Path, n: int, task_dir: Path = ANSWER_TASK) -> float:
    task = load_task(task_dir)
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
        online = network_task(base)
        os.environ.pop("HF_DATASETS_CACHE", None)
        for label, task_dir in (("an offline", ANSWER_TASK), ("a network task's", online)):
            with_cache, without = [], []
            for n in range(args.rounds):
                os.environ["HF_HOME"] = str(cache)
                with_cache.append(asyncio.run(grade_once(base, 2 * n, task_dir)))
                os.environ["HF_HOME"] = str(base / "no-cache")  # not a folder: none shown
                without.append(asyncio.run(grade_once(base, 2 * n + 1, task_dir)))
                for done in base.glob("*-[0-9]*"):
                    shutil.rmtree(done, ignore_errors=True)
            a, b = statistics.median(with_cache), statistics.median(without)
            print(
                f"{label} grading with the cache {a:.2f} s, without {b:.2f} s (medians of "
                f"{args.rounds}): the cache costs {a - b:.2f} s; load {os.getloadavg()[0]:.1f}"
            )
        for label, online in (("an offline", False), ("a network task's", True)):
            built, removed = mirror_alone(base, cache, online=online)
            print(
                f"{label} grading: its own caches alone made in {built:.2f} s, "
                f"removed in {removed:.2f} s; load {os.getloadavg()[0]:.1f}"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
