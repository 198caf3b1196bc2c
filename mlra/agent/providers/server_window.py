"""The context window a local server runs its model with, as the server tells it.

Each server kind tells it its own way, and some not at all:

- vLLM: `max_model_len` in each `/v1/models` entry.
- llama.cpp's `llama-server`: `GET /props`, `default_generation_settings.n_ctx` (its
  `/v1/models` gives `meta.n_ctx_train`, the window the model was trained with, which
  is not the server's `-c`).
- Ollama: `num_ctx` in `POST /api/show`'s parameters when the model sets one, else the
  `context_length` `GET /api/ps` shows for the loaded model; `model_info`'s
  `<arch>.context_length` is only what the model was trained with (Ollama runs it with
  its own default, smaller, unless told).
- llama-cpp-python's server: nothing (its `/v1/models` lists ids, `owned_by: "me"`);
  its window is learnt from its first "too long" answer.

The training window is never taken as the server's: a window taken too large is a
request the server refuses or, worse, cuts silently. Each probe is one short request
with no retries; a server that answers none of them keeps mlra's default, and the run
says so once (`unknown_note`). A server that cannot be connected to at all (refused, no
such host, a TLS failure) is no server that tells nothing: the first probe raises
`ServerUnreachable`, and `mlra run` refuses before the run starts (a slow or erring
server is up, and keeps the default).
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass
from typing import Any

import httpx2

PROBE_TIMEOUT_S = 5.0
UNKNOWN_LOCAL_LIMITS = (32_768, 8192)
"""(window, answer tokens) for a local server's model whose window the server does not
tell: small windows are common, and the first "too long" answer tells the real one."""


@dataclass
class ServerWindow:
    window: int | None = None
    """The server's window in tokens, where it told it."""
    told_by: str = ""
    """Where the window was read ("llama-server's /props"), for the record."""
    server: str = ""
    """The kind of server, where it could be told ("llama-cpp-python", "Ollama")."""
    trained: int | None = None
    """The window the model was trained with, where the server told only that."""
    loading: bool = False
    """The server answered HTTP 503 while loading its model (llama-server, started or
    restarted with the run): its window is asked again once it answers
    (agent/providers/window_reading.py)."""


UNREACHABLE_WORDS = "cannot reach the model server at"
"""How the refusal begins (a batch tells refusals apart by `mlra run`'s exit status,
not by these words: mlra/exit_status.py)."""


class ServerUnreachable(Exception):
    """The server at the user's base URL could not be connected to at all: a typo or a
    server not started, which no retry mends; said before a run starts, not after its
    model calls have used their retries."""

    def __init__(self, url: str, cause: str, hint: str = "is it running?") -> None:
        super().__init__(f"{UNREACHABLE_WORDS} {url} ({cause}): {hint}")
        self.url = url
        self.cause = cause


def server_root(base_url: str) -> str:
    """The server's own root, where its non-OpenAI endpoints live (`/props`, `/api/...`)."""
    return re.sub(r"/v1/?$", "", base_url.rstrip("/"))


