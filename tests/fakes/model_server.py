"""A scripted model server that speaks the real Anthropic and OpenAI HTTP APIs.

End-to-end tests point the real SDKs (and so the real providers, retries and
streaming included) at this server instead of mocking them. It answers
`POST /v1/messages` (Anthropic) and `POST /v1/chat/completions` (OpenAI), both
streamed as server-sent events and not streamed, from a script.

The script is `{role: [turn, ...]}`. The role of a request comes from the first
line of its system prompt, checked in this order: "summarize" -> summarizer,
"reviewing" -> reviewer, "supervisor" -> supervisor, "worker" -> worker, else
default (a role the script does not mention uses the "default" entries). Each
request takes the role's next turn:

    {"text": "...", "tool_calls": [{"name": "bash", "arguments": {...}},
                                   {"name": "bash", "raw_arguments": "{not json"},
                                   {"name": "bash", "arguments": {...}, "id": ""}],  # no id
     "usage": {"input_tokens": 10, "output_tokens": 5,            # optional
               "cache_read_tokens": 0, "cache_write_tokens": 0},
     "stop_reason": "max_tokens"}                                 # optional
    "plain text"                          # short for {"text": "plain text"}
    {"status": 429, "times": 2}           # answer HTTP 429 twice, then go on
    {"hang": 5.0, "times": 1}             # answer only after 5 s (or never, if stopped)
    {"hold": "name", "text": "..."}       # answer once the test calls release("name")
    {"hold_writing": "name", "text": "..."}  # streamed: its first piece of text, the
                                          # rest once the test calls release("name")
    {"text": "...", "stream_error": "overloaded_error"}  # fail mid-stream
    {"broken": "html", "times": 2}        # HTTP 200 that is no answer, twice (see BROKEN)
    {"text": "...", "no_usage": true}     # OpenAI: no token counts (as many local servers)
    {"drop": true, "times": 2}            # a stream's first piece, then the socket closed
                                          # (a server killed mid-answer), twice; with
                                          # "text", that piece is the text

When a role's turns are used up, `"<role>:fallback"` answers (every time) if the
script has one, else the text "(script exhausted)". Usage is deterministic:
prompt tokens = len(request body) // 4, output tokens = len(text + arguments) // 4
+ 10; Anthropic requests that carry cache_control report part of the prompt as
cache reads and writes, OpenAI reports half of it as cached.

Local servers' ways: `n_ctx` answers llama-server's `GET /props` (and puts only the
training window, `meta.n_ctx_train`, in /v1/models, as llama-server does),
`ollama_num_ctx` answers Ollama's `POST /api/show`, `ollama_loaded_ctx` answers it
with no num_ctx but lists the model as loaded with that window in `GET /api/ps`,
`llama_cpp_python_window` behaves as llama-cpp-python's server does with a request
whose prompt (len(body) // 4) reaches its window: HTTP 200 and an empty stream when
streamed, HTTP 400 `context_length_exceeded` when not (its /v1/models says
`owned_by: "me"` and nothing of a window), `reject_tools` refuses
requests that carry native tool definitions with an HTTP 400 (vLLM without a
tool parser), and `context_limit` refuses with an HTTP 400, as vLLM does, a
request whose prompt tokens (len(body) // 4) and max_tokens exceed it.
`llama_server_ctx` refuses, as llama-server does, a request whose prompt alone passes
it (HTTP 400 `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`);
`ollama_ctx` the same, wrapped in a string as Ollama passes it on. Setting
`loading_model` makes it answer every request as llama-server does while it loads its
model after a restart (HTTP 503 "Loading model"), until it is set False.

By hand: `python -m tests.fakes.model_server --script FILE [--port N] [--delay S]`
prints the base URLs and serves until killed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

Api = Literal["anthropic", "openai"]
Script = dict[str, Any]

ROLES = ("summarizer", "reviewer", "supervisor", "worker", "default")
EXHAUSTED = "(script exhausted)"
TURN_KEYS = {
    "text",
    "tool_calls",
    "usage",
    "stop_reason",
    "stream_error",
    "status",
    "times",
    "message",
    "retry_after_ms",
    "hang",
    "hold",
    "hold_writing",
    "broken",
    "no_usage",
    "drop",
}
BROKEN = ("html", "empty", "no_choices", "truncated", "cut")
"""HTTP 200 answers that are no answer: a proxy's HTML page, `{}`, a completion with
no `choices`, JSON cut off midway, a stream that ends with no finish (no [DONE])."""
LOADING_MODEL = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
"""llama-server's answer (HTTP 503) to every request while it loads its model."""
USAGE_KEYS = {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"}
ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def role_of(system: str) -> str:
    """The agent role a system prompt belongs to, from its first line."""
    first = system.strip().splitlines()[0].lower() if system.strip() else ""
    for needle, role in (
        ("summarize", "summarizer"),
        ("reviewing", "reviewer"),
        ("supervisor", "supervisor"),
        ("worker", "worker"),
    ):
        if needle in first:
            return role
    return "default"


def load_script(path: str | Path) -> Script:
    """A script from a JSON file, checked so a typo fails at load, not mid-run."""
    script = json.loads(Path(path).read_text(encoding="utf-8"))
    return validate_script(script)


def validate_script(script: Mapping[str, Any]) -> Script:
    if not isinstance(script, Mapping):
        raise ValueError("a script is a JSON object of role -> list of turns")
    checked: Script = {}
    for key, value in script.items():
        role, _, suffix = key.partition(":")
        if role not in ROLES or suffix not in ("", "fallback"):
            raise ValueError(
                f"unknown script key {key!r}: use one of {', '.join(ROLES)}, optionally with ':fallback'"
            )
        if suffix:
            checked[key] = _turn(value, key)
        else:
            if not isinstance(value, list):
                raise ValueError(f"script[{key!r}] must be a list of turns")
            checked[key] = [_turn(turn, f"{key}[{i}]") for i, turn in enumerate(value)]
    return checked


def _turn(turn: Any, where: str) -> dict[str, Any]:
    if isinstance(turn, str):
        return {"text": turn}
    if not isinstance(turn, Mapping):
        raise ValueError(f"{where}: a turn is a string or an object")
    unknown = set(turn) - TURN_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    for call in turn.get("tool_calls", []):
        if not isinstance(call, Mapping) or "name" not in call:
            raise ValueError(f"{where}: each tool call needs a name")
        if "arguments" in call and "raw_arguments" in call:
            raise ValueError(f"{where}: give arguments or raw_arguments, not both")
    if "broken" in turn and turn["broken"] not in BROKEN:
        raise ValueError(f"{where}: broken is one of {', '.join(BROKEN)}")
    if set(turn.get("usage", {})) - USAGE_KEYS:
        raise ValueError(f"{where}: usage keys are {sorted(USAGE_KEYS)}")
    return dict(turn)


ANTHROPIC_START = {
    "type": "message_start",
    "message": {
        "id": "msg_x",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 1},
    },
}
"""The first event of a broken or cut Anthropic stream (a message begun, nothing in it)."""


