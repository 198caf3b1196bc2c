"""The machine's own checks: the install (mlra, torch's CUDA build, the `ml` extra), and
NVML as the Resources pane reads it (agent/loop/resources.py), sampled idle and under a
matmul load started here, with the pane (console/panes/resources.py) rendered headless
from those samples to an SVG."""

from __future__ import annotations

import shutil
import sys
import threading
import time
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

from gpu_checks.core import Context, cuda_available

REPO = Path(__file__).resolve().parents[2]


def check_install(ctx: Context) -> None:
    import mlra

    f = ctx.figures
    f["mlra_imported_from"] = str(Path(mlra.__file__).resolve().parent)
    try:
        f["mlra_version"] = metadata.version("mlra")
    except metadata.PackageNotFoundError:
        ctx.expect(
            False, "mlra is importable but not installed (pip install -e '.[ml]' or the wheel)"
        )
    f["mlra_command"] = shutil.which("mlra")
    f["python"] = sys.version.split()[0]
    f["python_prefix"] = sys.prefix
    f["python_base_prefix"] = sys.base_prefix
    try:
        check_torch(ctx)
    except ImportError as exc:
        ctx.expect(False, no_torch(exc))
    missing, found = ml_extra()
    f["ml_extra"] = found
    ctx.expect(not missing, f"the ml extra is not installed whole: {'; '.join(missing)}")
    from mlra.tools.sandbox.bwrap import find_bwrap

    f["bwrap"] = find_bwrap()


