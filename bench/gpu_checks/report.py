"""The report: report.json (everything, for a program) and report.md (for the docs:
what ran, on which device, each check's figures and every failure with its output)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """What the report was made on: cheap to read, nothing that needs a GPU to answer."""
    info: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load": _load(),
        # What a run given no --gpus keeps to (tools/sandbox/gpu_inventory.py): the
        # checks' expectations read differently where the machine sets it.
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        info["gpus"] = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.TimeoutExpired):
        info["gpus"] = []
    return info


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def write(
    out: Path,
    results: list[dict[str, Any]],
    *,
    command: str,
    device: str,
    seconds: float,
    no_gpu: str | None,
    budget_s: float,
    unfinished: int = 0,
) -> None:
    """`unfinished`: checks not yet run (the report written after each phase)."""
    report = {
        "command": command,
        "device": device,
        "no_gpu": no_gpu,
        "machine": machine(),
        "seconds": round(seconds, 1),
        "budget_s": budget_s,
        "unfinished": unfinished,
        "checks": results,
        "counts": {
            s: sum(r["status"] == s for r in results) for s in ("passed", "failed", "skipped")
        },
    }
    out.mkdir(parents=True, exist_ok=True)
    _whole(out / "report.json", json.dumps(report, indent=2, default=str))
    _whole(out / "report.md", markdown(report))


def _whole(path: Path, text: str) -> None:
    """Written beside and renamed: a run stopped mid-write leaves the last whole one."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    part.replace(path)


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    c = report["counts"]
    lines = [
        "# mlra GPU check",
        "",
        f"- command: `{report['command']}`",
        f"- date: {m['date']}; host {m['host']}; Python {m['python']}; {m['cpus']} CPUs; load {m['load']}",
        f"- GPUs (nvidia-smi): {'; '.join(m['gpus']) or 'none'}; "
        f"CUDA_VISIBLE_DEVICES {m.get('cuda_visible_devices') or 'not set'}",
        "- device the checks ran on: "
        + (
            "none"
            if report["no_gpu"]
            else report["device"]
            + (" (a dry run on CPU: not a proof on a GPU)" if report["device"] == "cpu" else "")
        ),
        f"- {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped in "
        f"{report['seconds']} s (budget {report['budget_s']:.0f} s)",
    ]
    if report["no_gpu"]:
        lines.append(f"- no GPU on this machine ({report['no_gpu']}): every check skipped")
    if report.get("unfinished"):
        lines.append(
            f"- UNFINISHED: {report['unfinished']} checks still to run when this was written"
        )
    lines += ["", "| check | status | seconds | what |", "|---|---|---|---|"]
    for r in report["checks"]:
        status = r["status"] + (f": {r['reason']}" if r.get("reason") else "")
        lines.append(f"| {r['name']} | {status} | {r['seconds']} | {r['what']} |")
    for r in report["checks"]:
        if r["status"] == "skipped" and not r.get("figures"):
            continue
        lines += [
            "",
            f"## {r['name']}: {r['status']}",
            "",
            f"{r['what']} (device: {r['device']})",
            "",
        ]
        for key, value in (r.get("figures") or {}).items():
            if isinstance(value, str) and "\n" in value:  # the pane's text, an output
                lines += [f"- {key}:", "", "```", value.rstrip(), "```", ""]
            else:
                lines.append(f"- {key}: {_short(value)}")
        for failure in r.get("failures") or []:
            lines += ["", "Failure:", "", "```", failure.rstrip(), "```"]
        if r.get("output"):
            lines += [
                "",
                "Output (its end; the whole in logs/):",
                "",
                "```",
                r["output"].rstrip(),
                "```",
            ]
    return "\n".join(lines) + "\n"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 600 else text[:600] + " …"
