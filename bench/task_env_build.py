"""What a task's own Python environment costs to have (tasks/env_build.py): built the
first time with uv's cache empty (every wheel downloaded or read from the machine's
own indexes), built again with uv's cache warm (a new task, or the same one after its
environment was removed: uv links the cached wheels in), and found in mlra's cache
(every run after the first: no build at all, the hash of the requirements and a file
read).

Three requirement sets: MLAgentBench's era pin alone (`numpy<2`, with mlra's pandas
installed again to agree with it), the tests' small pure-Python package
(`tabulate==0.8.10`), and a compiled stack of the benchmark's era (`numpy<2`,
`scikit-learn==1.3.2`, which brings scipy and the rest). `--pip` also times the
fallback without uv (python -m venv and pip, with pip's own cache warm).

    python bench/task_env_build.py [--sets era,small,stack] [--pip]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlra.tasks import env_build
from mlra.tasks.env_build import ensure

SETS = {
    "era": ["numpy<2"],
    "small": ["tabulate==0.8.10"],
    "stack": ["numpy<2", "scikit-learn==1.3.2"],
}


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def timed_build(lines: list[str], cache: Path) -> tuple[float, env_build.EnvRecord, bool]:
    os.environ["MLRA_CACHE_DIR"] = str(cache)
    started = time.monotonic()
    record, _, built = ensure(lines, echo=None)
    return time.monotonic() - started, record, built


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sets", default="era,small,stack")
    parser.add_argument("--pip", action="store_true", help="also time venv + pip")
    args = parser.parse_args()
    print(f"load before: {load()}")
    print(f"python {sys.version.split()[0]}, uv: {env_build.uv_binary()}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="mlra-bench-env-") as tmp:
        root = Path(tmp)
        os.environ["UV_CACHE_DIR"] = str(root / "uv-cache")  # empty: cold
        for name in args.sets.split(","):
            lines = SETS[name]
            cold, record, _ = timed_build(lines, root / f"{name}-cold")
            warm, _, _ = timed_build(lines, root / f"{name}-warm")
            cached, _, built = timed_build(lines, root / f"{name}-warm")
            assert not built
            rows.append((name, lines, cold, warm, cached, record))
            print(
                f"{name:<6} {' '.join(lines):<36} first, uv cache cold {cold:6.2f} s · "
                f"first, uv cache warm {warm:6.2f} s · cached {cached * 1000:6.1f} ms"
                + (f" · replaced {', '.join(record.replaced)}" if record.replaced else "")
                + (f" · warnings {record.warnings}" if record.warnings else ""),
                flush=True,
            )
        if args.pip:
            real = env_build.uv_binary
            env_build.uv_binary = lambda: None  # the fallback: venv and pip
            try:
                for name in args.sets.split(","):
                    took, record, _ = timed_build(SETS[name], root / f"{name}-pip")
                    print(f"{name:<6} venv + pip ({record.builder}): {took:6.2f} s", flush=True)
            finally:
                env_build.uv_binary = real
        shutil.rmtree(root, ignore_errors=True)
    print(f"load after:  {load()}")


if __name__ == "__main__":
    main()
