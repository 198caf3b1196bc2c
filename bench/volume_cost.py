"""What a workspace volume costs: setting it up and undoing it, and per command.

A sandbox whose quota the kernel keeps (tools/sandbox/volume.py) pays once when it
starts (fallocate, mkfs.ext4 with lazy inode tables, mount, carrying the workspace
onto it) and once when it closes (carrying it back, unmount, deleting the image);
each command then pays one statvfs (the "workspace is full" line) and no `du` runs
in the background. Measured here, as root with loop devices:

- set-up and teardown of an empty workspace's volume at several sizes (median of
  `--rounds`), and of one holding `--files` small files and a 1 GB sparse file;
- a command (`true`) through the bubblewrap sandbox with the volume and with the du
  watcher instead (median of `--commands`).

    python bench/volume_cost.py [--rounds 5] [--commands 100] [--files 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from mlra.tools.sandbox import volume
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.default_limits import beyond_reserve_mb
from mlra.tools.sandbox.local import LocalSandbox

SIZES_MB = (64, 1024, 10 * 1024, 40 * 1024)


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f} ms"


def setup_teardown(base: Path, size_mb: int, rounds: int, files: int = 0) -> tuple[str, str]:
    ups, downs = [], []
    for i in range(rounds):
        ws = base / f"r{size_mb}-{files}-{i}" / "workspace"
        ws.mkdir(parents=True)
        for n in range(files):
            (ws / f"f{n}.txt").write_text(f"{n}\n")
        if files:
            with open(ws / "sparse.bin", "wb") as f:
                f.truncate(1 << 30)
        made = volume.WorkspaceVolume(ws, size_mb)
        start = time.perf_counter()
        made.open()
        ups.append(time.perf_counter() - start)
        start = time.perf_counter()
        problem = made.close()
        downs.append(time.perf_counter() - start)
        assert problem is None, problem
    return _ms(ups), _ms(downs)


async def per_command(base: Path, commands: int, use_volume: bool) -> str:
    ws = base / ("cmd-volume" if use_volume else "cmd-watcher") / "workspace"
    ws.mkdir(parents=True)
    box = LocalSandbox(ws, SandboxSpec(disk_mb=256, disk_volume=use_volume), isolation_mode="bwrap")
    await box.start()
    try:
        await box.exec(["true"], timeout=30)
        times = []
        for _ in range(commands):
            start = time.perf_counter()
            await box.exec(["true"], timeout=30)
            times.append(time.perf_counter() - start)
    finally:
        await box.close()
    return _ms(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--commands", type=int, default=100)
    parser.add_argument("--files", type=int, default=2000)
    args = parser.parse_args()
    why = volume.unavailable()
    if why is not None:
        raise SystemExit(f"no workspace volume here: {why}")
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory(prefix="mlra-volume-bench-", dir="/var/tmp") as tmp:
        base = Path(tmp)
        for size in SIZES_MB:
            if size + 1024 > beyond_reserve_mb(base):
                print(f"{size:>6} MB: skipped, it would take the disk's reserve")
                continue
            up, down = setup_teardown(base, size, args.rounds)
            print(f"{size:>6} MB empty: set up {up}, undone {down}")
        up, down = setup_teardown(base, 1024, args.rounds, files=args.files)
        print(
            f"  1024 MB with {args.files} files and a 1 GB sparse file: set up {up}, undone {down}"
        )
        for use in (True, False):
            took = asyncio.run(per_command(base, args.commands, use))
            print(
                f"a command (`true`, bwrap) with {'the volume' if use else 'the du watcher'}: {took}"
            )
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