async def read_server_window(
    base_url: str, model: str, api_key: str, *, ask_window: bool = True, shown_url: str = ""
) -> ServerWindow:
    """Ask the server at `base_url` (an OpenAI-compatible `/v1`) for its window; with
    `ask_window` False only whether it can be reached (a window the user set or a known
    model's). Raises ServerUnreachable (naming `shown_url`, else `base_url`) where the
    first request cannot connect."""
    found = ServerWindow()
    root = server_root(base_url)
    headers = {"Authorization": f"Bearer {api_key}"}

    async def loading(answer: httpx2.Response) -> None:
        found.loading = found.loading or answer.status_code == 503

    hooks = {"response": [loading]}
    async with httpx2.AsyncClient(
        timeout=PROBE_TIMEOUT_S, headers=headers, event_hooks=hooks
    ) as client:
        try:
            listing = await _get_json(client, base_url.rstrip("/") + "/models", connect=True)
        except httpx2.ConnectError as exc:
            raise ServerUnreachable(shown_url or base_url, connect_cause(exc)) from None
        except httpx2.ConnectTimeout:
            # Nothing answered the connection at all (a machine off, a wrong address, a
            # firewall dropping packets): no run can go on; a slow server is a read
            # time-out, and is no refusal.
            raise ServerUnreachable(
                shown_url or base_url, f"no answer to connect within {PROBE_TIMEOUT_S:g} s"
            ) from None
        if not ask_window:
            return found
        entry = _entry_for(listing, model)
        if entry is not None:
            owner = entry.get("owned_by")
            found.server = {"me": "llama-cpp-python", "llamacpp": "llama-server"}.get(
                str(owner), found.server
            )
            if _positive(entry.get("max_model_len")):
                found.window, found.told_by, found.server = (
                    entry["max_model_len"],
                    "vLLM's max_model_len",
                    "vLLM",
                )
                return found
            meta = entry.get("meta")
            if isinstance(meta, dict) and _positive(meta.get("n_ctx_train")):
                found.trained = meta["n_ctx_train"]
        if found.server == "llama-cpp-python":
            return found  # it has no other endpoint that tells
        props = await _get_json(client, root + "/props")
        if isinstance(props, dict):
            settings = props.get("default_generation_settings")
            for window in (
                settings.get("n_ctx") if isinstance(settings, dict) else None,
                props.get("n_ctx"),
            ):
                if _positive(window):
                    found.window, found.told_by, found.server = (
                        window,
                        "llama-server's /props",
                        "llama-server",
                    )
                    return found
        shown = await _post_json(client, root + "/api/show", {"model": model})
        if isinstance(shown, dict):
            found.server = "Ollama"
            window = _ollama_num_ctx(shown)
            if window is not None:
                found.window, found.told_by = window, "Ollama's num_ctx for the model"
                return found
            found.trained = _ollama_trained(shown) or found.trained
            running = await _get_json(client, root + "/api/ps")
            window = _ollama_running(running, model)
            if window is not None:
                found.window, found.told_by = window, "Ollama's /api/ps for the loaded model"
                return found
    return found


class ServerProbe:
    """Whether the user's server was asked for its window and whether it was reached,
    for both providers that talk to one (OpenAI- and Anthropic-compatible): asked once,
    before the run (`discover_limits`), and again only where it could not be reached."""

    def __init__(self, *, ask_window: bool, base_url: str | None) -> None:
        self.probed = not ask_window or not base_url
        """Nothing more to ask of the window (set by the user, a known model, or asked)."""
        self.reached = not base_url
        """Whether the user's server was connected to (no server: nothing to reach)."""

    async def window(
        self, base_url: str, model: str, api_key: str, *, shown_url: str = ""
    ) -> ServerWindow | None:
        """What the server tells of its window where it was to be asked; None where only
        its being there was checked (or it was reached already). Raises
        ServerUnreachable, and asks again next time, where it cannot be connected to."""
        if self.probed and self.reached:
            return None
        asking = not self.probed
        self.probed = True  # set before the wait: a second caller meanwhile asks nothing
        try:
            found = await read_server_window(
                base_url, model, api_key, ask_window=asking, shown_url=shown_url
            )
        except ServerUnreachable:
            self.probed = not asking  # asked again next time
            raise
        self.reached = True
        return found if asking else None


