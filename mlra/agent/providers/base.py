"""The model-provider interface: one neutral conversation format, several providers.

The agent keeps its history as `Message`s; each provider translates them to its
own API (Anthropic Messages, OpenAI chat completions) and back, streams text as
it is written, and reports usage and cost. Retries of 429, 5xx and time-outs are
left to the official SDKs; an HTTP 200 that is no valid answer (a proxy's HTML
page, `{}`, a stream that stops before its end) is retried here the same way,
since the SDKs take it for an answer. What still fails surfaces as
`ProviderError`.

Local models often write their tool calls as text; `ModelSettings.tool_calls`
says whether such text is read as calls (agent/providers/text_calls.py: `auto` reads
it only from servers named by a base URL).
"""

from __future__ import annotations

import abc
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from mlra import events as ev
from mlra.agent.providers.sent_watch import watch_sending
from mlra.events import ServerAbsence
from mlra.tools.registry import ToolSpec

if TYPE_CHECKING:
    from mlra.agent.providers.window_reading import WindowTold

TextCallback = Callable[[str], None]

ToolCallsMode = Literal["native", "text", "auto"]
"""native: only the API's tool calls; text: tools described in the prompt and calls
read from the answer's text; auto: native, and, from a server named by a base URL,
text when an answer has no native call."""
TOOL_CALLS_MODES: tuple[ToolCallsMode, ...] = ("native", "text", "auto")

TextForm = Literal["tool_call", "json_fence", "json"]
"""How a call read from text was written: `<tool_call>...</tool_call>`, a fenced
```json block, or a bare JSON object."""


RetryListener = Callable[[int, int | None], None]
"""Told of each retry the SDK makes: which retry (1 for the first) and the HTTP status
it retries after (None for a failed connection or a time-out)."""


class _RetryWatch:
    """One call's listener, told of each retry once (a failed response and the
    retry sent after it both tell of the same retry)."""

    def __init__(
        self, listener: RetryListener, on_answer: Callable[[int], None] | None = None
    ) -> None:
        self.listener = listener
        self.on_answer = on_answer
        """Told the status of each response to the call's requests (the server is there)."""
        self.told = 0
        self.offset = 0
        """Retries told before the SDK call now under way (answers that were no answer):
        the SDK numbers its retries from 1 in each call, the user sees one count."""

    def tell(self, attempt: int, status: int | None) -> None:
        attempt += self.offset
        if attempt > self.told:
            self.told = attempt
            self.listener(attempt, status)

    def tell_invalid(self) -> None:
        """A provider retries an HTTP 200 that was no answer, outside the SDK."""
        self.told += 1
        self.offset = self.told
        self.listener(self.told, 200)


_RETRY_WATCH: ContextVar[_RetryWatch | None] = ContextVar("mlra_retry_watch", default=None)


@contextmanager
def retries_told_to(
    listener: RetryListener, on_answer: Callable[[int], None] | None = None
) -> Iterator[None]:
    """Tell `listener` of the retries the SDK makes in the `generate` calls made
    inside this block: the SDKs retry within a call, and this is how a retry
    becomes an event the console shows. `on_answer` is told each response's status."""
    token = _RETRY_WATCH.set(_RetryWatch(listener, on_answer))
    try:
        yield
    finally:
        _RETRY_WATCH.reset(token)


def retries_made() -> int | None:
    """The retries told so far in the `retries_told_to` block now open (None outside
    one): a failure says how many retries were made, not how many were allowed."""
    watch = _RETRY_WATCH.get()
    return None if watch is None else watch.told


def tell_invalid_retry() -> None:
    """Tell the listener of `retries_told_to` that the provider retries an HTTP 200 that
    was no answer (status 200): a retry the SDK does not make, so the hooks below never
    see it, and the user should see it all the same."""
    watch = _RETRY_WATCH.get()
    if watch is not None:
        watch.tell_invalid()


FirstPieceListener = Callable[[float], None]
"""Told when a streamed answer's first piece (text or a tool call's) arrives, with the
seconds since its request was sent: until then the server was reading the prompt."""

_FIRST_PIECE: ContextVar[FirstPieceListener | None] = ContextVar("mlra_first_piece", default=None)


@contextmanager
def first_piece_told_to(listener: FirstPieceListener) -> Iterator[None]:
    """Tell `listener` when the answer of a `generate` call made inside this block begins
    to arrive: a local server's prompt processing can take longer than the answer, and
    the user should see which of the two the run waits on."""
    token = _FIRST_PIECE.set(listener)
    try:
        yield
    finally:
        _FIRST_PIECE.reset(token)


def tell_first_piece(seconds: float) -> None:
    """A provider's stream brought its answer's first piece, `seconds` after the request."""
    listener = _FIRST_PIECE.get()
    if listener is not None:
        listener(seconds)


RETRYABLE = frozenset({408, 409, 429})
"""The statuses, besides 5xx, that both SDKs retry."""