def check_torch(ctx: Context) -> None:
    import torch

    f = ctx.figures
    f["torch"] = torch.__version__
    f["torch_cuda_build"] = torch.version.cuda
    f["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    f["cuda_available"], why = cuda_available()
    f["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    if ctx.cuda:
        ctx.expect(
            torch.version.cuda is not None,
            f"torch {torch.__version__} is a CPU build: install the machine's CUDA torch "
            "first, then mlra (docs/getting-started.md, On a GPU machine)",
        )
        ctx.expect(f["cuda_available"], f"torch.cuda.is_available() is False: {why}")


def no_torch(exc: ImportError) -> str:
    """Why torch is not importable, with the likely cause where this Python is a venv
    with the system's site-packages: made from a Python that is itself a venv (the
    machine's torch in /opt/torch/.venv), it sees that venv's base, not its packages."""
    why = f"torch is not importable from {sys.executable} ({exc})"
    if sys.prefix != sys.base_prefix:
        why += (
            f"; this is a venv over {sys.base_prefix}: where the machine's torch is in a venv "
            "of its own, install mlra into that venv (docs/getting-started.md, On a GPU machine)"
        )
    return why


def ml_extra() -> tuple[list[str], dict[str, str]]:
    """(what of the `ml` extra is missing or of a version it does not allow, the
    versions found), from the installed mlra's metadata, else the checkout's
    pyproject.toml."""
    from packaging.requirements import Requirement

    try:
        lines = [
            r
            for r in metadata.requires("mlra") or []
            if "extra" in r and '"ml"' in r.split(";", 1)[1]
        ]
        requirements = [Requirement(r.split(";", 1)[0]) for r in lines]
    except metadata.PackageNotFoundError:
        project = tomllib.loads((REPO / "pyproject.toml").read_text())
        requirements = [Requirement(r) for r in project["project"]["optional-dependencies"]["ml"]]
    missing, found = [], {}
    for req in requirements:
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            missing.append(f"{req.name} not installed")
            continue
        found[req.name] = version
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            missing.append(f"{req.name} {version} does not satisfy {req.specifier}")
    return missing, found


LOAD_START_S = 60
"""How long the load may take to start: CUDA's first start in a process (the driver,
the context, cuBLAS) takes seconds, tens of them on some machines."""


class MatmulLoad:
    """A matmul loop on `device` in a thread (torch lets go of the GIL in its kernels),
    for NVML to see a real load; its rate is a figure of its own."""

    def __init__(self, device: str, size: int = 8192) -> None:
        self.device = device
        self.size = size if device == "cuda" else 512
        self.flops = 0.0
        self.seconds = 0.0
        self.error: str | None = None
        self.started = threading.Event()
        """Set once the first products are done (CUDA's start-up can take many seconds),
        or the load failed: sampling before it would see an idle GPU."""
        self.start_s: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MatmulLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        began = time.monotonic()
        try:
            import torch

            dtype = torch.float16 if self.device == "cuda" else torch.float32
            a = torch.randn(self.size, self.size, device=self.device, dtype=dtype)
            a = (a @ a).clamp_(-1, 1)
            if self.device == "cuda":
                torch.cuda.synchronize()
            self.start_s = round(time.monotonic() - began, 2)
            self.started.set()
            started = time.monotonic()
            n = 0
            while not self._stop.is_set():
                for _ in range(10):
                    a = (a @ a).clamp_(-1, 1)
                if self.device == "cuda":
                    torch.cuda.synchronize()
                n += 10
            self.seconds = time.monotonic() - started
            self.flops = 2 * self.size**3 * n
        except Exception as exc:  # recorded: the check says it
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.started.set()


def check_nvml(ctx: Context) -> None:
    from mlra import events as ev
    from mlra.agent.loop.resources import GpuMonitor, ResourceMonitor

    f = ctx.figures
    nvml = GpuMonitor()
    f["nvml_error"] = nvml.error
    f["nvml_sample_error"] = None
    if ctx.cuda:
        ctx.expect(nvml.error is None, f"NVML: {nvml.error}")
    monitor = ResourceMonitor(ctx.work, disk_every_s=60)
    idle = monitor.sample()
    f["idle"] = [g.model_dump(mode="json") for g in idle.gpus]
    samples: list[ev.ResourceSample] = [idle]
    with MatmulLoad(ctx.device) as load:
        ctx.expect(
            load.started.wait(LOAD_START_S), f"the matmul load had not started in {LOAD_START_S} s"
        )
        f["load_start_s"] = load.start_s
        for _ in range(10):
            time.sleep(0.5)
            samples.append(monitor.sample())
    ctx.expect(load.error is None, f"the matmul load failed: {load.error}")
    if load.seconds:
        f["matmul_tflops"] = round(load.flops / load.seconds / 1e12, 2)
    loaded = [g for s in samples[1:] for g in s.gpus]
    f["nvml_sample_error"] = monitor.gpus.sample_error
    if loaded:
        utils = [g.util_percent for g in loaded if g.util_percent is not None]
        f["under_load_util_percent_max"] = max(utils) if utils else None
        f["under_load_mem_used_mb_max"] = round(max(g.mem_used_mb for g in loaded))
        f["mem_total_mb"] = round(loaded[0].mem_total_mb)
        f["names"] = sorted({g.name for g in loaded})
    if ctx.cuda:
        ctx.expect(
            bool(loaded),
            f"NVML gave no GPU sample under load ({monitor.gpus.sample_error or 'no NVML error'})",
        )
        util = f.get("under_load_util_percent_max")
        ctx.expect(util is None or util > 0, "NVML's utilisation stayed at 0% under a matmul load")
        ctx.expect(
            not loaded or util is not None,
            f"NVML gave no utilisation ({monitor.gpus.sample_error}): the pane shows 'util n/a'",
        )
        idle_used = max((g.mem_used_mb for g in idle.gpus), default=0.0)
        ctx.expect(
            f.get("under_load_mem_used_mb_max", 0) > idle_used,
            "NVML's memory used did not grow under a matmul load",
        )
    import asyncio

    text = asyncio.run(render_pane(samples, ctx.out / "resources.svg"))
    f["pane_svg"] = "resources.svg"
    f["pane_text"] = text
    for g in loaded[:1]:
        ctx.expect(f"GPU{g.index}" in text and g.name in text, "the pane does not show the GPU")
    if not loaded:
        ctx.expect("no GPU" in text, "the pane does not say no GPU")
    check_inventory(ctx)


def check_inventory(ctx: Context) -> None:
    """The GPUs a run may use (tools/sandbox/gpu_inventory.py) as the real NVML lists
    them: a run given no --gpus keeps to the host's CUDA_VISIBLE_DEVICES, named by index
    or by a start of the GPU's UUID, as CUDA takes them."""
    from mlra.agent.setup.sandboxes import run_gpus
    from mlra.tasks.spec import BUILTIN_TASKS_DIR, load_task
    from mlra.tools.sandbox.gpu_inventory import host_gpus, machine_gpus

    f = ctx.figures
    listed = machine_gpus() or ()
    f["inventory"] = [vars(g) for g in listed]
    if not ctx.cuda:
        return
    ctx.expect(bool(listed), "gpu_inventory lists no GPU")
    first = listed[0] if listed else None
    if first is None:
        return
    ctx.expect(first.memory_gb is not None and first.name is not None, "no name or memory read")
    gpu_task = load_task(BUILTIN_TASKS_DIR / "minipile")  # needs one GPU
    told = {"CUDA_VISIBLE_DEVICES": first.id}
    f["run_gpus_host_index"] = host_gpus(told)
    ctx.expect(
        host_gpus(told) == first.id, f"CUDA_VISIBLE_DEVICES={first.id} read as {host_gpus(told)}"
    )
    if first.uuid:
        short = {"CUDA_VISIBLE_DEVICES": first.uuid[:12]}
        f["run_gpus_host_uuid_start"] = host_gpus(short)
        ctx.expect(host_gpus(short) == first.uuid, f"{first.uuid[:12]} read as {host_gpus(short)}")
    # The host's CUDA_VISIBLE_DEVICES, where the machine sets it, may name the GPU by UUID.
    default = run_gpus(gpu_task, None)
    f["run_gpus_default"] = default
    ctx.expect(
        default in ("all", first.id, first.uuid),
        f"a GPU task's default GPUs: {default} (CUDA_VISIBLE_DEVICES={host_gpus()})",
    )


async def render_pane(samples: list[Any], svg: Path) -> str:
    """The Resources pane fed the samples as a run's log would feed it, headless (as
    tests/console renders panes), saved as an SVG; its text."""
    from rich.text import Text
    from textual.app import App, ComposeResult

    from mlra import events as ev
    from mlra.agent.record.state import fold
    from mlra.console.panes.resources import ResourcesPane

    class OnePane(App[None]):
        def compose(self) -> ComposeResult:
            yield ResourcesPane(id="resources")

    started = ev.RunStarted(
        run_id="gpu-check", task="gpu-check", task_title="GPU check", task_dir="/t", model="baseline",
        limits=ev.Limits(time_limit_s=600),
        sandbox=ev.SandboxInfo(kind="local", isolation="bwrap", network=False, workdir="/workspace", workspace="/w"),
    )  # fmt: skip
    events: list[ev.Event] = [started]
    for i, sample in enumerate(samples):
        sample.t = 1.0 + i * 0.5
        events.append(sample)
    app = OnePane()
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(ResourcesPane)
        for event in events:
            pane.feed(event)
        pane.show(fold(events), 1.0 + len(samples) * 0.5)
        await pilot.pause()
        content = pane.content
        text = content.plain if isinstance(content, Text) else str(content)
        app.save_screenshot(filename=svg.name, path=str(svg.parent))
    return text
