"""What every check shares: the list of checks (name, what it proves, its time-out,
where its function lives), the context a check writes its figures and failures into,
and the ways a check ends other than passing.

A check's function is named as "module:function" and imported only in the process
that runs it: the list is read on a machine without torch (the one-line answer of a
CPU machine) and a check's imports cannot break another's."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCHMARK = [
    "minipile",
    "babylm",
    "llm-efficiency",
    "edge-llm-compression",
    "edge-llm-training",
    "llm-merging",
    "math-autoformalization",
]
"""The seven ML Research Benchmark tasks, each graded end to end by a check of its own."""


@dataclass(frozen=True)
class Check:
    name: str
    what: str
    target: str
    """"module:function" under bench/gpu_checks, called with a Context."""
    timeout_s: float
    phase: int
    """Checks of one phase run at once (the evaluators on stand-ins); phases in order."""
    arg: str = ""


CHECKS: list[Check] = [
    Check("install", "mlra importable, torch's CUDA build, the ml extra", "machine:check_install", 90, 0),
    Check("nvml", "NVML as the Resources pane reads it, under a matmul load; the pane as SVG", "machine:check_nvml", 90, 1),
    Check("sandbox", "bubblewrap with --gpus 0 and none: torch.cuda, a matmul, the devices given", "sandboxes:check_sandbox", 150, 2),
    Check("docker", "Docker with the NVIDIA runtime: the devices given (else skipped)", "sandboxes:check_docker", 90, 3),
    Check("shares", "two parallel attempts with their GPU shares, each seeing its own", "sandboxes:check_shares", 90, 4),
    Check("task-env", "a task environment laid over the machine's CUDA torch, built offline", "environment:check_task_env", 120, 5),
    Check("lm-eval", "lm-eval grading a tiny model on the GPU and on the CPU: the same score", "grading:check_lm_eval", 150, 6),
    Check("evaluator-edge-llm-compression", "edge-llm-compression graded on a stand-in (alone: its throughput is timed)", "evaluators:check_evaluator", 180, 7, "edge-llm-compression"),
    *[
        Check(f"evaluator-{name}", f"{name} graded on a stand-in", "evaluators:check_evaluator", 180, 8, name)
        for name in BENCHMARK
        if name != "edge-llm-compression"
    ],
    Check("mlra-run", "mlra run tiny-lm --model baseline --no-tui --gpus all, graded", "grading:check_mlra_run", 240, 9),
]  # fmt: skip
GROUPS = {"evaluators": [c.name for c in CHECKS if c.name.startswith("evaluator-")]}


def chosen(only: str | None) -> list[Check]:
    """The checks `--only` names (a check's name or a group's), in the list's order.
    Raises ValueError naming what is unknown."""
    if not only:
        return list(CHECKS)
    names: set[str] = set()
    unknown = []
    for word in (w.strip() for w in only.split(",") if w.strip()):
        if word in GROUPS:
            names.update(GROUPS[word])
        elif any(c.name == word for c in CHECKS):
            names.add(word)
        else:
            unknown.append(word)
    if unknown:
        raise ValueError(
            f"no check named {', '.join(unknown)} (the checks: "
            f"{', '.join(c.name for c in CHECKS)}; groups: {', '.join(GROUPS)})"
        )
    return [c for c in CHECKS if c.name in names]


class Skipped(Exception):
    """The check cannot run on this machine (no Docker engine): said, not a failure."""


@dataclass
class Context:
    device: str
    """"cuda", or "cpu" for a dry run of the logic on a machine without a GPU."""
    work: Path
    """This check's scratch folder."""
    out: Path
    """The report's folder (pictures go there)."""
    arg: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def expect(self, ok: bool, what: str) -> bool:
        """Records `what` as a failure unless `ok`; the check goes on either way."""
        if not ok:
            self.failures.append(what)
        return ok


def function_of(check: Check) -> Callable[[Context], Any]:
    module, name = check.target.split(":")
    return getattr(importlib.import_module(f"gpu_checks.{module}"), name)


def call(fn: Callable[[Context], Any], ctx: Context) -> None:
    """Runs a check's function, a coroutine one in its own event loop."""
    got = fn(ctx)
    if asyncio.iscoroutine(got):
        asyncio.run(_awaited(got))


async def _awaited(coro: Coroutine[Any, Any, Any]) -> None:
    await coro


def cuda_available() -> tuple[bool, str]:
    """(torch.cuda.is_available(), why not: torch's own warning, whether the driver's
    libcuda.so.1 loads, LD_LIBRARY_PATH and the device nodes), so a failure on a lent
    machine says what it saw."""
    import ctypes
    import glob
    import os
    import warnings

    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = bool(torch.cuda.is_available())
    if ok:
        return True, ""
    try:
        ctypes.CDLL("libcuda.so.1")
        libcuda = "loads"
    except OSError as exc:
        libcuda = f"does not load ({exc})"
    said = "; ".join(str(w.message) for w in caught) or "torch said nothing"
    return False, (
        f"{said}; libcuda.so.1 {libcuda}; LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH')}; "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}; "
        f"nodes: {' '.join(sorted(glob.glob('/dev/nvidia*'))) or 'none'}"
    )


def standins() -> Any:
    """tests/tasks/standins.py, loaded from its file: the tiny models and stand-in tasks
    the slow tests grade, made the same way here (a `tests` package installed by some
    other project cannot take its place)."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[2] / "tests" / "tasks" / "standins.py"
    spec = importlib.util.spec_from_file_location("gpu_check_standins", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
