"""What mlra's metric-file reader holds of a TensorBoard tag flood (issue 37).

Two floods, each read the way a run reads its files (MetricFiles, through the local
sandbox's `open_beneath`, scan after scan until nothing new), in a fresh interpreter
whose own peak resident size (VmHWM, taken before and after) is what it reports:

- `big`: one event file of `--mb` MB, records of a distinct tag each (200-byte names) with
  30 KiB of plugin metadata that names another plugin than scalars;
- `rewritten`: one file kept under 4 MB, truncated (a scan sees it empty) and written
  again with new tags until `--mb` MB have gone through it.

The records are framed as TFRecord with a header CRC and a zero data CRC (neither
reader checks the data CRC; TensorBoard's writer computes it in pure Python, 7 MB/s).
`--against TREE` measures another checkout's reader too (e.g. the code before the caps).

    python bench/reader_memory.py [--mb 300] [--against /path/to/older/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLUGIN_BYTES = 30 * 1024
TAG_BYTES = 200


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _crc_table() -> list[int]:
    table: list[int] = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's header checksum, here so that a checkout without it is measured too."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _record(event: bytes) -> bytes:
    header = struct.pack("<Q", len(event))
    return header + struct.pack("<I", masked_crc32c(header)) + event + b"\0\0\0\0"


def flood_record(index: int, round_: int = 0) -> bytes:
    """One Event: a float tensor under a new 200-byte tag, with 30 KiB of plugin metadata."""
    tag = f"flood/{round_}/{index}/".encode().ljust(TAG_BYTES, b"t")
    plugin = _field(1, b"p" * PLUGIN_BYTES) + _field(2, b"c" * 64)  # plugin_name, content
    tensor = _varint(1 << 3) + _varint(1) + _field(5, struct.pack("<f", index))
    value = _field(1, tag) + _field(8, tensor) + _field(9, _field(1, plugin))
    event = b"\x09" + struct.pack("<d", time.time()) + b"\x10" + _varint(index)
    return _record(event + _field(5, _field(1, value)))


CHILD = r"""
import json, os, sys
from pathlib import Path
from mlra.agent.metrics.files import MetricFiles
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
sys.path.insert(0, sys.argv[3])
from reader_memory import flood_record

def hwm():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

workspace, mode, mb = Path(sys.argv[1]), sys.argv[2], float(sys.argv[4])
files = MetricFiles(LocalSandbox(workspace, SandboxSpec()).open_beneath, lambda: 1.0)
path = "events.out.tfevents.1.flood"
before = hwm()
scans = 0
def read_through():
    # Flood tags are another plugin's: a scan gives no points, so read as many scans
    # as the file takes (4 MiB a scan) and two more.
    global scans
    for _ in range((workspace / path).stat().st_size // (4 << 20) + 2):
        files.read([path])
        scans += 1

if mode == "big":
    read_through()
else:
    budget, round_ = mb * 1e6, 0
    while budget > 0:
        data = b"".join(flood_record(i, round_) for i in range(120))
        with open(workspace / path, "r+b") as f:
            f.truncate(0)
            files.read([path])  # a scan sees it truncated, then written again
            f.write(data)
        budget -= len(data)
        round_ += 1
        read_through()
held = files.held_bytes() if hasattr(files, "held_bytes") else None
print(json.dumps({"before": before, "after": hwm(), "scans": scans, "held": held}))
"""


def measure(tree: Path, workspace: Path, mode: str, mb: float) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    here = str(Path(__file__).resolve().parent)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(workspace), mode, here, str(mb)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=workspace,  # not the checkout: `mlra` comes from PYTHONPATH alone
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    parser.add_argument("--mb", type=float, default=300.0, help="size of each flood")
    parser.add_argument("--against", type=Path, help="another checkout to measure too")
    args = parser.parse_args()
    trees = [Path(__file__).resolve().parent.parent]
    if args.against:
        trees.append(args.against.resolve())
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        big = workspace / "events.out.tfevents.1.flood"
        with big.open("wb") as f:
            written, index = 0, 0
            while written < args.mb * 1e6:
                written += f.write(flood_record(index))
                index += 1
        print(f"big: {written / 1e6:.0f} MB, {index:,} tags; load {os.getloadavg()[0]:.1f}")
        for mode in ("big", "rewritten"):
            for tree in trees:
                if mode == "rewritten":
                    big.write_bytes(b"")
                got = measure(tree, workspace, mode, args.mb)
                grew = (got["after"] - got["before"]) / 2**20
                print(
                    f"{mode:9} {tree}: peak +{grew:.0f} MiB (VmHWM {got['after'] / 2**20:.0f} "
                    f"MiB), held {got['held']}, {got['scans']} scans, {got['seconds']} s"
                )


if __name__ == "__main__":
    main()