def retry_hooks(max_retries: int) -> dict[str, list[Callable[[Any], Awaitable[None]]]]:
    """httpx event hooks that tell the listener of `retries_told_to` of the SDK's retries.

    A failed response is told at once (the SDK then waits before it retries, and
    that wait is what the user should see); a retry after no response at all (a
    time-out, a refused connection) is told when it is sent. The SDKs number their
    attempts in the `x-stainless-retry-count` header, so the count is theirs.
    """

    def taken(request: Any) -> int:
        try:
            return int(request.headers.get("x-stainless-retry-count", "0"))
        except ValueError:
            return 0

    async def on_request(request: Any) -> None:
        watch_sending(request)
        watch = _RETRY_WATCH.get()
        retry = taken(request)
        if watch is not None and retry > 0 and request.method == "POST":
            watch.tell(retry, None)  # a no-op when the failed response told it already

    async def on_response(response: Any) -> None:
        watch = _RETRY_WATCH.get()
        status = response.status_code
        if watch is None or response.request.method != "POST":
            return  # a probe of the server (GET models), sent without retries
        if watch.on_answer is not None:
            watch.on_answer(status)
        if not (status in RETRYABLE or status >= 500):
            return
        if response.headers.get("x-should-retry") == "false":
            return
        retry = taken(response.request) + 1
        if retry <= max_retries:
            watch.tell(retry, status)

    return {"request": [on_request], "response": [on_response]}


class ConfigError(Exception):
    """Bad user input about models (unknown provider, missing key): exit status 2."""


class ProviderError(Exception):
    """The provider kept failing after the SDK's own retries."""


class ServerGone(ProviderError):
    """The server is not there for the call (`cause`): the connection was lost
    mid-answer, nothing answers at its address, it is still loading its model, or it
    answers that it is not ready (`status`: 502 or 504 from a proxy whose server is
    down, 503 from a server starting). A local server that reloads its model or is
    restarted comes back: the run waits for it (agent/loop/server_wait.py).
    `waited_s`: set where the run's wait for it gave up, how long it waited. `retries`:
    the SDK's retries within the call, which `message` says, and `plain` is `message`
    without them: a wait that gives up counts every try once, in its own words."""

    def __init__(
        self,
        message: str,
        *,
        cause: ServerAbsence,
        status: int | None = None,
        waited_s: float | None = None,
        retries: int | None = None,
        plain: str | None = None,
    ) -> None:
        super().__init__(message)
        self.cause: ServerAbsence = cause
        self.status = status
        self.waited_s = waited_s
        self.retries = retries or 0
        self.plain = message if plain is None else plain


CONTEXT_OVERFLOW = (
    "context length",
    "maximum context",
    "context window",
    "exceeds the available context size",
    "prompt is too long",
    "too many tokens",
)
"""What servers say when a request does not fit the model's window: OpenAI and vLLM
("maximum context length is"), llama.cpp ("exceeds the available context size"),
Anthropic ("prompt is too long")."""


_STATED_WINDOW = re.compile(
    r"(?:maximum context length is|context size \(|n_ctx\W{0,3}|context window of)\s*(\d{3,})",
    re.IGNORECASE,
)


def stated_window(exc: BaseException) -> int | None:
    """The window a server's "too long" refusal states, where it states one (vLLM and
    OpenAI: "maximum context length is 8192 tokens", llama.cpp: "context size (8192
    tokens)"): the model's real window, when it is smaller than the one assumed."""
    found = _STATED_WINDOW.search(str(exc))
    return int(found.group(1)) if found else None


def is_context_overflow(exc: BaseException) -> bool:
    """Whether a provider failure says the request did not fit the context window: such
    a failure is mended by summarizing, not by ending the run."""
    text = str(exc).lower()
    return any(phrase in text for phrase in CONTEXT_OVERFLOW)


class ToolCallRequest(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any] | None = None
    raw_arguments: str = ""
    parse_error: str | None = None
    """Why `raw_arguments` could not be read as a JSON object, if it could not."""
    from_text: TextForm | None = None
    """Set when the model wrote this call as text, not as a native call: recorded in the
    `model_call` so a resumed run rebuilds it, and the history shows it to the model
    again as text in the form it used."""


class Message(BaseModel):
    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False


class Usage(BaseModel):
    input_tokens: int = 0
    """All prompt tokens, cached or not."""
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    estimated: bool = False
    """The server sent no counts: these are estimated from the characters sent and received."""


def estimated_usage(prompt_chars: int, produced_chars: int) -> Usage:
    """Counts for a call the server did not count (no usage sent, or cut off midway)."""
    return Usage(
        input_tokens=prompt_chars // 4 + 1, output_tokens=produced_chars // 4 + 1, estimated=True
    )


class ModelSettings(BaseModel):
    """What the user set about the model itself; a setting given wins over what the
    server or the model table says."""

    context_window: int | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    """Sent to providers whose API takes one (OpenAI-compatible servers)."""
    tool_calls: ToolCallsMode = "auto"


class InvalidResponse(Exception):
    """An HTTP 200 that is no valid answer: retried like a 5xx, then a ProviderError."""

    def __init__(self, message: str, *, cut_stream: bool = False) -> None:
        super().__init__(message)
        self.cut_stream = cut_stream
        """The stream ended early or empty: some servers answer so a request longer than
        their window (llama-cpp-python), which a retry unchanged would only repeat."""