@dataclass
class RecordedRequest:
    """One model request as the server saw it, for assertions."""

    api: Api
    role: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    outcome: str = ""
    """What was answered: "text", "tool_calls", "status 429", "hang", "stream_error"."""
    turn: dict[str, Any] = field(default_factory=dict)
    size: int = 0
    """The body's length in bytes, as sent: the fake counts a prompt's tokens from it."""

    @property
    def system(self) -> str:
        return _system_text(self.api, self.body)

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


class ScriptedModelServer:
    """The fake server; use as a context manager, or call start() and stop()."""

    def __init__(
        self,
        script: Mapping[str, Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        retry_after_ms: float | None = 1.0,
        chunk_delay_s: float = 0.0,
        reject_stream_options: bool = False,
        max_model_len: int | None = None,
        turn_by_history: bool = False,
        n_ctx: int | None = None,
        ollama_num_ctx: int | None = None,
        reject_tools: str | None = None,
        context_limit: int | None = None,
        llama_cpp_python_window: int | None = None,
        ollama_loaded_ctx: int | None = None,
        llama_server_ctx: int | None = None,
        ollama_ctx: int | None = None,
    ) -> None:
        """`retry_after_ms` is sent with every 429/5xx so SDK retries are near-instant in tests."""
        self.script: Script = validate_script(script or {})
        self.host = host
        self.port = port
        self.retry_after_ms = retry_after_ms
        self.chunk_delay_s = chunk_delay_s
        self.reject_stream_options = reject_stream_options
        self.max_model_len = max_model_len
        self.n_ctx = n_ctx
        self.ollama_num_ctx = ollama_num_ctx
        self.reject_tools = reject_tools
        self.context_limit = context_limit
        self.llama_cpp_python_window = llama_cpp_python_window
        self.ollama_loaded_ctx = ollama_loaded_ctx
        self.llama_server_ctx = llama_server_ctx
        self.ollama_ctx = ollama_ctx
        self.loading_model = False
        """Answer everything as llama-server does while it loads its model (after a
        restart): HTTP 503 `LOADING_MODEL`, until set False again."""
        self.turn_by_history = turn_by_history
        """Answer with the turn numbered by the assistant messages already in the request,
        as a stateless model would: a client that dies and asks again (a resumed run)
        gets the same answer, not the next one."""
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._positions: dict[str, int] = {}
        self._repeats: dict[str, int] = {}
        self._ids: dict[str, int] = {}
        self._stopping = threading.Event()
        self._holds: dict[str, threading.Event] = {}
        self._open: set[socket.socket] = set()
        """Connections open now: a stopped server closes them, as a killed one would."""
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def from_file(cls, path: str | Path, **options: Any) -> ScriptedModelServer:
        return cls(load_script(path), **options)

    # --- lifecycle -------------------------------------------------------------------

    def start(self) -> ScriptedModelServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        httpd = ThreadingHTTPServer((self.host, self.port), handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False  # hanging answers must not hold up stop()
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._stopping.clear()
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def release(self, name: str) -> None:
        """Let the answers held by `{"hold": name}` (or `hold_writing`) go: a test acts while the model
        is still answering (its Space lands before the call is written), on an event
        rather than within a fixed delay."""
        self._hold(name).set()

    def _hold(self, name: str) -> threading.Event:
        with self._lock:
            return self._holds.setdefault(name, threading.Event())

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            for held in self._holds.values():
                held.set()
        with self._lock:
            for connection in list(self._open):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url_for(self, api: Api) -> str:
        """The base_url to give the SDK client (OpenAI's includes /v1, Anthropic's does not)."""
        root = f"http://{self.host}:{self.port}"
        if api == "anthropic":
            return root
        if api == "openai":
            return root + "/v1"
        raise ValueError(f"unknown api {api!r}: use 'anthropic' or 'openai'")

    # --- script ----------------------------------------------------------------------

    def add(self, role: str, *turns: Any) -> None:
        """More turns for a role while the server runs."""
        checked = [_turn(t, f"{role}[+]") for t in turns]
        with self._lock:
            self.script.setdefault(role, []).extend(checked)

    def set_fallback(self, role: str, turn: Any) -> None:
        with self._lock:
            self.script[f"{role}:fallback"] = _turn(turn, f"{role}:fallback")

    def requests_for(
        self, role: str | None = None, api: Api | None = None
    ) -> list[RecordedRequest]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (role is None or r.role == role) and (api is None or r.api == api)
            ]

    def remaining(self, role: str) -> int:
        """Turns of `role` not yet used (tests check a script was played to the end)."""
        with self._lock:
            key = self._key(role)
            return len(self.script.get(key, [])) - self._positions.get(key, 0)

    def _key(self, role: str) -> str:
        """A role the script does not mention plays the "default" entries."""
        return role if role in self.script or f"{role}:fallback" in self.script else "default"

    def _next_turn(self, role: str, answered: int | None = None) -> dict[str, Any]:
        """The role's current turn; failures and hangs stay current for their `times`."""
        with self._lock:
            key = self._key(role)
            turns = self.script.get(key, [])
            position = self._positions.get(key, 0)
            if self.turn_by_history and answered is not None:
                position = answered
            if position >= len(turns):
                return dict(self.script.get(f"{key}:fallback") or {"text": EXHAUSTED})
            turn = turns[position]
            if "status" in turn or "hang" in turn or "broken" in turn or "drop" in turn:
                used = self._repeats.get(key, 0) + 1
                if used >= int(turn.get("times", 1)):
                    self._positions[key] = position + 1
                    self._repeats[key] = 0
                else:
                    self._repeats[key] = used
            else:
                self._positions[key] = position + 1
            return dict(turn)

    def _new_id(self, prefix: str) -> str:
        with self._lock:
            n = self._ids.get(prefix, 0) + 1
            self._ids[prefix] = n
        return f"{prefix}{n:04d}"

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)


