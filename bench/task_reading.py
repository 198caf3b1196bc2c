"""What reading a task's code costs `mlra tasks show`: an MLAgentBench-layout folder
whose `env/` holds N large generated .py files (imports, `load_dataset`, `requests`
calls, nested expressions), shown with the real command line, and its readiness check
(tasks/needs.py `find_needs`) run in this process with `ast.parse` counted.

Each reader (imports, dataset loads, network clients, the grader's imports) parsed
every file again, and `tasks show` runs the check more than once: on 500 such files
`tasks show` went from 210 s to 578 s when tasks/network_reads.py was added.

    python bench/task_reading.py [--files 40] [--functions 200] [--against /older/checkout]
        [--memory] [--no-show]

`--against` times the same folder with another checkout's `mlra` (its `python -m
mlra`, its own code on PYTHONPATH) for a before/after on the same machine and load;
each `tasks show` is given with its peak resident memory. `--memory` gives the
readiness check's peak Python allocations (tracemalloc, which slows it two or three
times): for another checkout's, run this script with PYTHONPATH at that checkout.
`--no-show` leaves out `tasks show`.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_text(index: int, functions: int) -> str:
    """A large module: imports, a dataset load, a network call and `functions` bodies."""
    head = (
        "import os\nimport json\nimport requests\nfrom datasets import load_dataset\n\n"
        f"DATA = load_dataset('imdb_{index}')\n"
        f"URL = 'https://example.com/data/{index}.json'\n\n"
        "def fetch():\n    return requests.get(URL).json()\n\n"
    )
    body = "".join(
        f"def f{i}(x, y=3):\n"
        f"    z = [x * {i} + y for _ in range(10) if (x - {i}) * (y + 1) > 0]\n"
        f"    return {{'a': z, 'b': os.path.join('p', str(x)), 'c': json.dumps(z)}}\n\n"
        for i in range(functions)
    )
    return head + body


def make_task(folder: Path, files: int, functions: int) -> Path:
    task = folder / "many-modules"
    (task / "env").mkdir(parents=True)
    (task / "scripts").mkdir()
    (task / "scripts" / "research_problem.txt").write_text("Make the number smaller.")
    (task / "scripts" / "eval.py").write_text(
        "import json\n\ndef get_score(submission_folder='../env'):\n    return 4.0\n"
    )
    (task / "env" / "train.py").write_text("import mod_0\nprint(mod_0.f0(1))\n")
    for i in range(files):
        (task / "env" / f"mod_{i}.py").write_text(module_text(i, functions))
    return task


def show_seconds(task: Path, checkout: Path) -> tuple[float, float]:
    """`mlra tasks show` with `checkout`'s code: its seconds and peak resident MB."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlra", "tasks", "show", str(task)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=checkout,
        )
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not all children's
        took = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            out.seek(0)
            raise SystemExit(f"mlra tasks show failed:\n{out.read().decode(errors='replace')}")
    return took, usage.ru_maxrss / 1024  # KiB on Linux


def counted_check(task: Path, memory: bool) -> tuple[float, int, float | None]:
    """One readiness check in this process: its seconds, how many parses it made and,
    with `memory`, its peak Python allocations in MB (tracemalloc)."""
    from mlra.tasks.readiness import task_needs
    from mlra.tasks.spec import load_task

    parses = 0
    real = ast.parse

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal parses
        parses += 1
        return real(*args, **kwargs)

    loaded = load_task(task)
    ast.parse = counting
    if memory:
        tracemalloc.start()
    try:
        start = time.perf_counter()
        task_needs(loaded)
        took = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] / 1e6 if memory else None
        return took, parses, peak
    finally:
        ast.parse = real
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--functions", type=int, default=200, help="bodies per file")
    parser.add_argument("--against", type=Path, help="another checkout, timed the same way")
    parser.add_argument("--memory", action="store_true", help="the check's peak allocations")
    parser.add_argument("--no-show", action="store_true", help="no `mlra tasks show`")
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory(prefix="mlra-task-reading-") as tmp:
        task = make_task(Path(tmp), args.files, args.functions)
        size = sum(p.stat().st_size for p in (task / "env").glob("*.py"))
        print(f"{args.files + 2} .py files, {size / 1e6:.1f} MB ({args.functions} functions each)")
        import mlra

        print(f"the check's code: {Path(mlra.__file__).parent.parent}")
        seconds, parses, peak = counted_check(task, args.memory)
        memory = f", peak {peak:.0f} MB allocated (tracemalloc)" if peak is not None else ""
        print(f"one readiness check here: {seconds:.2f} s, {parses} parses{memory}")
        for name, checkout in [("this checkout", ROOT), ("--against", args.against)]:
            if checkout is not None and not args.no_show:
                took, resident = show_seconds(task, checkout)
                print(f"`mlra tasks show` ({name}): {took:.2f} s, peak {resident:.0f} MB resident")
        print("load:", os.getloadavg())


if __name__ == "__main__":
    main()
