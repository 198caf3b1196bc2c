"""A command given a GPU in the local sandbox can load the NVIDIA driver, and run its
nvidia-smi, where this machine finds them only through LD_LIBRARY_PATH and PATH (the
driver's folder mounted at start, as /usr/local/nvidia on the GPU machines this project
is lent): the folders are carried into the command's environment, and shown inside
bubblewrap. A stand-in driver folder (a
file named libcuda.so.1) takes the driver's place on a machine without one."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.env import sandbox_env
from mlra.tools.sandbox.gpu_driver import driver_library_dirs
from mlra.tools.sandbox.local import IsolationMode, LocalSandbox

BWRAP_PROBLEM = isolation_problem()
MODES = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or ""))]  # fmt: skip


@pytest.fixture
def driver() -> Iterator[tuple[Path, Path]]:
    """(a stand-in driver folder, a library folder without the driver), outside /tmp
    (bubblewrap's /tmp is a fresh one) and outside the system folders it shows anyway."""
    base = Path("/var/tmp")
    if not os.access(base, os.W_OK):
        pytest.skip("/var/tmp is not writable, and a folder outside /tmp is needed")
    root = Path(tempfile.mkdtemp(prefix="mlra-driver-", dir=base)).resolve()
    (root / "nvidia" / "lib64").mkdir(parents=True)
    (root / "nvidia" / "lib64" / "libcuda.so.1").write_bytes(b"")
    (root / "nvidia" / "bin").mkdir()
    smi = root / "nvidia" / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: stand-in'\n")
    smi.chmod(0o755)
    (root / "nvidia" / "bin" / "notes.txt").write_text("a person's own file\n")
    (root / "other").mkdir()
    (root / "other" / "libsecret.so").write_bytes(b"")
    yield root / "nvidia" / "lib64", root / "other"
    shutil.rmtree(root, ignore_errors=True)


def test_only_folders_holding_the_driver_are_found(driver: tuple[Path, Path]) -> None:
    lib, other = driver
    search = os.pathsep.join([str(other), "", "relative/lib", str(lib), str(lib) + "/"])
    assert driver_library_dirs(search) == [lib]
    assert driver_library_dirs(str(other)) == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_command_given_a_gpu_finds_the_driver_through_ld_library_path(
    mode: IsolationMode, driver: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib, other = driver
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{other}{os.pathsep}{lib}")
    monkeypatch.setenv("PATH", f"{lib.parent / 'bin'}{os.pathsep}{os.environ['PATH']}")
    script = (
        'echo "LD=${LD_LIBRARY_PATH-unset}"; ls "$LD_LIBRARY_PATH" 2>&1 || true; '
        'nvidia-smi 2>&1 || true; ls "$(dirname "$(command -v nvidia-smi)")"'
    )
    seen = {}
    for gpus in ("0", "none"):
        workspace = tmp_path / gpus
        workspace.mkdir()
        box = LocalSandbox(workspace, SandboxSpec(gpus=gpus), isolation_mode=mode)
        await box.start()
        try:
            seen[gpus] = (await box.exec(["sh", "-c", script], timeout=60)).output
        finally:
            await box.close()
    assert f"LD={lib}\n" in seen["0"] and "libcuda.so.1" in seen["0"]
    assert str(other) not in seen["0"]
    assert "GPU 0: stand-in" in seen["0"]
    if mode == "bwrap":  # of nvidia-smi's folder only nvidia-smi is shown
        assert "notes.txt" not in seen["0"]
    assert "LD=unset" in seen["none"] and "GPU 0: stand-in" not in seen["none"]


def test_gpu_ids_given_are_read_in_nvmls_order() -> None:
    """mlra numbers GPUs as NVML does (PCI bus order, what `--gpus 1` and the attempts'
    shares name); CUDA's default order puts the fastest first, another GPU on a machine
    with mixed GPUs. Told the ids, CUDA is told the order too."""

    def env(spec: SandboxSpec) -> dict[str, str]:
        return sandbox_env(spec, workdir="/w", home="/h")

    assert env(SandboxSpec(gpus="1"))["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env(SandboxSpec(env={"CUDA_VISIBLE_DEVICES": "0"}))["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "CUDA_DEVICE_ORDER" not in env(SandboxSpec(gpus="all"))
    assert "CUDA_DEVICE_ORDER" not in env(SandboxSpec(gpus="none"))
    told = SandboxSpec(gpus="1", env={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert env(told)["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"
