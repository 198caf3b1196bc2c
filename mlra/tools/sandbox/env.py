"""The environment sandboxed commands get.

It is built from nothing rather than copied from the console's own environment,
because that environment holds the model provider's API keys (and whatever else
the user exported): an agent that can run `env` must not be able to read them.
What the commands need is set explicitly; the task's own variables come last,
minus any whose name looks like a secret.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.gpu_driver import driver_library_dirs, driver_smi, gives_gpus


def shown_interpreter() -> str:
    """This interpreter's path as the local sandbox shows it: its folder with every link
    resolved, its own name kept. The sandbox shows the Python environment at its real
    path (bwrap.python_roots), so a venv reached through a link (`.venv` linking to a
    folder elsewhere) is not at `sys.executable` inside, and the grader failed to start
    ("prlimit: failed to execute .venv/bin/python"); the file itself is not resolved,
    since a venv's `python` links to the base interpreter and would leave the venv.
    """
    folder, name = os.path.split(sys.executable)
    return os.path.join(os.path.realpath(folder), name) if folder else sys.executable


STANDARD_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
"""Names refused even when the task asks for them: a leaked key costs more than a failed tool."""


def is_secret_name(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def refused_env_names(env: Mapping[str, str]) -> list[str]:
    """The variables of `env` that `sandbox_env` drops, for a notice in the run log."""
    return sorted(name for name in env if is_secret_name(name))


def thread_count(spec: SandboxSpec) -> int | None:
    """The threads a command's math libraries should start: its CPU share (the sandbox's
    own, an attempt's 1/K, or the run's `--cpus`, the least), whole, at least one and at
    most this machine's CPUs; None with no share. A CPU quota leaves every core in the affinity mask, so torch would
    start a thread a core and the quota throttle them all (16 threads on a quota of 2:
    each runs an eighth of the time), as Ray sizes OMP_NUM_THREADS to a task's CPUs."""
    group = spec.run_group.cpus if spec.run_group is not None else None
    shares = [c for c in (spec.cpus, group) if c]
    if not shares:
        return None
    # A share over this machine's CPUs (`--cpus 32` on 8) holds nothing: as many threads.
    return max(1, min(int(min(shares)), len(os.sched_getaffinity(0))))


def sandbox_env(
    spec: SandboxSpec, *, workdir: str, home: str, host_driver: bool = False
) -> dict[str, str]:
    """The complete environment of a sandboxed command.

    `python` on PATH is the interpreter mlra runs in, so the agent gets the same
    ML stack (torch, transformers) the task's evaluator uses; for a task with its own
    environment, that environment's, first (mlra's commands stay on PATH after it).
    With the network off, Hugging Face libraries are told so up front instead of
    timing out on every call.

    `host_driver` (the local sandbox, whose commands use this machine's NVIDIA
    driver): a command given a GPU gets the LD_LIBRARY_PATH folders that hold the
    driver's libraries (gpu_driver.py), and nothing else of LD_LIBRARY_PATH, and the
    folder of its `nvidia-smi` on PATH.

    Given a CPU share, the math libraries' thread pools are sized to it (`thread_count`);
    the task's own variables may size them otherwise.
    """
    interpreter_dir = os.path.dirname(shown_interpreter())
    path = [str(spec.python_env / "bin")] if spec.python_env is not None else []
    path += [interpreter_dir] if interpreter_dir else []
    path += [d for d in STANDARD_PATH if d not in path]
    env: dict[str, str] = {
        "PATH": os.pathsep.join(path),
        "HOME": home,
        "PWD": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONUNBUFFERED": "1",
        "MPLBACKEND": "Agg",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if not spec.network:
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
            }
        )
    if spec.gpus is not None and spec.gpus.strip().lower() not in ("", "all"):
        gpus = spec.gpus.strip()
        env["CUDA_VISIBLE_DEVICES"] = "" if gpus.lower() == "none" else gpus
    if host_driver and gives_gpus(spec.gpus):
        driver = driver_library_dirs()
        if driver:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(str(d) for d in driver)
        smi = driver_smi()
        if smi is not None and str(smi.parent) not in path:
            env["PATH"] += os.pathsep + str(smi.parent)
    threads = thread_count(spec)
    if threads is not None:
        # OpenMP's, which torch, MKL and OpenBLAS read too where their own is unset: one
        # variable, so a task that sets it sizes them all.
        env["OMP_NUM_THREADS"] = str(threads)
    for name, value in spec.env.items():
        if not is_secret_name(name):
            env[name] = str(value)
    if env.get("CUDA_VISIBLE_DEVICES") and "CUDA_DEVICE_ORDER" not in spec.env:
        # The ids are NVML's, in PCI bus order; CUDA's own order puts the fastest first.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env
