"""What a lost connection was, read the same way for every provider.

Both SDKs (OpenAI's and Anthropic's) wrap a failed connection in their own
`APIConnectionError`, raised from the transport's exception; a stream that breaks off
while it is read surfaces the transport's exception itself. Either way the cause is
one of two things a user can act on: the connection was lost while the answer came
(a server killed or restarted mid-answer), or nothing answers at the address at all.
A third is a server that answers but is not there yet: llama-server, restarted, answers
every request HTTP 503 `{"error": {"code": 503, "message": "Loading model", "type":
"unavailable_error"}}` until its model is loaded (seconds to minutes), which the SDKs'
own retries outlast in about 8 s; and a server at `--base-url` behind a proxy, down,
answers 502 or 504 (what a real llama-server, killed behind a logging proxy, gave). All
are a `ServerGone`, which the run waits out (agent/loop/server_wait.py); a time-out is
none of them (the server is there, and slow) and stays the provider's failure, as does
a hosted API's 5xx.
"""

from __future__ import annotations

import re
from typing import Any

import httpx2

from mlra.agent.providers.base import ProviderError, ServerGone, retries_made

LOST_MID_ANSWER = (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError)
"""The transport's ways of saying a connection that was open is gone."""
NOT_READY = (502, 503, 504)
"""What a server at `--base-url` that is there and not ready answers past the SDK's
retries: a proxy in front of a server that is down (502, 504), a server starting (503)."""


GAVE_UP_AFTER = re.compile(r" \(gave up after \d+ retr(?:y|ies)\)")
"""How a provider's own description of a failure says the SDK's retries."""


def one_line(text: str, limit: int = 300) -> str:
    """A server's words as one line of at most `limit` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def transport_cause(exc: BaseException) -> BaseException:
    """The transport's exception behind an SDK's connection error (the SDKs raise theirs
    `from` it), or `exc` itself where it is the transport's."""
    if isinstance(exc, httpx2.HTTPError):
        return exc
    return exc.__cause__ or exc


def _after(retries: int | None) -> str:
    return f" (after {retries} {'retry' if retries == 1 else 'retries'})" if retries else ""


def server_gone(
    name: str, base_url: str | None, exc: BaseException, retries: int | None
) -> ServerGone:
    """What a failed connection was: one lost while the answer came, or no server
    answering at all, with the retries the SDK made (never "gave up after 4 retries"
    when none were)."""
    cause = transport_cause(exc)
    after = _after(retries)
    where = base_url or "the API"
    detail = f"{type(cause).__name__}: {one_line(str(cause), 120)}"
    if isinstance(cause, LOST_MID_ANSWER):
        plain = f"{name}: the connection to {where} was lost mid-answer ({detail})"
        return ServerGone(plain + after, cause="connection_lost", retries=retries, plain=plain)
    plain = f"{name}: cannot connect to {where}: the server is not answering ({detail})"
    return ServerGone(plain + after, cause="not_answering", retries=retries, plain=plain)


LOADING_MODEL = "loading model"
"""llama-server's words (its `message`, any case) while it loads its model."""


def _server_message(body: Any) -> str:
    """The `message` of an error body as OpenAI, Anthropic and llama-server shape it."""
    inner = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(inner, dict):
        message = inner.get("message")
        return message if isinstance(message, str) else ""
    return inner if isinstance(inner, str) else ""


def failed_answer(
    name: str, base_url: str | None, exc: BaseException, described: str
) -> ProviderError:
    """An SDK's error answer as the run takes it: a server still loading its model
    (llama-server's 503 "Loading model"), or a server at `--base-url` answering 502, 503
    or 504 past the SDK's retries, is a `ServerGone` the run waits out; any other is the
    provider's failure, in the words `described` gives it."""
    status = getattr(exc, "status_code", None)
    said = _server_message(getattr(exc, "body", None))
    retries = retries_made()
    if status == 503 and LOADING_MODEL in said.lower():
        plain = (
            f'{name}: {base_url or "the API"} answered HTTP 503 "{one_line(said, 80)}": the '
            "server is still loading its model"
        )
        return ServerGone(
            plain + _after(retries),
            cause="loading_model",
            status=status,
            retries=retries,
            plain=plain,
        )
    if base_url is not None and status in NOT_READY:
        why = f"; the server at {base_url} is not ready (loading its model, or down behind a proxy)"
        return ServerGone(
            described + why,
            cause="not_ready",
            status=status,
            retries=retries,
            plain=GAVE_UP_AFTER.sub("", described) + why,
        )
    return ProviderError(described)
