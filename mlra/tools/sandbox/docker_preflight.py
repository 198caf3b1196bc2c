"""What must hold before a Docker run starts, and what earlier runs left behind.

Checked before a run folder is made, so a missing engine, image or GPU runtime
fails at once with what to do instead of half-way into a run; and containers
whose mlra process died without removing them (a killed console, a crash) are
removed by the next start, found by the labels every container carries.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlra.tools.sandbox.base import SandboxError
from mlra.tools.sandbox.docker_stdin import stdin_folder_of

DEFAULT_IMAGE = "mlra:latest"
"""What `mlra image build` tags."""
LABEL_RUN = "mlra.run"
LABEL_OWNER = "mlra.owner"
"""host/pid/start-time of the mlra process that made the container."""
LABEL_ATTEMPT = "mlra.attempt"
"""A search's attempt (`a1`), on the containers of its attempts, whose mlra.run is the
search's run."""
REQUEST_TIMEOUT_S = 30.0
"""The client's time-out on each request to the engine."""


class DockerUnavailable(SandboxError):
    """The engine, the image or the GPU runtime is missing; the message says what to do."""


def docker_client(timeout: float = REQUEST_TIMEOUT_S) -> Any:
    """A client for the engine DOCKER_HOST names (or the default socket), checked with a ping."""
    try:
        import docker
    except ImportError:
        raise DockerUnavailable(
            "the docker Python package is not installed (pip install docker)"
        ) from None
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as exc:
        raise DockerUnavailable(
            f"cannot reach the Docker engine at {host} ({short_error(exc)}); start it "
            "(e.g. `systemctl start docker`), set DOCKER_HOST, or use --sandbox local"
        ) from None
    return client


def engine_of(client: Any) -> tuple[str, str | None]:
    """The engine's address (DOCKER_HOST's, or the default socket) and its version, as
    the run records what confined it; the version is None where the engine would not say."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        version = client.version().get("Version")
    except Exception:
        version = None
    return host, str(version) if version else None


def short_error(exc: BaseException) -> str:
    """The line of an engine error that says what went wrong, without its traceback."""
    text = str(exc).strip().splitlines()
    line = text[-1] if text else type(exc).__name__
    return line if len(line) < 300 else line[:300] + "..."


def missing_image(
    image: str, task: TaskImage | None = None, present: Callable[[str], bool] = lambda _i: False
) -> DockerUnavailable:
    """What to run, in order, where a run's image is not on the engine. `task`: the image
    of its own a task needs for its requirements, `present`: whether the engine has an
    image. Such a task was told to build mlra's image, then (once that ran) warned that
    its commands ran without its packages: its own image, built on mlra's, is what it
    needs, and the run must name it."""
    if task is None or image not in (DEFAULT_IMAGE, task.tag):
        hint = (
            "build it with `mlra image build`"
            if image == DEFAULT_IMAGE
            else f"build or pull it (docker pull {image})"
        )
        return DockerUnavailable(f"the Docker image {image} is not on this engine; {hint}")
    steps = [] if present(task.tag) else task.build_steps(base_built=present(DEFAULT_IMAGE))
    if image == task.tag:
        what = f"the task's own image {image} is not on this engine"
        steps.append("this command again")
    elif steps:
        what = (
            f"neither {image} nor the task's own image {task.tag} (its Python requirements "
            f"on {DEFAULT_IMAGE}) is on this engine"
        )
        steps.append(f"this command again with `--image {task.tag}`")
    else:
        what = (
            f"the Docker image {image} is not on this engine; the task's Python requirements "
            f"are in its own image {task.tag}"
        )
        steps.append(f"this command again with `--image {task.tag}`")
    return DockerUnavailable(f"{what}; run {', then '.join(steps)}")


@dataclass(frozen=True)
class TaskImage:
    """The image of its own a task needs (`mlra image build --task`): its Python
    requirements installed on mlra's image."""

    tag: str
    folder: Path

    def build_steps(self, *, base_built: bool) -> list[str]:
        """The commands that build it, quoted for the line that names them."""
        task = f"`mlra image build --task {shlex.quote(str(self.folder))}`"
        return [task] if base_built else ["`mlra image build`", task]


def no_gpu_runtime(gpus: str | None, detail: str = "") -> DockerUnavailable:
    because = f" ({detail})" if detail else ""
    return DockerUnavailable(
        f"GPUs were asked for (--gpus {gpus}) but the Docker engine has no GPU runtime{because}; "
        "install the NVIDIA Container Toolkit and run "
        "`nvidia-ctk runtime configure --runtime=docker`, then restart Docker; "
        "or run with --gpus none"
    )


def no_bridge(client: Any) -> DockerUnavailable | None:
    """Why a task with the network on cannot have it on this engine, or None. Its
    container joins Docker's default bridge; an engine started with no bridge (`dockerd
    --bridge=none`) still makes such a container, with a loopback only, so the run would
    say it is online ("network: docker bridge") while every fetch fails."""
    try:
        names = {network.name for network in client.networks.list(names=["bridge"])}
    except Exception:
        return None  # not known: the container's start says what goes wrong
    if "bridge" in names:
        return None
    return DockerUnavailable(
        "the task needs the network, but the Docker engine has no bridge network (its "
        "dockerd runs with --bridge=none), so the container would have none; run the "
        "engine with its default bridge, or use --sandbox local"
    )


