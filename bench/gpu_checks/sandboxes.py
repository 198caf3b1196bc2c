"""GPUs inside the sandboxes, made as a run makes them (agent/run_setup.sandbox_spec,
agent/sandboxes.create_sandbox): the local one (bubblewrap) given GPU 0 and given none,
Docker's with the NVIDIA runtime where an engine has it, and two attempts running at
once on the shares agent/agents/attempt_runs.py gives them. Inside, a probe says what it sees
(torch.cuda, CUDA_VISIBLE_DEVICES, the /dev/nvidia* nodes) and checks a matmul against
the CPU's."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any, cast

from gpu_checks.core import Context, Skipped

PROBE = r"""
import ctypes, glob, json, os, resource, shutil, sys, time, warnings
began = time.monotonic()
seen = {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "python": sys.executable,
        "nodes": sorted(glob.glob("/dev/nvidia*")),
        "ld_library_path": os.environ.get("LD_LIBRARY_PATH"),
        "nvidia_smi": shutil.which("nvidia-smi"),
        "rlimit_data": resource.getrlimit(resource.RLIMIT_DATA)[0],
        "rlimit_as": resource.getrlimit(resource.RLIMIT_AS)[0]}
try:
    ctypes.CDLL("libcuda.so.1")
    seen["libcuda"] = "loads"
except OSError as exc:
    seen["libcuda"] = f"does not load ({exc})"
