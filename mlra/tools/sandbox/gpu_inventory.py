"""The GPUs this machine has, and the ones a run started here may use.

Three parts asked NVML on their own (a task's readiness, the shares a search's parallel
attempts get, a batch's pool), and each dropped every GPU when one NVML call raised for
one of them. They read it here, where a GPU whose name or memory NVML refuses is kept,
with what could not be read left unknown.

A `CUDA_VISIBLE_DEVICES` set where mlra starts is the set of GPUs mlra may use, as it is
for any CUDA program: a researcher on a shared machine who sets it expects the agent's
commands, its attempts, validation and grading all to keep to it. The sandboxes build
their environment from nothing, so without this a run given no `--gpus` saw every GPU.
Its numbers are taken as nvidia-smi numbers GPUs (PCI bus order; the sandboxes set
`CUDA_DEVICE_ORDER=PCI_BUS_ID`, which CUDA's own default, fastest first, differs from
only on a machine with mixed GPUs); GPU UUIDs, unique starts of them and MIG instances
are taken as CUDA takes them. As CUDA does, the list ends at the first entry that names
no GPU, and `-1` or an empty value means none.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

HOST_GPUS_VAR = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Gpu:
    id: str
    """As `--gpus` and CUDA_VISIBLE_DEVICES name it: NVML's index (as nvidia-smi numbers
    GPUs), a GPU's UUID, or a MIG instance's."""
    name: str | None = None
    memory_gb: float | None = None
    uuid: str | None = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_uuid(pynvml: Any, handle: Any) -> str | None:
    """A GPU's UUID as NVML gives it, or None where it refuses."""
    try:
        return _text(pynvml.nvmlDeviceGetUUID(handle))
    except Exception:
        return None


def given_ids(gpus: str) -> list[str] | None:
    """The GPU ids a `--gpus` value names: None for all, [] for none."""
    setting = gpus.strip().lower()
    if setting == "all":
        return None
    if setting in ("none", ""):
        return []
    return [g.strip() for g in gpus.split(",") if g.strip()]


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
        name = memory = None
        try:
            name = _text(pynvml.nvmlDeviceGetName(handle))
        except Exception:
            pass
        try:
            # A ctypes field: pynvml's inferred type is str | bytes, the value an int.
            memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) / 1e9
        except Exception:
            pass
        found.append(Gpu(str(index), name, memory, nvml_uuid(pynvml, handle)))
    return tuple(found)


def host_gpus(environ: dict[str, str] | None = None) -> str | None:
    """The host's `CUDA_VISIBLE_DEVICES` as a `--gpus` value: None when it is not set,
    "none" when it gives none, else the ids (a unique start of a UUID as the whole UUID,
    which Docker takes too, where NVML knows it)."""
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
        if machine is None or entry.startswith("MIG-"):
            # Nothing to check it against, or a MIG instance (NVML lists its parent
            # GPU): taken as given, as CUDA takes it.
            out.append(Gpu(entry))
            continue
        match = _named(entry, machine)
        if match is None:
            break  # CUDA sees none from here on
        out.append(match)
    return out


def _named(entry: str, machine: tuple[Gpu, ...]) -> Gpu | None:
    """The GPU a CUDA_VISIBLE_DEVICES entry names: an index, or a GPU UUID or any unique
    start of one (`GPU-8932f937`), kept as the whole UUID so that Docker takes it too."""
    if entry.isdigit():
        return next((g for g in machine if g.id == str(int(entry))), None)
    found = _by_uuid(entry, machine)
    return None if found is None else replace(found, id=found.uuid or entry)


def _by_uuid(entry: str, machine: Sequence[Gpu]) -> Gpu | None:
    """The one GPU whose UUID `entry` is, or is a unique start of, as CUDA matches it."""
    if not entry.startswith("GPU-"):
        return None
    found = [g for g in machine if g.uuid and g.uuid.startswith(entry)]
    return found[0] if len(found) == 1 else None


def named_indexes(ids: Sequence[str], uuids: Sequence[str | None]) -> set[int]:
    """The NVML indexes of the GPUs `ids` (a `--gpus` value's, given_ids') name, where
    `uuids[i]` is GPU i's UUID: a run given GPUs by UUID (`--gpus GPU-8932f937`, or a
    host CUDA_VISIBLE_DEVICES of UUIDs) is shown those GPUs, not none. A MIG instance's
    parent is not known here, so it names none."""
    machine = [Gpu(str(i), uuid=u) for i, u in enumerate(uuids)]
    out: set[int] = set()
    for entry in ids:
        if entry.isdigit():
            out.add(int(entry))
        elif (found := _by_uuid(entry, machine)) is not None:
            out.add(int(found.id))
    return out


def shortfall(needed: int) -> str | None:
    """Where the host's CUDA_VISIBLE_DEVICES leaves a task needing `needed` GPUs fewer,
    what a run of it is told at its start (no `--gpus` given)."""
    told = os.environ.get(HOST_GPUS_VAR)
    if told is None or needed <= 0:
        return None
    have = usable_gpus()
    if len(have) >= needed:
        return None
    left = ", ".join(g.id for g in have) if have else "no GPU"
    return (
        f"the task needs {needed} GPU{'s' if needed > 1 else ''}; {HOST_GPUS_VAR}={told!r} "
        f"leaves it {left}, so its commands, validations and grading get only that "
        "(--gpus names others)"
    )


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