def preflight(
    image: str, gpus: str | None, *, network: bool = False, task: TaskImage | None = None
) -> None:
    """Check, before a run folder is made, what would otherwise fail at the sandbox's
    start: the engine, the image (`task`: the one of its own the task needs), a GPU
    runtime when GPUs are asked for, and a bridge when the task has the network on."""
    import docker.errors

    client = docker_client()

    def present(name: str) -> bool:
        try:
            client.images.get(name)
        except docker.errors.ImageNotFound:
            return False
        return True

    if not present(image):
        raise missing_image(image, task, present)
    if network and (refused := no_bridge(client)) is not None:
        raise refused
    if (gpus or "none").strip().lower() not in ("none", ""):
        runtimes = (client.info().get("Runtimes") or {}).keys()
        if "nvidia" not in runtimes and not shutil.which("nvidia-container-runtime-hook"):
            raise no_gpu_runtime(gpus)


# --- owners and leftovers -----------------------------------------------------------------


def owner_label() -> str:
    import psutil

    pid = os.getpid()
    return f"{socket.gethostname()}/{pid}/{psutil.Process(pid).create_time():.2f}"


def run_labels(run_id: str) -> dict[str, str]:
    """A container's labels, for a run id or a search's attempt's (`RUN/ATTEMPT`): a
    search's containers all carry its run's id, as `docker ps --filter label=mlra.run=ID`
    finds them."""
    run, _, attempt = run_id.partition("/")
    labels = {LABEL_RUN: run, LABEL_OWNER: owner_label()}
    if attempt:
        labels[LABEL_ATTEMPT] = attempt
    return labels


def _owner_alive(label: str) -> bool:
    """Whether the process that made a container still runs (containers of other hosts
    sharing the engine are assumed alive: their owners cannot be checked from here)."""
    import psutil

    host, _, rest = label.partition("/")
    pid_text, _, started = rest.partition("/")
    if host != socket.gethostname():
        return True
    try:
        proc = psutil.Process(int(pid_text))
        return f"{proc.create_time():.2f}" == started
    except (ValueError, psutil.Error):
        return False


def _stdin_folders(container: Any) -> list[Path]:
    """The host folders of a container's commands' stdin: a killed mlra never removed
    them (216 were left in /tmp here), so they go with its container."""
    found: list[Path] = []
    for mount in (container.attrs or {}).get("Mounts") or []:
        folder = stdin_folder_of(Path(str(mount.get("Source") or "/")))
        if mount.get("Type") == "bind" and folder is not None:
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(folder.lstat().st_mode):  # never through a link
                    found.append(folder)
    return found


def remove_leftover_containers(client: Any | None = None) -> list[str]:
    """Remove the containers of runs whose mlra process died without removing them
    (a killed console, a crash), with their stdin folders; returns the run ids they
    belonged to."""
    engine: Any = client if client is not None else docker_client()
    removed: list[str] = []
    for container in engine.containers.list(all=True, filters={"label": LABEL_RUN}):
        labels = container.labels or {}
        if _owner_alive(labels.get(LABEL_OWNER, "")):
            continue
        folders = _stdin_folders(container)
        try:
            container.remove(force=True)
        except Exception:  # gone already, or another mlra removes it now
            _wait_removed(container)
            continue
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        run = labels.get(LABEL_RUN, container.name)
        attempt = labels.get(LABEL_ATTEMPT)
        removed.append(f"{run} (attempt {attempt})" if attempt else run)
    return sorted(set(removed))


REMOVAL_WAIT_S = 60
"""Longer than the engine takes to kill a container and remove it (a second or two)."""


def _wait_removed(container: Any) -> None:
    """Wait for a container another mlra is removing ('removal already in progress') to
    be gone: its processes may still run until then, and the volume of its workspace, then
    settled, would be carried back while they write to it (what they write after, into an
    image then deleted, lost; or, left in use, a resume's container started on it)."""
    with contextlib.suppress(Exception):  # gone already: 404
        container.wait(condition="removed", timeout=REMOVAL_WAIT_S)


REMOVE_TRIES = 3
"""How often a container's removal the engine refused (busy, a request timed out) is
asked again before the container is taken as not gone."""


def remove_container(container: Any) -> Exception | None:
    """Remove `container`, asked again where the engine refuses; None once it is gone
    (removed, by this call or another mlra's), else the engine's last refusal, the
    container still there: what its workspace's volume must outlast."""
    refused: Exception | None = None
    for _ in range(REMOVE_TRIES):
        try:
            container.remove(force=True)
            return None
        except Exception as exc:  # docker's APIError, a request's time-out
            refused = exc
        if "is already in progress" in str(refused):
            _wait_removed(container)
        if _gone(container):
            return None
    return refused


def _gone(container: Any) -> bool:
    import docker.errors

    try:
        container.reload()
    except docker.errors.NotFound:
        return True
    except Exception:  # the engine unreachable: not known to be gone
        return False
    return False