# --- HTTP ------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    fake: ScriptedModelServer
    protocol_version = "HTTP/1.1"
    _held: threading.Event | None = None
    """Set while a `hold_writing` answer streams: what its first piece of text waits on."""

    def setup(self) -> None:
        super().setup()
        with self.fake._lock:
            self.fake._open.add(self.connection)

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._open.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: test output and the hand-run console stay readable."""

    def do_GET(self) -> None:
        path = self.path.rstrip("/")
        if self.fake.loading_model:
            self._loading_model()
        elif path in ("/v1/models", "/models"):
            entry: dict[str, Any] = {"id": "scripted", "object": "model", "owned_by": "mlra-tests"}
            if self.fake.max_model_len:
                entry["max_model_len"] = self.fake.max_model_len
            if self.fake.n_ctx:
                entry["owned_by"] = "llamacpp"
                entry["meta"] = {"n_vocab": 151_936, "n_ctx_train": 131_072}
            if self.fake.llama_cpp_python_window:
                entry = {"id": "scripted", "object": "model", "owned_by": "me", "permissions": []}
            self._json(200, {"object": "list", "data": [entry]})
        elif path == "/props" and self.fake.n_ctx:
            settings = {"id": 0, "n_ctx": self.fake.n_ctx, "params": {"n_predict": -1}}
            self._json(200, {"default_generation_settings": settings, "total_slots": 1})
        elif path == "/api/ps" and self.fake.ollama_loaded_ctx:
            loaded = {"name": "scripted", "model": "scripted", "context_length": 0}
            loaded["context_length"] = self.fake.ollama_loaded_ctx
            self._json(200, {"models": [loaded]})
        else:
            self._json(
                404, {"error": {"type": "not_found_error", "message": f"no route {self.path}"}}
            )

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?")[0].rstrip("/")
        api: Api
        if path == "/api/show" and self.fake.ollama_num_ctx:
            parameters = (
                f'num_ctx                        {self.fake.ollama_num_ctx}\nstop "<|im_end|>"'
            )
            self._json(200, {"parameters": parameters, "model_info": {}})
            return
        if path == "/api/show" and self.fake.ollama_loaded_ctx:
            info = {"general.architecture": "qwen2", "qwen2.context_length": 32_768}
            self._json(200, {"parameters": 'stop "<|im_end|>"', "model_info": info})
            return
        if path == "/v1/messages":
            api = "anthropic"
        elif path in ("/v1/chat/completions", "/chat/completions"):
            api = "openai"
        else:
            self._json(
                404, {"error": {"type": "not_found_error", "message": f"no route {self.path}"}}
            )
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._error(api, 400, f"request body is not JSON: {exc}")
            return
        record = RecordedRequest(
            api=api,
            role=role_of(_system_text(api, body)),
            path=path,
            body=body,
            headers={k.lower(): v for k, v in self.headers.items()},
            size=len(raw),
        )
        self.fake._record(record)
        if self.fake.loading_model:
            record.outcome = "loading model"
            self._loading_model()
            return
        if api == "openai" and self.fake.reject_stream_options and "stream_options" in body:
            record.outcome = "status 400"
            self._error(api, 400, "Unrecognized request argument supplied: stream_options")
            return
        wanted = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
        if self.fake.context_limit and len(raw) // 4 + wanted > self.fake.context_limit:
            record.outcome = "status 400"
            self._error(
                api,
                400,
                f"This model's maximum context length is {self.fake.context_limit} tokens. "
                f"However, you requested {len(raw) // 4 + wanted} tokens.",
            )
            return
        for window, wrapped in ((self.fake.llama_server_ctx, False), (self.fake.ollama_ctx, True)):
            if api == "openai" and window and len(raw) // 4 > window:
                record.outcome = "status 400"
                self._llama_server_too_long(len(raw) // 4, window, wrapped=wrapped)
                return
        window = self.fake.llama_cpp_python_window
        if api == "openai" and window and len(raw) // 4 >= window:
            if body.get("stream"):
                record.outcome = "empty stream"
                self._sse(iter([]), named=False)  # its log says why; the client is told nothing
                return
            record.outcome = "status 400"
            self._llama_cpp_python_too_long(len(raw) // 4, wanted)
            return
        if self.fake.reject_tools and body.get("tools"):
            record.outcome = "status 400"
            self._error(api, 400, self.fake.reject_tools)
            return
        answered = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        turn = self.fake._next_turn(record.role, answered)
        record.turn = turn
        try:
            self._answer(api, body, raw, turn, record)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a time-out): nothing to do

    def _answer(
        self,
        api: Api,
        body: dict[str, Any],
        raw: bytes,
        turn: dict[str, Any],
        record: RecordedRequest,
    ) -> None:
        if "status" in turn:
            status = int(turn["status"])
            record.outcome = f"status {status}"
            message = turn.get("message") or f"scripted failure (HTTP {status})"
            self._error(api, status, message, turn.get("retry_after_ms", self.fake.retry_after_ms))
            return
        if "hold" in turn:
            self.fake._hold(str(turn["hold"])).wait()
            if self.fake._stopping.is_set():
                self.close_connection = True
                return
            turn = {k: v for k, v in turn.items() if k != "hold"}
        if "hang" in turn:
            record.outcome = "hang"
            if self.fake._stopping.wait(float(turn["hang"])):
                self.close_connection = True
                return
            turn = {
                "text": turn.get("text", "(late answer)"),
                **{k: v for k, v in turn.items() if k != "hang"},
            }
        if turn.get("drop"):
            record.outcome = "dropped"
            self._dropped(api, str(turn.get("text") or "half an ans"))
            return
        if "broken" in turn:
            record.outcome = f"broken {turn['broken']}"
            self._broken(api, str(turn["broken"]), bool(body.get("stream")))
            return
        reply = _Reply.build(self.fake, api, raw, turn)
        record.outcome = (
            "stream_error" if turn.get("stream_error") else "tool_calls" if reply.calls else "text"
        )
        model = str(body.get("model", "scripted"))
        hold = turn.get("hold_writing")
        self._held = None if hold is None else self.fake._hold(str(hold))
        if api == "anthropic":
            if body.get("stream"):
                self._sse(_anthropic_events(self.fake, model, reply, body), named=True)
            else:
                self._json(200, _anthropic_message(self.fake, model, reply, body))
        elif body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            include_usage = include_usage and not turn.get("no_usage")
            self._sse(_openai_chunks(self.fake, model, reply, include_usage), named=False)
        else:
            completion = _openai_completion(self.fake, model, reply)
            if turn.get("no_usage"):
                del completion["usage"]
            self._json(200, completion)

    def _llama_server_too_long(self, prompt: int, window: int, *, wrapped: bool) -> None:
        """llama-server's answer to a prompt longer than its window (the answer's budget
        is not counted); Ollama (`truncate: false`, or a model whose template lets its
        runner check) passes the same error on as the message of its own."""
        message = (
            f"request ({prompt} tokens) exceeds the available context size ({window} tokens), "
            "try increasing it"
        )
        error: dict[str, Any] = {
            "code": 400,
            "message": message,
            "type": "exceed_context_size_error",
            "n_prompt_tokens": prompt,
            "n_ctx": window,
        }
        if wrapped:
            inner = json.dumps({"error": error})
            error = {"message": inner, "type": "invalid_request_error", "param": None, "code": None}
        self._json(400, {"error": error})

    def _llama_cpp_python_too_long(self, prompt: int, wanted: int) -> None:
        """llama-cpp-python's answer to an unstreamed request longer than its window."""
        window = self.fake.llama_cpp_python_window
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{prompt + wanted} tokens ({prompt} in the messages, {wanted} in the completion). "
            "Please reduce the length of the messages or completion."
        )
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        self._json(400, {"error": error})

    def _broken(self, api: Api, kind: str, stream: bool) -> None:
        """An HTTP 200 that is no answer, as proxies and crashing servers send them."""
        if kind == "html":
            page = b"<html><body><h1>502 Bad Gateway</h1>nginx</body></html>"
            self._raw(200, "text/html", page)
            return
        if not stream:
            bodies = {
                "empty": b"{}",
                "no_choices": b'{"id": "chatcmpl-x", "object": "chat.completion", "model": "m"}',
                "truncated": b'{"id": "chatcmpl-x", "object": "chat.completion", "choi',
                "cut": b'{"id": "chatcmpl-x", "object": "chat.completion", "choi',
            }
            self._raw(200, "application/json", bodies[kind])
            return
        if api == "anthropic":
            text = {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": "half an ans"},
            }
            events: dict[str, list[tuple[str | None, str]]] = {
                "empty": [(None, "{}")],
                "no_choices": [("message_start", _dumps(ANTHROPIC_START))],
                "truncated": [
                    ("message_start", _dumps(ANTHROPIC_START)),
                    ("content_block_start", '{"type": "content_bl'),
                ],
                "cut": [
                    ("message_start", _dumps(ANTHROPIC_START)),
                    ("content_block_start", _dumps(text)),
                ],
            }
            self._sse(iter(events[kind]), named=True)
            return
        piece = {
            "id": "chatcmpl-x",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": "half an ans"}, "finish_reason": None}],
        }
        chunks: dict[str, list[tuple[str | None, str]]] = {
            "empty": [(None, "{}"), (None, "[DONE]")],
            "no_choices": [
                (None, '{"id": "chatcmpl-x", "object": "chat.completion.chunk"}'),
                (None, "[DONE]"),
            ],
            "truncated": [(None, _dumps(piece)), (None, '{"id": "chatcmpl-x", "obj')],
            "cut": [(None, _dumps(piece))],
        }
        self._sse(iter(chunks[kind]), named=False)

    def _dropped(self, api: Api, text: str) -> None:
        """A server killed mid-answer: a streamed answer's first piece (`text`), then the
        socket closed with the stream unfinished (no last chunk), as a killed process
        leaves it."""
        if api == "anthropic":
            block = {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
            delta = {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            }
            pieces = [
                f"event: {e['type']}\ndata: {_dumps(e)}\n\n"
                for e in (ANTHROPIC_START, block, delta)
            ]
        else:
            piece = {
                "id": "chatcmpl-x",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
            }
            pieces = [f"data: {_dumps(piece)}\n\n"]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for text in pieces:
            chunk = text.encode()
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _raw(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    # --- writing ---------------------------------------------------------------------

    def _json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_scripted")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _loading_model(self) -> None:
        """llama-server's answer to every request while its model loads (the same for its
        OpenAI and Anthropic endpoints)."""
        retry = self.fake.retry_after_ms
        self._json(503, LOADING_MODEL, {"retry-after-ms": f"{retry:g}"} if retry else None)

    def _error(
        self, api: Api, status: int, message: str, retry_after_ms: float | None = None
    ) -> None:
        headers = {"retry-after-ms": f"{retry_after_ms:g}"} if retry_after_ms else {}
        if api == "anthropic":
            kind = ANTHROPIC_ERRORS.get(
                status, "api_error" if status >= 500 else "invalid_request_error"
            )
            payload: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
        else:
            kind = (
                "rate_limit_exceeded"
                if status == 429
                else "server_error"
                if status >= 500
                else "invalid_request_error"
            )
            payload = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
        self._json(status, payload, headers)

    def _sse(self, events: Iterator[tuple[str | None, str]], *, named: bool) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", "req_scripted")
        self.end_headers()
        for name, data in events:
            text = (f"event: {name}\n" if named and name else "") + f"data: {data}\n\n"
            chunk = text.encode()
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.flush()
            if self._held is not None and _brings_text(data):
                self._held.wait()  # the model writes on once the test lets it
                self._held = None
                if self.fake._stopping.is_set():
                    self.close_connection = True
                    return
            if self.fake.chunk_delay_s:
                time.sleep(self.fake.chunk_delay_s)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# --- answers ---------------------------------------------------------------------------


@dataclass
class _Call:
    id: str
    name: str
    arguments: str
    """The arguments exactly as the "model" writes them (maybe not JSON)."""


@dataclass
class _Reply:
    text: str
    calls: list[_Call]
    prompt_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int
    stop_reason: str | None
    stream_error: str | None

    @classmethod
    def build(cls, fake: ScriptedModelServer, api: Api, raw: bytes, turn: dict[str, Any]) -> _Reply:
        text = str(turn.get("text", ""))
        prefix = "toolu_" if api == "anthropic" else "call_"
        calls = []
        for call in turn.get("tool_calls", []):
            if "raw_arguments" in call:
                arguments = str(call["raw_arguments"])
            else:
                arguments = json.dumps(call.get("arguments", {}))
            # A call's "id" as the script gives it ("": as a server that sends none).
            given = str(call["id"]) if "id" in call else fake._new_id(prefix)
            calls.append(_Call(given, str(call["name"]), arguments))
        usage = turn.get("usage", {})
        prompt = int(usage.get("input_tokens", len(raw) // 4))
        produced = text + "".join(c.arguments for c in calls)
        output = int(usage.get("output_tokens", len(produced) // 4 + 10))
        if api == "anthropic":
            cached = b'"cache_control"' in raw
            read = int(usage.get("cache_read_tokens", prompt // 2 if cached else 0))
            write = int(usage.get("cache_write_tokens", prompt // 10 if cached else 0))
        else:
            read = int(usage.get("cache_read_tokens", prompt // 2))
            write = int(usage.get("cache_write_tokens", 0))
        return cls(
            text=text,
            calls=calls,
            prompt_tokens=prompt,
            output_tokens=output,
            cache_read=read,
            cache_write=write,
            stop_reason=turn.get("stop_reason"),
            stream_error=turn.get("stream_error"),
        )


def split_text(text: str) -> list[str]:
    """Word-sized pieces (at least two for any text of two characters or more)."""
    pieces = re.findall(r"\s*\S+\s*", text) or ([text] if text else [])
    if len(pieces) == 1 and len(text) > 1:
        half = len(text) // 2
        pieces = [text[:half], text[half:]]
    return pieces


def split_arguments(arguments: str, parts: int = 3) -> list[str]:
    if not arguments:
        return []
    size = max(1, -(-len(arguments) // parts))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def _system_text(api: Api, body: Mapping[str, Any]) -> str:
    if api == "anthropic":
        system = body.get("system", "")
        if isinstance(system, list):
            return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, Mapping))
        return str(system or "")
    for message in body.get("messages", []):
        if isinstance(message, Mapping) and message.get("role") in ("system", "developer"):
            content = message.get("content", "")
            if isinstance(content, list):
                return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
            return str(content or "")
    return ""


def _brings_text(data: str) -> bool:
    """A streamed event (OpenAI's or Anthropic's) that brings a piece of the answer's text."""
    try:
        payload = json.loads(data)
    except ValueError:
        return False
    if not isinstance(payload, dict):
        return False
    if payload.get("type") == "content_block_delta":  # Anthropic
        return payload["delta"].get("type") == "text_delta"
    choices = payload.get("choices") or [{}]
    return bool((choices[0].get("delta") or {}).get("content"))


def _dumps(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"))


# --- Anthropic -------------------------------------------------------------------------


def _anthropic_usage(reply: _Reply, *, output: int) -> dict[str, Any]:
    return {
        "input_tokens": max(0, reply.prompt_tokens - reply.cache_read - reply.cache_write),
        "cache_creation_input_tokens": reply.cache_write,
        "cache_read_input_tokens": reply.cache_read,
        "output_tokens": output,
    }


def _anthropic_stop(reply: _Reply) -> str:
    return reply.stop_reason or ("tool_use" if reply.calls else "end_turn")


def _anthropic_events(
    fake: ScriptedModelServer, model: str, reply: _Reply, body: Mapping[str, Any]
) -> Iterator[tuple[str | None, str]]:
    message = {
        "id": fake._new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_usage(reply, output=1),
    }
    yield "message_start", _dumps({"type": "message_start", "message": message})
    index = 0
    if reply.text:
        yield (
            "content_block_start",
            _dumps(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                }
            ),
        )
        yield "ping", _dumps({"type": "ping"})
        for piece in split_text(reply.text):
            yield (
                "content_block_delta",
                _dumps(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    }
                ),
            )
        yield "content_block_stop", _dumps({"type": "content_block_stop", "index": index})
        index += 1
    if reply.stream_error:
        error = {
            "type": reply.stream_error,
            "message": f"scripted stream failure ({reply.stream_error})",
        }
        yield "error", _dumps({"type": "error", "error": error})
        return
    for call in reply.calls:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        yield (
            "content_block_start",
            _dumps({"type": "content_block_start", "index": index, "content_block": block}),
        )
        for piece in split_arguments(call.arguments):
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield (
                "content_block_delta",
                _dumps({"type": "content_block_delta", "index": index, "delta": delta}),
            )
        yield "content_block_stop", _dumps({"type": "content_block_stop", "index": index})
        index += 1
    yield (
        "message_delta",
        _dumps(
            {
                "type": "message_delta",
                "delta": {"stop_reason": _anthropic_stop(reply), "stop_sequence": None},
                "usage": _anthropic_usage(reply, output=reply.output_tokens),
            }
        ),
    )
    yield "message_stop", _dumps({"type": "message_stop"})


def _anthropic_message(
    fake: ScriptedModelServer, model: str, reply: _Reply, body: Mapping[str, Any]
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for call in reply.calls:
        try:
            value = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            value = {}  # a whole (unstreamed) message can only carry an object
        content.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": value if isinstance(value, dict) else {},
            }
        )
    return {
        "id": fake._new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _anthropic_stop(reply),
        "stop_sequence": None,
        "usage": _anthropic_usage(reply, output=reply.output_tokens),
    }


# --- OpenAI ----------------------------------------------------------------------------


def _openai_usage(reply: _Reply) -> dict[str, Any]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.prompt_tokens + reply.output_tokens,
        "prompt_tokens_details": {"cached_tokens": reply.cache_read},
    }


def _openai_finish(reply: _Reply) -> str:
    return reply.stop_reason or ("tool_calls" if reply.calls else "stop")


def _openai_chunks(
    fake: ScriptedModelServer, model: str, reply: _Reply, include_usage: bool
) -> Iterator[tuple[str | None, str]]:
    ident = fake._new_id("chatcmpl-")
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, str]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        payload = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
        }
        return None, _dumps(payload)

    yield chunk({"role": "assistant", "content": ""})
    for piece in split_text(reply.text):
        yield chunk({"content": piece})
    if reply.stream_error:
        error = {
            "message": f"scripted stream failure ({reply.stream_error})",
            "type": reply.stream_error,
            "code": None,
        }
        yield None, _dumps({"error": error})
        return
    for i, call in enumerate(reply.calls):
        head = {
            "index": i,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        yield chunk({"tool_calls": [head]})
        for piece in split_arguments(call.arguments):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, _openai_finish(reply))
    if include_usage:
        payload = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": _openai_usage(reply),
        }
        yield None, _dumps(payload)
    yield None, "[DONE]"


def _openai_completion(fake: ScriptedModelServer, model: str, reply: _Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.calls
        ]
    return {
        "id": fake._new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _openai_finish(reply),
            }
        ],
        "usage": _openai_usage(reply),
    }


# --- command line ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fakes.model_server",
        description="Serve scripted model answers over the Anthropic and OpenAI HTTP APIs.",
    )
    parser.add_argument(
        "--script", required=True, type=Path, help="JSON file: role -> list of turns"
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port to listen on (default: any free one)"
    )
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between streamed pieces")
    parser.add_argument(
        "--by-history",
        action="store_true",
        help="answer by the conversation's length (a stateless model: for resume trials)",
    )
    args = parser.parse_args(argv)
    try:
        server = ScriptedModelServer.from_file(
            args.script, port=args.port, chunk_delay_s=args.delay, turn_by_history=args.by_history
        )
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    with server:
        print(f"anthropic base URL: {server.url_for('anthropic')}")
        print(f"openai base URL:    {server.url_for('openai')}")
        print("try:")
        print(
            f"  mlra run TASK --model anthropic/claude-sonnet-4-6 --base-url {server.url_for('anthropic')}"
        )
        print(f"  mlra run TASK --model openai/scripted --base-url {server.url_for('openai')}")
        print("serving until killed (Ctrl-C)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
