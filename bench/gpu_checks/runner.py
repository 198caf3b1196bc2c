"""Running the checks, each in a process of its own with its own time-out: a check that
crashes (a CUDA fault takes the process with it), hangs or runs out of time is recorded
with its output, and the next one runs. The checks of a phase run at once; the whole
stays inside a budget (eight minutes), a check getting at most what is left of it.

A check's process writes its result to `checks/<name>.json` and its output to
`logs/<name>.log` in the report's folder; what the process did not write (it died, it
timed out) the parent writes for it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from gpu_checks.core import Check, Context, Skipped, call, function_of

SCRIPT = Path(__file__).resolve().parent.parent / "gpu_check.py"
TAIL_CHARS = 4000
"""The end of a failed check's output kept in the report (the whole is in logs/)."""


def gpu_absence() -> str | None:
    """Why this machine has no GPU to check ("torch.cuda unavailable, NVML: no GPU"), or
    None. A GPU that NVML sees but torch cannot use (a CPU build of torch) is a GPU:
    the install check says what is wrong with torch."""
    from mlra.agent.loop.resources import GpuMonitor

    nvml = GpuMonitor()
    try:
        import torch

        cuda = bool(torch.cuda.is_available())
        torch_says = "torch.cuda available" if cuda else "torch.cuda unavailable"
    except ImportError:
        cuda, torch_says = False, "torch not installed"
    if cuda or nvml.error is None:
        return None
    return f"{torch_says}, NVML: {nvml.error}"


def scratch(out: Path) -> Path:
    """The checks' scratch folders (models, task folders, environments, runs): beside
    the report's folder, not in it, so the report stays small to carry off a lent
    machine (whose tool brings back a folder's files only up to a limit)."""
    return out.with_name(out.name + ".work")


def run_one(check: Check, out: Path, device: str) -> int:
    """In the check's own process: runs it, writes its result."""
    work = scratch(out) / check.name
    shutil.rmtree(work, ignore_errors=True)  # a report folder used before: start afresh
    work.mkdir(parents=True)
    ctx = Context(device=device, work=work, out=out, arg=check.arg)
    started = time.monotonic()
    status, reason = "passed", ""
    try:
        call(function_of(check), ctx)
    except Skipped as exc:
        status, reason = "skipped", str(exc)
    except BaseException as exc:
        ctx.failures.append(
            f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exception(exc)[-12:])
        )
    if status == "passed" and ctx.failures:
        status = "failed"
    write_result(
        out,
        check,
        status=status,
        reason=reason,
        device=device,
        seconds=time.monotonic() - started,
        figures=ctx.figures,
        failures=ctx.failures,
    )
    return 0


def write_result(out: Path, check: Check, **fields: Any) -> dict[str, Any]:
    result = {"name": check.name, "what": check.what, **fields}
    result["seconds"] = round(float(result.get("seconds") or 0.0), 1)
    folder = out / "checks"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{check.name}.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def skipped_all(checks: list[Check], out: Path, reason: str, device: str) -> list[dict[str, Any]]:
    return [
        write_result(
            out, c, status="skipped", reason=reason, device=device, figures={}, failures=[]
        )
        for c in checks
    ]


def run_all(
    checks: list[Check],
    out: Path,
    device: str,
    budget_s: float,
    echo: Any = print,
    after_phase: Any = None,
) -> list[dict[str, Any]]:
    """Every check in its own process, phase by phase, inside `budget_s`;
    `after_phase` is given the results so far after each phase (the report is written
    then, so a run stopped from outside still leaves one)."""
    deadline = time.monotonic() + budget_s
    results: dict[str, dict[str, Any]] = {}
    for phase in sorted({c.phase for c in checks}):
        batch = [c for c in checks if c.phase == phase]
        left = deadline - time.monotonic()
        if left < 10:
            for c in batch:
                results[c.name] = write_result(
                    out, c, status="skipped", reason=f"not run: the {budget_s:.0f} s budget was spent",
                    device=device, figures={}, failures=[],
                )  # fmt: skip
            continue
        running = [(c, _start(c, out, device), time.monotonic()) for c in batch]
        for c, proc, began in running:
            limit = min(c.timeout_s, left)
            results[c.name] = _finish(c, proc, began, limit, out, device)
            r = results[c.name]
            echo(
                f"gpu_check: {c.name}: {r['status']}{' (' + r['reason'] + ')' if r.get('reason') else ''} in {r['seconds']} s"
            )
        if after_phase is not None:
            after_phase([results[c.name] for c in checks if c.name in results])
    return [results[c.name] for c in checks]


def _start(check: Check, out: Path, device: str) -> subprocess.Popen[bytes]:
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stale = out / "checks" / f"{check.name}.json"
    stale.unlink(missing_ok=True)
    with open(logs / f"{check.name}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, str(SCRIPT), "--out", str(out), "--device", device, "--run-one", check.name],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: a time-out kills all of it
        )  # fmt: skip


def _finish(
    check: Check, proc: subprocess.Popen[bytes], began: float, limit: float, out: Path, device: str
) -> dict[str, Any]:
    timed_out = False
    try:
        proc.wait(timeout=max(1.0, limit - (time.monotonic() - began)))
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    seconds = time.monotonic() - began
    output = _tail(out / "logs" / f"{check.name}.log")
    found = out / "checks" / f"{check.name}.json"
    if timed_out or not found.exists():
        why = (
            f"timed out after {limit:.0f} s"
            if timed_out
            else f"its process ended (exit {proc.returncode}) without a result"
        )
        partial: dict[str, Any] = {}
        return write_result(
            out, check, status="failed", reason=why, device=device, seconds=seconds,
            figures=partial, failures=[why], output=output,
        )  # fmt: skip
    result = json.loads(found.read_text())
    if result.get("status") == "failed":
        result["output"] = output
        found.write_text(json.dumps(result, indent=2, default=str))
    return result


def _tail(log: Path) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return text[-TAIL_CHARS:]
