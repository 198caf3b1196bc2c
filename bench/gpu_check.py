"""Proof on a GPU in one command: every path of mlra that a GPU changes, checked on
this machine, offline, in about eight minutes, into a report (report.json and
report.md, the Resources pane's SVG beside them).

    python bench/gpu_check.py --out DIR [--only CHECK,...] [--list]

The checks, in order (bench/gpu_checks/core.py lists them): the install (mlra, torch's
CUDA build, the `ml` extra); NVML as the Resources pane reads it under a matmul load,
and the pane rendered headless; the local sandbox (bubblewrap) with GPU devices, and
Docker's with the NVIDIA runtime where an engine has it; two parallel attempts on their
GPU shares; a task environment over the machine's CUDA torch; lm-eval on the GPU
against the CPU; the seven ML Research Benchmark evaluators on stand-ins made on the
spot; a short `mlra run` through the CLI. Each runs in its own process with its own
time-out: one failing never stops the others.

The checks' scratch (models, task folders, environments, runs) goes beside the
report's folder, in DIR.work, so that DIR holds only the report, the pane's SVG, each
check's result and each check's output.

A machine without a GPU gets one line saying so and what would be checked, a report
with every check skipped, and exit 0 (CI runs it). A check that fails makes the exit
1. `--device cpu` (not in --help) runs the checks' logic on the CPU, for working on
this script on a machine without a GPU: its figures prove nothing about a GPU.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_checks, beside this file
# The checkout's mlra where none is installed; an installed mlra is the one checked.
sys.path.append(str(Path(__file__).resolve().parent.parent))

from gpu_checks import report
from gpu_checks.core import CHECKS, GROUPS, chosen
from gpu_checks.runner import gpu_absence, run_all, run_one, skipped_all

BUDGET_S = 480.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu_check", description="Check every GPU path of mlra on this machine."
    )
    parser.add_argument("--out", type=Path, help="the report's folder (made if missing)")
    parser.add_argument("--only", metavar="CHECK,...", help="only these checks (or groups)")
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=["cuda", "cpu"], help=argparse.SUPPRESS)
    parser.add_argument("--run-one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.list:
        for c in CHECKS:
            print(f"{c.name:<34} {c.what} (time-out {c.timeout_s:.0f} s)")
        print(f"groups: {', '.join(f'{g} ({len(n)} checks)' for g, n in GROUPS.items())}")
        return 0
    try:
        checks = chosen(args.only)
    except ValueError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    out: Path = args.out or Path(tempfile.mkdtemp(prefix="mlra-gpu-check-"))
    out = out.resolve()
    if args.run_one:
        (check,) = chosen(args.run_one)
        return run_one(check, out, args.device or "cuda")

    started = time.monotonic()
    command = shlex.join(
        ["python", "bench/gpu_check.py", *(argv if argv is not None else sys.argv[1:])]
    )
    absent = gpu_absence() if args.device != "cpu" else None
    device = args.device or ("cpu" if absent else "cuda")
    if absent:
        results = skipped_all(checks, out, "no GPU", device)
        print(
            f"gpu_check: no GPU on this machine ({absent}); would check: "
            f"{', '.join(c.name for c in checks)} (report: {out})"
        )
    else:
        print(f"gpu_check: {len(checks)} checks on {device}, report in {out}", flush=True)

        def so_far(done: list[dict[str, object]]) -> None:
            report.write(
                out, done, command=command, device=device, no_gpu=None, budget_s=args.budget,
                seconds=time.monotonic() - started, unfinished=len(checks) - len(done),
            )  # fmt: skip

        results = run_all(checks, out, device, args.budget, after_phase=so_far)
    seconds = time.monotonic() - started
    report.write(
        out, results, command=command, device=device, seconds=seconds, no_gpu=absent,
        budget_s=args.budget,
    )  # fmt: skip
    if not absent:
        failed = [r["name"] for r in results if r["status"] == "failed"]
        print(
            f"gpu_check: {len(results) - len(failed)} of {len(results)} passed or skipped in "
            f"{seconds:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else "")
            + f" (report: {out / 'report.md'})"
        )  # fmt: skip
        return 1 if failed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
