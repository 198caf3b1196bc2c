"""The GPUs a run keeps to (tools/sandbox/gpu_inventory.py, agent/setup/sandboxes.py's
run_gpus): a CUDA_VISIBLE_DEVICES set where mlra starts, or `--gpus`, holds for the
agent's commands, its validations and its grading alike. Before, the sandboxes built
their environment from nothing and dropped the host's CUDA_VISIBLE_DEVICES, so a
researcher who had set it on a shared machine got every GPU; and grading ignored
`--gpus`, landing on whatever GPU CUDA picks first.

This machine has no GPU: the ids are checked as each process was told them, which is
all CUDA goes by."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.tools.sandbox import gpu_inventory
from mlra.tools.sandbox.gpu_inventory import Gpu, host_gpus, machine_gpus, usable_gpus
from tests.conftest import SECRET_ENV, answer_copy, mlra_cli

GRADER = """
import json, os, sys
from pathlib import Path

artifact, task_root, out = (Path(a) for a in sys.argv[1:4])
seen = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>") + "/" + os.environ.get("CUDA_DEVICE_ORDER", "")
(out.parent / "grader-saw.txt").write_text(seen)
good = artifact.read_text().strip() == "42"
out.write_text(json.dumps({"score": float(good), "metrics": {}}))
"""


def _gpu_task(answer_task: Path, tmp_path: Path, gpus: int) -> Path:
    """The answer task needing `gpus` GPUs, whose recipe and grader write down the GPUs
    they were told."""
    return answer_copy(
        tmp_path / "task",
        ("network = false", f"network = false\ngpus = {gpus}"),
        (
            'command = "python -c',
            'command = "echo $CUDA_VISIBLE_DEVICES/$CUDA_DEVICE_ORDER > seen.txt; python -c',
        ),
        files={"hidden/check.py": GRADER},
        source=answer_task,
    )


def _run(task: Path, tmp_path: Path, *flags: str, host: str | None) -> Path:
    env = {} if host is None else {"CUDA_VISIBLE_DEVICES": host}
    runs = tmp_path / "runs"
    proc = mlra_cli(
        ["run", str(task), "--model", "baseline", "--no-tui", "--baseline-validate",
         "--runs-dir", str(runs), *flags],
        cwd=tmp_path, env=env, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = runs.iterdir()
    return run_dir


def _seen(run_dir: Path) -> tuple[str, str, str]:
    """What the recipe, the validation's grader and the test grader were told."""
    return (
        (run_dir / "workspace" / "seen.txt").read_text().strip(),
        (run_dir / "validations" / "1" / "evaluation" / "script" / "grader-saw.txt").read_text(),
        (run_dir / "evaluation" / "script" / "grader-saw.txt").read_text(),
    )


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_inventory, "machine_gpus", lambda: None)


def test_a_run_keeps_to_the_gpus_the_host_named_in_its_commands_validation_and_grading(
    answer_task: Path, tmp_path: Path
) -> None:
    host = "0" if machine_gpus() else "3"  # without a GPU, ids are taken as given
    run_dir = _run(_gpu_task(answer_task, tmp_path, gpus=1), tmp_path, host=host)
    assert _seen(run_dir) == (f"{host}/PCI_BUS_ID",) * 3


def test_a_host_setting_that_leaves_a_gpu_task_no_gpu_is_said_at_the_start(
    answer_task: Path, tmp_path: Path
) -> None:
    task = _gpu_task(answer_task, tmp_path, gpus=1)
    proc = mlra_cli(
        ["run", str(task), "--model", "baseline", "--no-tui", "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": "-1"}, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (
        "the task needs 1 GPU; CUDA_VISIBLE_DEVICES='-1' leaves it no GPU, so its commands, "
        "validations and grading get only that (--gpus names others)" in proc.stdout
    )
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "workspace" / "seen.txt").read_text().strip() == "/"