try:
    import torch
    seen["torch"] = torch.__version__
    seen["torch_file"] = torch.__file__
    seen["import_s"] = round(time.monotonic() - began, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen["cuda"] = torch.cuda.is_available()
    if not seen["cuda"]:
        seen["cuda_said"] = "; ".join(str(w.message) for w in caught)
    seen["count"] = torch.cuda.device_count()
    seen["names"] = [torch.cuda.get_device_name(i) for i in range(seen["count"])]
    if seen["cuda"]:
        a = torch.randn(512, 512)
        want = a @ a
        got = (a.cuda() @ a.cuda()).cpu()
        seen["cuda_start_s"] = round(time.monotonic() - began, 2)
        # The hold counts from here, CUDA started: two attempts hold the GPU at once.
        seen["held_from"] = time.time()
        end = time.monotonic() + float(sys.argv[1] if len(sys.argv) > 1 else 0)
        while time.monotonic() < end:
            b = torch.randn(2048, 2048, device="cuda"); (b @ b).sum().item()
        seen["held_to"] = time.time()
        # Relative: a GPU may multiply fp32 through TF32 (about 1e-3), right all the same.
        seen["matmul_max_diff"] = float((got - want).abs().max() / want.abs().max())
except Exception as exc:
    seen["error"] = f"{type(exc).__name__}: {exc}"
print("PROBE " + json.dumps(seen))
"""
NUMBERED = re.compile(r"^/dev/nvidia(\d+)$")
HOLD_S = 8.0
"""How long each attempt holds the GPU once CUDA has started in it: long enough that
two CUDA starts at once, seconds apart, still overlap."""


def probe_result(output: str) -> dict[str, Any]:
    for line in output.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[6:])
    raise RuntimeError(f"the probe printed no result:\n{output[-2000:]}")


async def probe_in(box: Any, *, hold_s: float = 0.0, python: str | None = None) -> dict[str, Any]:
    """The probe's view from inside a started sandbox."""
    got = await box.exec([python or sys.executable, "-c", PROBE, str(hold_s)], timeout=120)
    if got.exit_code != 0:
        raise RuntimeError(f"the probe exited {got.exit_code}:\n{got.output[-2000:]}")
    return probe_result(got.output)


def run_sandbox(ctx: Context, name: str, **config: Any) -> tuple[Any, Any]:
    """A sandbox made as `mlra run tiny-lm --model baseline` with `config` (the flags)
    makes it; (the sandbox, the task)."""
    from mlra.agent.setup.config import RunConfig
    from mlra.agent.setup.run_budget import run_budget
    from mlra.agent.setup.run_setup import sandbox_spec
    from mlra.agent.setup.sandboxes import create_sandbox
    from mlra.tasks.spec import BUILTIN_TASKS_DIR, load_task

    task = load_task(BUILTIN_TASKS_DIR / "tiny-lm")
    run_dir = ctx.work / "runs" / name
    workspace = run_dir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    cfg = RunConfig(task="tiny-lm", model="baseline", runs_dir=run_dir.parent, **config)
    spec = sandbox_spec(task, cfg, run_dir, budget=run_budget(task, cfg, workspace))
    return create_sandbox(workspace, spec, config=cfg, task=task, run_id=name), task


def device_minors(ids: list[str]) -> list[str]:
    """The /dev/nvidiaN numbers of the GPUs with these NVML indices or UUIDs (in a
    container given the host's GPU 3, NVML's GPU 0 is /dev/nvidia3; a machine whose
    CUDA_VISIBLE_DEVICES names its GPU by UUID shares that out); the ids where NVML
    cannot say."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return [
            str(
                pynvml.nvmlDeviceGetMinorNumber(
                    pynvml.nvmlDeviceGetHandleByIndex(int(i))
                    if i.isdigit()
                    else pynvml.nvmlDeviceGetHandleByUUID(i)
                )
            )
            for i in ids
        ]
    except Exception:
        return list(ids)


def expect_devices(ctx: Context, label: str, seen: dict[str, Any], given: list[str]) -> None:
    """What a sandbox given `given` (host ids; [] for none) sees: CUDA that many devices,
    a right matmul, and no numbered device node of a GPU it was not given."""
    ctx.figures[label] = seen
    ctx.expect("error" not in seen, f"{label}: {seen.get('error')}")
    if not ctx.cuda:
        return
    if given:
        ctx.expect(
            bool(seen.get("cuda")),
            f"{label}: torch.cuda is not available inside ({seen.get('cuda_said') or 'no warning'}; "
            f"libcuda.so.1 {seen.get('libcuda')}; LD_LIBRARY_PATH={seen.get('ld_library_path')})",
        )
        ctx.expect(
            seen.get("count") == len(given),
            f"{label}: CUDA sees {seen.get('count')} devices, given {len(given)}",
        )
        ctx.expect(
            seen.get("matmul_max_diff", 1.0) < 1e-2,
            f"{label}: the GPU's matmul differs from the CPU's by {seen.get('matmul_max_diff')} "
            "of its largest value",
        )
    else:
        ctx.expect(
            not seen.get("cuda"), f"{label}: torch.cuda is available though no GPU was given"
        )
    numbered = [m.group(1) for n in seen.get("nodes", []) if (m := NUMBERED.match(n))]
    extra = sorted(set(numbered) - set(device_minors(given)))
    ctx.expect(
        not extra,
        f"{label}: device nodes of GPUs not given are there: "
        + ", ".join(f"/dev/nvidia{i}" for i in extra)
        + f" (given: {','.join(given) or 'none'}; CUDA_VISIBLE_DEVICES={seen.get('visible')})",
    )


async def check_sandbox(ctx: Context) -> None:
    from mlra.tools.sandbox.bwrap import isolation_problem

    problem = isolation_problem()
    ctx.expect(problem is None, f"bubblewrap cannot confine commands here: {problem}")
    for label, gpus, given in (("gpus_0", "0", ["0"]), ("gpus_none", "none", [])):
        box, _ = run_sandbox(ctx, label, gpus=gpus, isolation="bwrap")
        await box.start()
        try:
            ctx.figures[f"{label}_isolation"] = box.isolation
            # RLIMIT_DATA stands in for a memory cgroup where none can be had: CUDA's
            # mappings count in it, so a failure inside wants to be read beside it.
            ctx.figures[f"{label}_limits"] = box.limits.model_dump(mode="json", exclude_none=True)
            expect_devices(ctx, label, await probe_in(box), given)
            if given:
                seen = ctx.figures[label]
                ctx.expect(
                    seen.get("visible") == "0",
                    f"{label}: CUDA_VISIBLE_DEVICES={seen.get('visible')}",
                )
        finally:
            await box.close()


async def check_docker(ctx: Context) -> None:
    from mlra.tools.sandbox.docker_sandbox import DEFAULT_IMAGE

    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        info = client.info()
    except Exception as exc:
        raise Skipped(f"no engine ({type(exc).__name__})") from None
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    ctx.figures["runtimes"] = runtimes
    if "nvidia" not in runtimes and not any(
        "nvidia" in str(v) for v in info.get("CDISpecDirs") or []
    ):
        raise Skipped(f"an engine without the NVIDIA runtime (runtimes: {', '.join(runtimes)})")
    try:
        client.images.get(DEFAULT_IMAGE)
    except Exception:
        raise Skipped(
            f"no {DEFAULT_IMAGE} image here (mlra image build needs the network)"
        ) from None
    box, _ = run_sandbox(ctx, "docker", sandbox="docker", gpus="0")
    await box.start()
    try:
        got = await box.exec(["sh", "-c", "nvidia-smi -L; ls /dev | grep nvidia"], timeout=60)
        ctx.figures["nvidia_smi"] = got.output.strip()
        ctx.expect(got.exit_code == 0, f"nvidia-smi inside the container exited {got.exit_code}")
        gpus_listed = [line for line in got.output.splitlines() if line.startswith("GPU ")]
        ctx.expect(
            len(gpus_listed) == 1, f"the container given GPU 0 lists {len(gpus_listed)} GPUs"
        )
        try:
            seen = await probe_in(box, python="python3")
        except RuntimeError as exc:
            seen = {"error": str(exc)}
        if "torch" in seen:
            expect_devices(ctx, "docker_gpus_0", seen, ["0"])
        else:  # mlra's image need not hold torch: nvidia-smi above is the proof then
            ctx.figures["docker_probe"] = seen
    finally:
        await box.close()


async def check_shares(ctx: Context) -> None:
    """Two attempts of a search with `--attempts-parallel 2`: their settings from
    attempt_runs._gpus_for (given a stand-in of the searching run: its config and a
    task that needs a GPU), then both sandboxes probing at once, holding the GPU."""
    from types import SimpleNamespace

    from mlra.agent.agents import attempt_runs
    from mlra.agent.setup.config import RunConfig
    from mlra.tasks import readiness
    from mlra.tasks.spec import BUILTIN_TASKS_DIR, load_task

    ids = [g.id for g in readiness.gpus()]
    ctx.figures["host_gpus"] = ids
    if ctx.cuda:
        ctx.expect(bool(ids), "NVML lists no GPU to share")
    parent = SimpleNamespace(
        config=RunConfig(task="minipile", model="baseline", attempts_parallel=2, sandbox="local"),
        task=load_task(BUILTIN_TASKS_DIR / "minipile"),  # needs one GPU
    )
    settings: list[dict[str, Any]] = []
    for _ in range(2):
        in_use = [s["gpus"] for s in settings if s.get("gpus")]
        settings.append(attempt_runs._gpus_for(cast(Any, parent), in_use))
    ctx.figures["shares"] = settings
    if not ctx.cuda:  # no GPU to share: the logic is shown with the one a GPU machine has
        settings = [{"gpus": "0", "env": {"CUDA_VISIBLE_DEVICES": "0"}}] * 2
    boxes = []
    for i, s in enumerate(settings):
        box, _ = run_sandbox(ctx, f"attempt-{i + 1}", isolation="bwrap", **s)
        await box.start()
        boxes.append(box)
    try:
        seen = await asyncio.gather(*(probe_in(b, hold_s=HOLD_S) for b in boxes))
    finally:
        for b in boxes:
            await b.close()
    if ctx.cuda and all("held_to" in got for got in seen):
        ctx.figures["held_together_s"] = round(
            min(g["held_to"] for g in seen) - max(g["held_from"] for g in seen), 2
        )
        ctx.expect(
            ctx.figures["held_together_s"] > 0,
            "the two attempts did not hold the GPU at once (CUDA started after "
            f"{', '.join(str(g.get('cuda_start_s')) for g in seen)} s, each held it {HOLD_S} s)",
        )
    for i, (s, got) in enumerate(zip(settings, seen, strict=True)):
        told = str(s.get("gpus") or "")
        expect_devices(ctx, f"attempt_{i + 1}", got, told.split(",") if told else [])
        ctx.expect(
            got.get("visible") == told,
            f"attempt {i + 1} was told {told} and sees CUDA_VISIBLE_DEVICES={got.get('visible')}",
        )
