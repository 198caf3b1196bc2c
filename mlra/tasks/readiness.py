"""Whether this machine can run a task now: GPUs, network, the packages its
evaluator needs, and whether it can grade the task at all (tasks/needs.py: what the
evaluator imports and downloads, found out from its files). Cheap checks only, since
`mlra tasks` runs them for every task (one child interpreter answers for the modules)."""

from __future__ import annotations

import functools
import importlib.util
import os
import socket
from pathlib import Path

from mlra.tasks.evaluators.host_tools import host_tools
from mlra.tasks.evaluators.kinds import EVALUATORS
from mlra.tasks.needs import Needs, find_needs, warm
from mlra.tasks.spec import TaskSpec
from mlra.tools.sandbox import netns
from mlra.tools.sandbox.gpu_inventory import HOST_GPUS_VAR, Gpu, usable_gpus


@functools.cache
def gpus() -> tuple[Gpu, ...]:
    """The GPUs a run started here may use (tools/sandbox/gpu_inventory.py): every one
    NVML sees, or those the host's CUDA_VISIBLE_DEVICES names; empty without a driver."""
    return usable_gpus()


@functools.cache
def network() -> str | None:
    """Why the Hugging Face Hub cannot be reached, or None when it can."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return "HF_HUB_OFFLINE=1 is set"
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=1.5):
            return None
    except OSError as exc:
        return f"huggingface.co is not reachable ({exc.strerror or exc})"


def missing_packages(task: TaskSpec) -> list[str]:
    return [
        p for p in EVALUATORS[task.evaluator.kind].packages if importlib.util.find_spec(p) is None
    ]


def online(task: TaskSpec) -> bool:
    """Whether the task's commands and its grader have the network: only a task that
    asks for it gets it (the sandboxes' default is none), and only while this machine
    reaches the Hub."""
    return task.resources.network and network() is None


def task_needs(task: TaskSpec) -> Needs:
    return find_needs(task, online=online(task))


def warm_needs(folders: list[Path]) -> None:
    """The imports of every task folder given looked up together (`mlra tasks DIR`)."""
    from mlra.tasks.spec import TaskError, load_task

    tasks = []
    for folder in folders:
        try:
            tasks.append(load_task(folder))
        except TaskError:
            continue  # said where the folder is listed
    warm(tasks)


def grading_problems(task: TaskSpec, found: Needs | None = None) -> list[str]:
    """Why this machine cannot grade `task` at all, one phrase each; empty when it can:
    what the task's loader knows from its files (`evaluator.cannot_grade`), and what
    its evaluator's code needs that is not here."""
    problems = []
    if task.evaluator.cannot_grade:
        problems.append(task.evaluator.cannot_grade)
    else:
        from mlra.tasks.foreign.loader import detect
        from mlra.tasks.foreign.mlagentbench import grading_problem

        if detect(task.root) == "mlagentbench" and grading_problem(task.root) == (
            "no scripts/eval.py"
        ):
            problems.append("no scripts/eval.py")
    found = found if found is not None else task_needs(task)
    return problems + found.grading_problems()


def blockers(task: TaskSpec, found: Needs | None = None) -> list[str]:
    """What stops this machine from running `task` now; empty when it can. A task it
    cannot grade is never ready: a run of it would end with no score. `found`: the
    task's needs where the caller has them (`task_needs` reads every file of its code)."""
    from mlra.tasks.foreign.prepare import prepare_needs

    problems = []
    ungradable = grading_problems(task, found)
    if ungradable:
        problems.append("cannot be graded here: " + "; ".join(ungradable))
    problems += prepare_needs(task.root)[1]  # its prepare would fail at once
    r = task.resources
    if r.gpus:
        have = gpus()
        told = os.environ.get(HOST_GPUS_VAR)
        where = "this machine has" if told is None else f"{HOST_GPUS_VAR}={told!r} leaves"
        if not have:
            problems.append(f"needs {r.gpus} GPU{'s' if r.gpus > 1 else ''}; {where} none")
        elif len(have) < r.gpus:
            problems.append(f"needs {r.gpus} GPUs; {where} {len(have)}")
        elif r.gpu_memory_gb:
            known = [g.memory_gb for g in have if g.memory_gb is not None]
            if known and max(known) < r.gpu_memory_gb * 0.95:
                problems.append(
                    f"needs {r.gpu_memory_gb:g} GB of GPU memory; the largest GPU here has {max(known):.0f} GB"
                )
    if r.network:
        why = network()
        if why:
            problems.append(f"needs the network for its data and models; {why}")
        own = netns.network_problem()
        if own and os.environ.get(netns.HOST_NETWORK_VAR) != "1":
            problems.append(
                f"its commands need a network namespace of their own in the local sandbox: {own} "
                "(apt-get install slirp4netns, or --sandbox docker)"
            )
    # What the evaluator's sandbox will be given, found as grading finds it.
    problems += host_tools(task).problems
    missing = missing_packages(task)
    if missing:
        problems.append(
            "needs Python packages not installed: "
            + ", ".join(missing)
            + " (pip install 'mlra[ml]')"
        )
    return problems


def needs(task: TaskSpec) -> str:
    r = task.resources
    parts = [r.time_limit]
    if r.gpus:
        parts.append(f"{r.gpus} GPU" + (f" ({r.gpu_memory_gb:g} GB)" if r.gpu_memory_gb else ""))
    else:
        parts.append("CPU only")
    parts.append("network" if r.network else "no network")
    return ", ".join(parts)