def test_a_resumed_run_keeps_its_gpus_or_takes_those_given(
    answer_task: Path, tmp_path: Path
) -> None:
    """The host's setting is recorded at the start, so a resume from another shell keeps
    it; `mlra resume --gpus` (what a batch passes a resumed run: the GPUs its pool hands
    it now) replaces it, for the commands and the grading."""
    task = _gpu_task(answer_task, tmp_path, gpus=1)
    toml = task / "task.toml"
    wait = "for i in $(seq 1200); do [ -f go-G7 ] && break; sleep 0.05; done; python -c"
    toml.write_text(toml.read_text().replace("seen.txt; python -c", f"seen.txt; {wait}"))
    toml.write_text(toml.read_text().replace("> seen.txt", ">> seen.txt"))
    runs = tmp_path / "runs"
    log = runs / "r" / "events.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlra", "run", str(task), "--model", "baseline", "--no-tui",
         "--runs-dir", str(runs), "--run-id", "r", "--isolation", "none"],
        cwd=tmp_path, env={**env, "CUDA_VISIBLE_DEVICES": "3"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        told = runs / "r" / "workspace" / "seen.txt"
        while not (told.exists() and told.read_text().endswith("\n")):
            assert proc.poll() is None and time.monotonic() < deadline, "the step never started"
            time.sleep(0.01)  # polling a file another process writes: nothing to await
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["pkill", "-f", "go-G7"], check=False)
    started = next(e for e in read_events(log) if isinstance(e, ev.RunStarted))
    assert started.config["gpus"] == "3"  # what a resume without --gpus keeps
    (runs / "r" / "workspace" / "go-G7").touch()
    resumed = mlra_cli(["resume", str(runs / "r"), "--no-tui", "--gpus", "2"], cwd=tmp_path, env={})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    seen = (runs / "r" / "workspace" / "seen.txt").read_text().split()
    assert seen == ["3/PCI_BUS_ID", "2/PCI_BUS_ID"]
    assert (runs / "r" / "evaluation" / "script" / "grader-saw.txt").read_text() == "2/PCI_BUS_ID"


def test_gpus_given_on_the_command_line_hold_for_grading_too(
    answer_task: Path, tmp_path: Path
) -> None:
    run_dir = _run(_gpu_task(answer_task, tmp_path, gpus=1), tmp_path, "--gpus", "1", host="0")
    assert _seen(run_dir) == ("1/PCI_BUS_ID",) * 3


def test_a_task_that_needs_no_gpu_is_graded_without_one(answer_task: Path, tmp_path: Path) -> None:
    run_dir = _run(_gpu_task(answer_task, tmp_path, gpus=0), tmp_path, host=None)
    recipe, validation, grading = _seen(run_dir)
    assert recipe == "/"  # CUDA_VISIBLE_DEVICES="": no GPU
    assert validation == grading == "/"


@pytest.mark.usefixtures("no_nvml")
def test_the_host_setting_is_read_as_cuda_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert host_gpus({}) is None
    assert host_gpus({"CUDA_VISIBLE_DEVICES": ""}) == "none"
    assert host_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == "none"
    assert host_gpus({"CUDA_VISIBLE_DEVICES": "2, 0,-1,1"}) == "2,0"  # ends at -1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert usable_gpus() == ()
    assert usable_gpus("all") == ()  # nothing known to list


def _nvml_standin(monkeypatch: pytest.MonkeyPatch, broken: dict[int, str]) -> None:
    """An NVML that lists two GPUs and refuses the calls `broken` names for one of them,
    as virtual GPUs do (this machine has no GPU, so no real NVML answers)."""

    class NVMLError(Exception):
        pass

    def refuse_for(call: str, handle: int) -> None:
        if broken.get(handle) == call:
            raise NVMLError("Not Supported")

    def name(h: int) -> bytes:
        refuse_for("name", h)
        return b"NVIDIA H200"

    def memory(h: int) -> types.SimpleNamespace:
        refuse_for("memory", h)
        return types.SimpleNamespace(total=143_771 * 2**20)

    def uuid(h: int) -> str:
        return f"GPU-{h}aaa"

    def memory_used(h: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(total=143_771 * 2**20, used=(h + 1) * 1024 * 2**20)

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=name,
        nvmlDeviceGetMemoryInfo=memory if broken else memory_used,
        nvmlDeviceGetUUID=uuid,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=50 * h),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)