def unknown_note(name: str, found: ServerWindow, assumed: int) -> str:
    """What the run says once when the server did not tell its window: what was assumed
    and how to set it."""
    server = f" ({found.server})" if found.server else ""
    why = {
        "llama-cpp-python": "llama-cpp-python's server does not tell its n_ctx (2048 unless "
        "started with --n_ctx)",
        "Ollama": "Ollama tells no window for a model without num_ctx until it is loaded "
        "(its default is OLLAMA_CONTEXT_LENGTH)",
    }.get(found.server, "it answered none of /v1/models max_model_len, /props, /api/show")
    if found.loading:
        why = "it was still loading its model (HTTP 503); it is asked again once it answers"
    trained = f"; the model was trained for {found.trained:,} tokens" if found.trained else ""
    return (
        f"{name}: the server{server} did not tell its context window: {why}{trained}. "
        f"mlra assumes {assumed:,} tokens and learns the real window from the server's first "
        "'too long' answer; pass --context-window N (the server's own setting) to size "
        "requests and summaries right from the start"
    )


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def connect_cause(exc: BaseException) -> str:
    """Why a connection failed, in a few words, from the OS's own error under httpx's
    (a host with several addresses, `localhost` as ::1 and 127.0.0.1, fails as a group
    of one error per address: the first that says why is taken)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, BaseExceptionGroup):
            causes = [connect_cause(e) for e in seen.exceptions]
            return next((c for c in causes if c != "connection attempts failed"), causes[0])
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            if seen.errno == socket.EAI_AGAIN:
                return "name lookup failed for now"
            return "no such host"
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"TLS: {seen.verify_message or seen.reason or 'certificate not verified'}"
        if isinstance(seen, ssl.SSLError):
            return f"TLS: {(seen.reason or str(seen)).lower().replace('_', ' ')}"
        if isinstance(seen, OSError) and seen.strerror and seen.errno is not None:
            return seen.strerror.lower()
        seen = seen.__cause__ or seen.__context__
    return (str(exc) or type(exc).__name__).lower().rstrip(".")


async def _get_json(client: httpx2.AsyncClient, url: str, *, connect: bool = False) -> Any:
    """The answer's JSON, None for any failure; with `connect`, a connection that cannot
    be made is raised (httpx2.ConnectError, ConnectTimeout), not taken for a server that
    tells nothing."""
    try:
        answer = await client.get(url)
        return answer.json() if answer.status_code == 200 else None
    except (httpx2.ConnectError, httpx2.ConnectTimeout):
        if connect:
            raise
        return None
    except (httpx2.HTTPError, ValueError):
        return None


async def _post_json(client: httpx2.AsyncClient, url: str, body: dict[str, Any]) -> Any:
    try:
        answer = await client.post(url, json=body)
        return answer.json() if answer.status_code == 200 else None
    except (httpx2.HTTPError, ValueError):
        return None


def _entry_for(listing: Any, model: str) -> dict[str, Any] | None:
    """`model`'s entry in /v1/models (the only entry when there is one: llama.cpp servers
    name it after its file, whatever the client calls it)."""
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list):
        return None
    dicts = [e for e in entries if isinstance(e, dict)]
    if len(dicts) == 1:
        return dicts[0]
    return next((e for e in dicts if e.get("id") == model), None)


def _ollama_num_ctx(shown: dict[str, Any]) -> int | None:
    """`num_ctx` from /api/show's `parameters` (one "name value" a line)."""
    parameters = shown.get("parameters")
    if not isinstance(parameters, str):
        return None
    found = re.search(r"^\s*num_ctx\s+(\d+)\s*$", parameters, re.M)
    return int(found.group(1)) if found and int(found.group(1)) > 0 else None


def _ollama_trained(shown: dict[str, Any]) -> int | None:
    info = shown.get("model_info")
    if not isinstance(info, dict):
        return None
    for key, value in info.items():
        if str(key).endswith(".context_length") and _positive(value):
            return value
    return None


def _ollama_running(running: Any, model: str) -> int | None:
    models = running.get("models") if isinstance(running, dict) else None
    if not isinstance(models, list):
        return None
    names = {model, f"{model}:latest"}
    for entry in models:
        if isinstance(entry, dict) and (entry.get("name") in names or entry.get("model") in names):
            window = entry.get("context_length")
            if _positive(window):
                return window
    return None
