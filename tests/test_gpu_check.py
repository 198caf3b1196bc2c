"""bench/gpu_check.py on a machine without a GPU, as CI runs it: one line saying so and
what it would check, a report with every check skipped, exit 0. (On a GPU it runs
every check for minutes: not here; issue 41.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_check.py"
sys.path.insert(0, str(ROOT / "bench"))

from gpu_checks.core import CHECKS  # noqa: E402
from gpu_checks.runner import gpu_absence  # noqa: E402

NO_GPU = gpu_absence()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.mark.skipif(
    NO_GPU is None, reason="this machine has a GPU: the check would run for minutes"
)
def test_without_a_gpu_it_says_so_in_one_line_and_reports_every_check_skipped(
    tmp_path: Path,
) -> None:
    done = _run("--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    names = ", ".join(c.name for c in CHECKS)
    assert line.startswith("gpu_check: no GPU on this machine (")
    assert "torch.cuda unavailable" in line and "NVML: " in line
    assert f"would check: {names} (report: " in line
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [c["name"] for c in report["checks"]] == [c.name for c in CHECKS]
    assert {(c["status"], c["reason"]) for c in report["checks"]} == {("skipped", "no GPU")}
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| install | skipped: no GPU |" in text and "every check skipped" in text


def test_it_lists_its_checks_and_refuses_an_unknown_one_in_one_line() -> None:
    listed = _run("--list")
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()[:-1]] == [c.name for c in CHECKS]
    unknown = _run("--only", "install,gpu-magic")
    assert unknown.returncode == 2 and unknown.stdout == ""
    (line,) = unknown.stderr.splitlines()
    assert line.startswith("gpu_check: no check named gpu-magic (the checks: install, ")


@pytest.mark.skipif(NO_GPU is None, reason="this machine has a GPU: the check would pass")
def test_a_check_asked_for_cuda_where_it_is_unavailable_says_what_it_saw(tmp_path: Path) -> None:
    """A lent machine gives one run: a CUDA that torch cannot use must come back with
    what the check saw (torch's words, the driver's library, its folders, the nodes)."""
    done = _run("--run-one", "install", "--device", "cuda", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "checks" / "install.json").read_text())
    assert result["status"] == "failed"
    (why,) = [f for f in result["failures"] if "is_available() is False" in f]
    assert "libcuda.so.1 " in why and "LD_LIBRARY_PATH=" in why and "nodes: " in why


def test_a_report_is_written_after_each_phase_so_a_stopped_run_leaves_one(tmp_path: Path) -> None:
    """The lent machine's tool may stop the command at its limit: what ran is reported.
    Stopped once the first phase's report is there (the nvml phase after it samples for
    five seconds, so the final report cannot have been written yet; each file is
    renamed into place whole)."""
    import os
    import signal
    import time

    out = tmp_path / "report"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--only", "install,nvml", "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (out / "report.md").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "no report after the first phase"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    report = json.loads((out / "report.json").read_text())
    assert [c["name"] for c in report["checks"]] == ["install"] and report["unfinished"] == 1
    assert "UNFINISHED: 1 checks still to run" in (out / "report.md").read_text()
    # The scratch is beside the report, which stays small enough to carry off a machine.
    assert (tmp_path / "report.work" / "install").is_dir()
    assert sorted(p.name for p in out.iterdir()) == ["checks", "logs", "report.json", "report.md"]
