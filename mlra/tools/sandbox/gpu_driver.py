"""The NVIDIA driver's user-space libraries that a sandboxed command given a GPU needs,
where this machine finds them only through LD_LIBRARY_PATH.

CUDA opens libcuda.so.1 (and NVML libnvidia-ml.so.1) through the dynamic loader. Where
the driver's folder is mounted into a machine when it starts (/usr/local/nvidia in
NVIDIA's CUDA images and on cloud GPU machines), the loader's cache, made when the image
was built, does not know it: the machine's environment names it in LD_LIBRARY_PATH.
The sandboxes build their environment from nothing (env.py), so without these folders
a command given a GPU has the device nodes but no driver, and torch.cuda is
unavailable inside while it is available outside.

Only folders that hold the driver's libraries are carried: nothing else of the host's
LD_LIBRARY_PATH reaches a command. Likewise the folder of the driver's `nvidia-smi`
(/usr/local/nvidia/bin) joins a command's PATH, the first thing a person or an agent
runs to see the GPU."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

DRIVER_LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")


def driver_library_dirs(search: str | None = None) -> list[Path]:
    """The folders of LD_LIBRARY_PATH (or of `search`) holding a driver library, each
    with its links resolved, in the order given."""
    value = os.environ.get("LD_LIBRARY_PATH", "") if search is None else search
    found: list[Path] = []
    for entry in value.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        if any(os.path.exists(os.path.join(entry, name)) for name in DRIVER_LIBRARIES):
            real = Path(os.path.realpath(entry))
            if real not in found:
                found.append(real)
    return found


def driver_smi(search: str | None = None) -> Path | None:
    """The driver's `nvidia-smi` on PATH (or on `search`), links resolved. Only this file
    is shown of its folder, which may be a person's own (~/bin)."""
    path = os.environ.get("PATH", "") if search is None else search
    found = shutil.which("nvidia-smi", path=path)
    return Path(os.path.realpath(found)) if found else None


def gives_gpus(gpus: str | None) -> bool:
    """Whether a sandbox's `gpus` setting gives it any GPU (None and "all" do)."""
    return (gpus or "").strip().lower() != "none"
