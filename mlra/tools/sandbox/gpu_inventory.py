"""The GPUs this machine has, and the ones a run started here may use.

Three parts asked NVML on their own (a task's readiness, the shares a search's parallel
attempts get, a batch's pool), and each dropped every GPU when one NVML call raised for
one of them. They read it here, where a GPU whose name or memory NVML refuses is kept,
with what could not be read left unknown.

A `CUDA_VISIBLE_DEVICES` set where mlra starts is the set of GPUs mlra may use, as it is
for any CUDA program: a researcher on a shared machine who sets it expects the agent's
commands, its attempts, validation and grading all to keep to it. The sandboxes build
their environment from nothing, so without this a run given no `--gpus` saw every GPU.
Its ids are taken as nvidia-smi numbers GPUs (PCI bus order; the sandboxes set
`CUDA_DEVICE_ORDER=PCI_BUS_ID`); GPU UUIDs are matched too. As CUDA does, the list ends
at the first entry that names no GPU, and `-1` or an empty value means none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

HOST_GPUS_VAR = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Gpu:
    id: str
    """NVML's index, as `--gpus` and nvidia-smi name it."""
    name: str | None = None
    memory_gb: float | None = None
    uuid: str | None = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def machine_gpus() -> tuple[Gpu, ...] | None:
    """Every GPU NVML sees; None when NVML cannot be asked (no library, no driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:
        return None
    found = []
    for index in range(count):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:
            found.append(Gpu(str(index)))
            continue
        name = memory = uuid = None
        try:
            name = _text(pynvml.nvmlDeviceGetName(handle))
        except Exception:
            pass
        try:
            # A ctypes field: pynvml's inferred type is str | bytes, the value an int.
            memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) / 1e9
        except Exception:
            pass
        try:
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
        except Exception:
            pass
        found.append(Gpu(str(index), name, memory, uuid))
    return tuple(found)


def host_gpus(environ: dict[str, str] | None = None) -> str | None:
    """The host's `CUDA_VISIBLE_DEVICES` as a `--gpus` value: None when it is not set,
    "none" when it gives none, else the ids (a UUID as NVML's index where NVML knows it)."""
    value = (os.environ if environ is None else environ).get(HOST_GPUS_VAR)
    if value is None:
        return None
    ids = [g.id for g in _listed(value, machine_gpus())]
    return ",".join(ids) if ids else "none"


def _listed(value: str, machine: tuple[Gpu, ...] | None) -> list[Gpu]:
    out: list[Gpu] = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry or entry == "-1":
            break
        if machine is None:  # nothing to check the entry against: taken as given
            out.append(Gpu(entry))
            continue
        match = next((g for g in machine if entry in (g.id, g.uuid)), None)
        if match is None:
            break  # CUDA sees none from here on
        out.append(match)
    return out


def usable_gpus(setting: str | None = None) -> tuple[Gpu, ...]:
    """The GPUs a run may be given: those `setting` (a `--gpus` value) names, else those
    the host's `CUDA_VISIBLE_DEVICES` names, else all of them."""
    chosen = setting.strip() if setting else host_gpus()
    if chosen is not None and chosen.lower() == "none":
        return ()
    machine = machine_gpus()
    if chosen is None or chosen.lower() == "all":
        return machine or ()
    return tuple(_listed(chosen, machine))
