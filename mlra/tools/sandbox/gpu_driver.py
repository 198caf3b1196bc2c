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
runs to see the GPU.

The device nodes too: a sandbox given some GPUs (`--gpus 1`, an attempt's share) is
shown the driver's shared nodes and the numbered node of each GPU it was given, none of
another's. CUDA_VISIBLE_DEVICES says the same, but it is a variable the agent can unset;
a node that is not there is kept by the kernel."""

from __future__ import annotations

import glob
import os
import re
import shutil
from collections.abc import Callable, Sequence
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


NUMBERED_NODE = re.compile(r"^/dev/nvidia(\d+)$")
"""A GPU's own node; the others (nvidiactl, nvidia-uvm, nvidia-modeset) every GPU needs."""


def nvidia_nodes() -> list[str]:
    """This machine's NVIDIA device nodes, less /dev/nvidia-caps (MIG and fabric
    capabilities are the host's to grant)."""
    return [n for n in sorted(glob.glob("/dev/nvidia*")) if os.path.basename(n) != "nvidia-caps"]


def nvml_minors(ids: Sequence[str]) -> list[str] | None:
    """The /dev/nvidiaN numbers of the GPUs with these ids (NVML indices or GPU UUIDs:
    in a container given the host's GPU 3, NVML's GPU 0 is /dev/nvidia3); None where
    NVML cannot say for every one (no NVML, a MIG instance)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        minors = []
        for gpu in ids:
            if gpu.isdigit():
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(gpu))
            elif gpu.startswith("GPU-"):
                handle = pynvml.nvmlDeviceGetHandleByUUID(gpu)
            else:
                return None
            minors.append(str(pynvml.nvmlDeviceGetMinorNumber(handle)))
        return minors
    except Exception:
        return None


def gpu_nodes(
    gpus: str | None,
    nodes: Sequence[str] | None = None,
    minors: Callable[[Sequence[str]], list[str] | None] | None = None,
) -> list[str]:
    """The device nodes a sandbox given `gpus` is shown: none for "none"; every one for
    None or "all"; else the shared ones and the given GPUs' own. Where the given ids
    cannot be told apart from the others' (no NVML), every one, as before: CUDA must
    still find its GPU, and CUDA_VISIBLE_DEVICES still names it."""
    if not gives_gpus(gpus):
        return []
    found = list(nvidia_nodes() if nodes is None else nodes)
    given = [g.strip() for g in (gpus or "").split(",") if g.strip()]
    if not given or given == ["all"] or not any(NUMBERED_NODE.match(n) for n in found):
        return found
    wanted = (minors or nvml_minors)(given)
    if wanted is None:
        return found
    return [n for n in found if (m := NUMBERED_NODE.match(n)) is None or m.group(1) in wanted]
