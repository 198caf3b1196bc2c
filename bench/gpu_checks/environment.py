"""A task's own environment built over the machine's CUDA torch, offline: a task that
names a package found only in a wheel folder made here (pip's find-links, no index, as
on a GPU machine with no network), built by tasks/env_build.py through the run's own
path (agent/run_setup.task_environment), then a probe in the run's sandbox: `python` is
the task's, the package is there, and torch is the machine's CUDA build, on the GPU."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

from gpu_checks.core import Context
from gpu_checks.sandboxes import PROBE, probe_result

PACKAGE = "mlra_gpu_probe"
VERSION = "0.1"

TASK_TOML = f"""\
name = "gpu-env"
title = "A task with its own environment, over the machine's torch"

[prompt]
task = "Run the probe."

[metric]
name = "right"
baseline = 0.0
top = 1.0

[evaluator]
kind = "script"
artifact = "answer.txt"
settings = {{ script = "hidden/check.py" }}

[resources]
time_limit = "5m"

[environment]
requirements = ["{PACKAGE.replace("_", "-")} == {VERSION}"]
"""


def write_wheel(folder: Path) -> Path:
    """A pure-Python wheel, written as a zip (nothing to build, nothing to download)."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{PACKAGE}-{VERSION}.dist-info"
    files = {
        f"{PACKAGE}.py": 'WHERE = "the task\'s own environment"\n',
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpu_check\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    wheel = folder / f"{PACKAGE}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return wheel


async def check_task_env(ctx: Context) -> None:
    import torch

    from mlra.agent.setup.config import RunConfig
    from mlra.agent.setup.run_budget import run_budget
    from mlra.agent.setup.run_setup import sandbox_spec, task_environment
    from mlra.agent.setup.sandboxes import create_sandbox
    from mlra.tasks.spec import load_task

    wheels = ctx.work / "wheels"
    write_wheel(wheels)
    root = ctx.work / "tasks" / "gpu-env"
    (root / "hidden").mkdir(parents=True)
    (root / "task.toml").write_text(TASK_TOML)
    (root / "hidden" / "check.py").write_text("print('unused')\n")
    # Offline from a wheel folder, with empty caches: what the build has is what it finds.
    os.environ |= {
        "PIP_FIND_LINKS": str(wheels),
        "PIP_NO_INDEX": "1",
        "MLRA_CACHE_DIR": str(ctx.work / "cache"),
        "UV_CACHE_DIR": str(ctx.work / "uv-cache"),
    }
    task = load_task(root)
    config = RunConfig(task=str(root), model="baseline", gpus="0", runs_dir=ctx.work / "runs")
    env_path, notice = task_environment(task, config)
    ctx.figures["environment"] = str(env_path)
    ctx.figures["notice"] = notice.message if notice else None
    if env_path is None:
        ctx.expect(False, "no environment was built")
        return
    run_dir = ctx.work / "runs" / "gpu-env"
    (run_dir / "workspace").mkdir(parents=True)
    budget = run_budget(task, config, run_dir / "workspace")
    spec = sandbox_spec(task, config, run_dir, python_env=env_path, budget=budget)
    box = create_sandbox(run_dir / "workspace", spec, config=config, task=task, run_id="gpu-env")
    await box.start()
    try:
        got = await box.exec(
            ["python", "-c", f"import {PACKAGE}; print('PACKAGE', {PACKAGE}.WHERE)\n" + PROBE],
            timeout=120,
        )
    finally:
        await box.close()
    ctx.expect(
        got.exit_code == 0,
        f"the probe in the task's environment exited {got.exit_code}:\n{got.output[-2000:]}",
    )
    seen = probe_result(got.output)
    ctx.figures["seen"] = seen
    ctx.expect(
        "PACKAGE the task's own environment" in got.output, "the task's package is not importable"
    )
    ctx.expect(
        str(seen.get("python", "")).startswith(str(env_path)),
        f"`python` in the sandbox is {seen.get('python')}, not the task's environment's",
    )
    ctx.expect(
        seen.get("torch") == torch.__version__
        and not str(seen.get("torch_file", "")).startswith(str(env_path)),
        f"torch inside is {seen.get('torch')} from {seen.get('torch_file')}, not the machine's {torch.__version__}",
    )
    if ctx.cuda:
        ctx.expect(bool(seen.get("cuda")), "torch.cuda is not available in the task's environment")
        ctx.expect(seen.get("matmul_max_diff", 1.0) < 1e-2, "the matmul on the GPU is wrong")
