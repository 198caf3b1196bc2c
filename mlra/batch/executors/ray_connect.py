"""Reaching a Ray cluster, and what its nodes can hold.

A wrong address, a refused token or a `ray://` address without Ray Client must
be one line within seconds, not Ray's retries for minutes: the address is tried
with a plain TCP connection first, and `ray.init` is given a deadline. Ray's own
logs (its C++ core writes raylet state and warnings straight to the process's
stderr) go to `<out>/ray.log`, not into the batch's output.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

CONNECT_S = 25.0
"""The whole of connecting: the TCP check and `ray.init`."""
TCP_S = 5.0


class ClusterError(Exception):
    """The cluster cannot be used as asked; the message is one readable line."""


def _host_port(address: str) -> tuple[str, int] | None:
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_address(address: str) -> None:
    """Refuse an address that cannot work before Ray spends minutes on it."""
    if address.startswith("ray://"):
        try:
            import grpc  # noqa: F401  # Ray Client's transport: what `ray[client]` adds
        except ImportError:
            raise ClusterError(
                f"--ray-address {address}: a ray:// address needs Ray Client "
                "(pip install 'mlra[batch]', which installs ray[client])"
            ) from None
    if address == "auto":
        return
    target = _host_port(address)
    if target is None:
        raise ClusterError(f"--ray-address {address}: expected HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection(target, timeout=TCP_S):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, TimeoutError | socket.timeout):
            why = f"no answer in {TCP_S:g} s"
        raise ClusterError(f"--ray-address {address}: nothing answers there ({why})") from None


class RayLogs:
    """Ray's output to a file while the batch runs; Python's own stderr stays the terminal's.

    Ray writes to the process's stderr from C++ and prints the cluster's error
    messages (a raylet's state dump when a node dies) to `sys.stdout` from a thread
    of its own; both would land in the middle of the progress lines."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "ab", buffering=0)  # held until close()
        self._saved_fd = os.dup(2)
        self._saved_stderr = sys.stderr
        sys.stderr.flush()
        os.dup2(self._file.fileno(), 2)
        sys.stderr = io.TextIOWrapper(
            os.fdopen(os.dup(self._saved_fd), "wb", buffering=0), write_through=True
        )
        self._text = io.TextIOWrapper(
            os.fdopen(os.dup(self._file.fileno()), "wb", buffering=0), write_through=True
        )
        self._handler = logging.StreamHandler(self._text)
        for name in ("ray", "ray.util.client"):
            logging.getLogger(name).addHandler(self._handler)
        self._patched: tuple[Any, Any] | None = None
        try:
            import ray._private.worker as ray_worker

            original = ray_worker.print_to_stdstream

            def to_file(data: dict[str, Any], ignore_prefix: bool) -> None:
                del ignore_prefix
                lines = [str(line) for line in data.get("lines", [])]
                self._text.write(f"({data.get('pid', 'ray')}) " + "\n".join(lines) + "\n")

            ray_worker.print_to_stdstream = to_file
            self._patched = (ray_worker, original)
        except (ImportError, AttributeError):  # another Ray: its messages may reach stdout
            pass

    def close(self) -> None:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        if self._patched is not None:
            module, original = self._patched
            module.print_to_stdstream = original
        os.dup2(self._saved_fd, 2)
        os.close(self._saved_fd)
        sys.stderr = self._saved_stderr
        for name in ("ray", "ray.util.client"):
            logging.getLogger(name).removeHandler(self._handler)
        # What Ray still says after this (its exit handlers) is not the batch's output.
        logging.getLogger("ray").setLevel(logging.ERROR)
        with contextlib.suppress(Exception):
            self._text.close()
        self._file.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


REFUSED_TOKEN = ("InvalidAuthToken", "Unauthenticated")
"""What Ray's core logs, retrying, when the cluster refuses this driver's token."""


def connect(address: str | None, ray_log: Path | None = None) -> None:
    """`ray.init` to `address` (within `CONNECT_S`) or a local Ray, or a ClusterError.

    Ray retries a refused token for about 20 s before it says only that it could not
    connect; its core's log (`ray_log`, where RayLogs sends it) says why at once."""
    import ray

    if address:
        check_address(address)
    kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address:
        kwargs["address"] = address
    else:
        kwargs["include_dashboard"] = False
    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            ray.init(**kwargs)
            outcome.append(None)
        except BaseException as exc:  # handed to the waiting thread
            outcome.append(exc)

    where = f"--ray-address {address}" if address else "a local Ray"
    if not address:
        # Started here, in this thread: Ray starts its head's processes (GCS, raylet) with
        # PR_SET_PDEATHSIG, which the kernel fires when the *thread* that started them
        # ends, so a local Ray started in a thread of its own was killed as soon as it
        # was up, and the batch died a minute later saying nothing. Nothing to time out
        # here: no address to be wrong.
        try:
            ray.init(**kwargs)
        except Exception as exc:
            raise ClusterError(f"{where}: {_first_line(exc)}") from None
        return
    seen = ray_log.stat().st_size if ray_log is not None and ray_log.is_file() else 0
    thread = threading.Thread(target=init, daemon=True, name="mlra-ray-init")
    thread.start()
    deadline = time.monotonic() + CONNECT_S
    while not outcome and time.monotonic() < deadline:
        thread.join(0.5)
        if ray_log is not None and _refused_token(ray_log, seen):
            raise ClusterError(
                f"{where}: the cluster refused this driver's token "
                "(RAY_AUTH_TOKEN, or ~/.ray/auth_token, must be the cluster's)"
            )
    if not outcome:
        raise ClusterError(
            f"{where}: Ray did not connect within {CONNECT_S:g} s (not a Ray head there?)"
        )
    error = outcome[0]
    if error is not None:
        line = _first_line(error)
        if "ray[client]" in line:
            line = "a ray:// address needs Ray Client (pip install 'mlra[batch]')"
        raise ClusterError(f"{where}: {line}")


def _refused_token(ray_log: Path, since: int) -> bool:
    try:
        with open(ray_log, "rb") as f:
            f.seek(since)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return False
    return any(mark in text for mark in REFUSED_TOKEN)


def alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def request_of(
    cpus: float, gpus: int, memory_gb: float, custom: dict[str, float], accelerator_type: str | None
) -> dict[str, float]:
    """What a run asks of one node, in Ray's resource names."""
    request: dict[str, float] = {"CPU": cpus}
    if gpus:
        request["GPU"] = float(gpus)
    if memory_gb:
        request["memory"] = memory_gb * 2**30
    if accelerator_type:
        request[f"accelerator_type:{accelerator_type}"] = 0.001
    request.update(custom)
    return request


_NAMES = {"CPU": "CPUs", "GPU": "GPUs", "memory": "of memory"}


def _amount(name: str, value: float) -> str:
    if name == "memory":
        return f"{value / 2**30:.3g} GB"
    return f"{value:g}"


def _named(name: str, value: float) -> str:
    """`2 CPUs`, `16 GB of memory`, `1 nodeB` (a custom resource by its name)."""
    return f"{_amount(name, value)} {_NAMES.get(name, name)}"


def _label_matches(want: str, have: str | None) -> bool:
    """Equality, `!value` and `in(a,b)`/`!in(a,b)` as Ray's label selectors write them."""
    negate = want.startswith("!")
    body = want[1:] if negate else want
    if body.startswith("in(") and body.endswith(")"):
        ok = have is not None and have in [v.strip() for v in body[3:-1].split(",")]
    else:
        ok = have == body
    return ok != negate


def infeasible(request: dict[str, float], labels: dict[str, str],
               nodes: list[dict[str, Any]]) -> str | None:  # fmt: skip
    """Why no node can hold this run, naming the resource and what the nodes have; None if one can."""
    if not nodes:
        return "the Ray cluster has no live node"

    def fits(node: dict[str, Any]) -> bool:
        have: dict[str, float] = node.get("Resources") or {}
        node_labels: dict[str, str] = node.get("Labels") or {}
        return all(have.get(k, 0.0) + 1e-9 >= v for k, v in request.items()) and all(
            _label_matches(v, node_labels.get(k)) for k, v in labels.items()
        )

    if any(fits(n) for n in nodes):
        return None
    count = "the cluster's one node has" if len(nodes) == 1 else f"the {len(nodes)} nodes have"
    for name, value in request.items():
        amounts = [(n.get("Resources") or {}).get(name, 0.0) for n in nodes]
        if all(a + 1e-9 < value for a in amounts):
            if name.startswith("accelerator_type:"):
                types = sorted(
                    {
                        k.split(":", 1)[1]
                        for n in nodes
                        for k in (n.get("Resources") or {})
                        if k.startswith("accelerator_type:")
                    }
                )
                return f"needs accelerator type {name.split(':', 1)[1]}; {count} " + (
                    ", ".join(types) if types else "none Ray knows of"
                )
            have = ", ".join(_amount(name, a) for a in amounts)
            return f"needs {_named(name, value)}; {count} {have} {_NAMES.get(name, name)}"
    for key, value in labels.items():
        if not any(_label_matches(value, (n.get("Labels") or {}).get(key)) for n in nodes):
            values = sorted({str((n.get("Labels") or {}).get(key, "-")) for n in nodes})
            return f"needs node label {key}={value}; {count} {key}: {', '.join(values)}"
    wanted = ", ".join(_named(k, v) for k, v in request.items())
    return f"needs {wanted} on one node; no node has all of it"