def test_a_gpu_nvml_half_answers_for_is_still_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """readiness counted no GPU at all when one NVML call raised for one GPU."""
    _nvml_standin(monkeypatch, {1: "memory"})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus = usable_gpus()
    assert [g.id for g in gpus] == ["0", "1"]
    assert gpus[1] == Gpu("1", "NVIDIA H200", None, "GPU-1aaa")
    # A UUID, or a unique start of one, is kept as the whole UUID (Docker takes it);
    # an index NVML does not know ends the list, as it does for CUDA.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1aa,7,0")
    assert host_gpus() == "GPU-1aaa"
    assert [g.memory_gb for g in usable_gpus()] == [None]
    assert host_gpus({"CUDA_VISIBLE_DEVICES": "GPU-,1"}) == "none"  # not unique: none
    # A MIG instance (NVML lists its parent GPU) is taken as given.
    assert host_gpus({"CUDA_VISIBLE_DEVICES": "MIG-5c2f,MIG-GPU-0aaa/1/0"}) == (
        "MIG-5c2f,MIG-GPU-0aaa/1/0"
    )
    assert host_gpus({"CUDA_VISIBLE_DEVICES": "1,0"}) == "1,0"


@pytest.mark.parametrize(
    ("given", "shown"),
    [("all", [0, 1]), ("1", [1]), ("GPU-0aaa", [0]), ("GPU-1a", [1]), ("none", [])],
)
def test_the_resources_pane_shows_only_the_gpus_the_run_was_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: str, shown: list[int]
) -> None:
    """On a shared machine the Resources pane showed every GPU with everyone's load for a
    local run given one (a container's showed its own only)."""
    from mlra.agent.loop.resources import ResourceMonitor
    from mlra.tools.sandbox.local import LocalSandbox
    from mlra.tools.sandbox.spec import SandboxSpec

    _nvml_standin(monkeypatch, {})
    box = LocalSandbox(tmp_path, SandboxSpec(gpus=given), isolation_mode="none")
    sample = ResourceMonitor(tmp_path, sandbox=box).sample()
    assert [g.index for g in sample.gpus] == shown
    if not shown:
        assert sample.gpu_error == "no GPU given to the run"


@pytest.mark.parametrize(
    ("given", "shown"),
    [("all", [0, 1]), ("1", [1]), ("GPU-1aaa", [1]), ("GPU-0a,1", [0, 1]), ("GPU-", [])],
)
def test_a_containers_resources_pane_shows_the_gpus_it_was_given_by_uuid(
    monkeypatch: pytest.MonkeyPatch, given: str, shown: list[int]
) -> None:
    """A container given its GPUs by UUID (`--gpus GPU-...`, or a host CUDA_VISIBLE_DEVICES
    of UUIDs) showed none of them: its view matched the given ids with GPU indexes only."""
    from mlra.agent.loop.resources import GpuMonitor, sandbox_view
    from mlra.tools.sandbox.base import SandboxUsage
    from mlra.tools.sandbox.gpu_inventory import given_ids

    _nvml_standin(monkeypatch, {})
    nvml = GpuMonitor()
    sample = ev.ResourceSample(
        cpu_percent=0.0, ram_used_mb=1.0, ram_total_mb=2.0, disk_workspace_mb=0.0,
        gpus=nvml.sample(),
    )  # fmt: skip
    usage = SandboxUsage(
        cpu_percent=None, mem_used_mb=None, mem_limit_mb=None, cpus=None,
        gpu_ids=given_ids(given),
    )  # fmt: skip
    seen = sandbox_view(sample, usage, 2.0, nvml)
    assert [g.index for g in seen.gpus] == shown