class ModelResponse(BaseModel):
    text: str = ""
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str | None = None
    latency_s: float = 0.0
    cost_usd: float = 0.0
    first_token_s: float | None = None
    """Seconds from the request to the answer's first piece, where the answer was streamed:
    the time the server took to read the prompt (a local server's prompt processing)."""
    paused_s: float | None = None
    """Set by an answer from a record (a replay): the pause its call recorded."""


class ModelProvider(abc.ABC):
    """One model behind one API. `name` is how the user named it (`anthropic/...`)."""

    name: str
    context_window: int = 200_000
    max_output_tokens: int = 8192
    priced: bool = True
    """False for a model with no known price: its calls cost 0, so a cost budget cannot hold."""
    context_window_from: str = "model table"
    """Where `context_window` came from: "setting", "server", "model table" or "default"."""
    base_url: str | None = None
    """The user's own server (`--base-url`); None for a vendor's API, and for a replay."""
    max_retries: int = 0
    """How often its SDK retries a failed request; 0 where none is sent (a replay)."""
    timeout_s: float = 0.0
    """Its SDK's read time-out in seconds; 0 where none is sent (a replay)."""

    @abc.abstractmethod
    async def generate(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        on_text: TextCallback | None = None,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        """One model turn, streamed: `on_text` gets text pieces as they arrive."""

    def expect(
        self, request_sha: str, messages: list[Message], replacements: list[tuple[str, str]]
    ) -> None:
        """Told each request's fingerprint before it is sent (agent/loop/fingerprint.py):
        the replay provider finds there where a re-run departs from its recording."""

    def recorded_result(self, call_id: str) -> ev.ToolResult | None:
        """The recorded result of a call, where this provider plays a recording back: a
        replay cuts a result for the log's budget as its recording did, not as its own
        log's size would (agent/record/log_budget.py). None: no recording."""
        return None

    def recorded_decision(self, call: ToolCallRequest) -> ev.Control | None:
        """The user's edit or rejection of a call at its breakpoint in the recording this
        provider plays: a replay runs the call as it ran then. None: no recording."""
        return None

    def recorded_refusal(self, call: ToolCallRequest) -> str | None:
        """Its tool's refusal of this call's arguments in the recording this provider
        plays, refused so again though the tool may read more now. None: none there."""
        return None

    def answered_from_log(self) -> None:
        """A resumed run's catch-up answered one model call from the run's own log: a
        provider that plays a recording back moves past the recorded answer it stands for,
        or a resumed replay answered its first live call with the recording's first."""

    async def discover_limits(self) -> None:
        """Ask the server for the model's context window where it tells it (local servers);
        called before the run records its limits, and again harmlessly on first use. Raises
        ServerUnreachable (agent/providers/server_window.py) where the user's base URL
        cannot be connected to at all; the vendors' own APIs are not asked."""

    def cost_of(self, usage: Usage) -> float:
        """USD for `usage` at this model's price (0 when unpriced)."""
        return 0.0

    def describe_tools_in_prompt(self) -> bool:
        """Send the tools described in the system prompt from now on, calls read from the
        answer's text (agent/loop/tool_call_fallback.py: `auto` where a model never calls a
        tool it was sent natively). False where nothing changes: the user chose native
        or text calls, tools go in the prompt already, the model is the vendor's own API
        (no base URL: its servers do not drop tools), or this API has no other way."""
        return False

    def reads_text_calls(self) -> bool:
        """Whether an answer with no native call has its text read for calls
        (agent/providers/text_calls.py); False for providers that call tools natively."""
        return False

    def tools_in_prompt(self) -> bool:
        """Whether the tools go described in the prompt now (`--tool-calls text`, or `auto`
        after its fall-back): the model was told the text format, so text that was
        meant as a call and is none is worth telling it."""
        return False

    def tells_sending(self) -> bool:
        """Whether its calls tell `request_sent_told_to` (agent/providers/sent_watch.py)
        when their request reached the server: only then is a call cut off before that
        counted as costing nothing."""
        return False

    def take_notices(self) -> list[str]:
        """What the provider changed about its requests since it was last asked (a server
        that refused native tools): the run logs each as a `notice`, so no adaptation
        is silent."""
        return []

    def take_window_told(self) -> WindowTold | None:
        """A window the server told after the run began (it was loading its model
        before): the run logs it as `context_window_learned` and goes by it."""
        return None

    def for_attempt(self, attempt: str) -> ModelProvider:
        """The provider a search's attempt `attempt` runs with (agent/agents/attempt_runs.py):
        this one, shared, for a model; a replay's answers the attempt's own recording."""
        return self

    def recorded_time_limit(self) -> float | None:
        """The time limit of the run a replay plays back (its prompts state it, so a
        replay's attempt runs under it); None for a model."""
        return None

    def recorded_deadline(self) -> float | None:
        """The longest the run a replay plays back could run: its time limit as a later
        attempt's start raised it (a search's attempt), else None. Its prompts state the
        limit it began with, so a replay runs under that, to this deadline."""
        return None

    async def aclose(self) -> None:
        """Release HTTP connections."""
