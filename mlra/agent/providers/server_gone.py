"""What a lost connection was, read the same way for every provider.

Both SDKs (OpenAI's and Anthropic's) wrap a failed connection in their own
`APIConnectionError`, raised from the transport's exception; a stream that breaks off
while it is read surfaces the transport's exception itself. Either way the cause is
one of two things a user can act on: the connection was lost while the answer came
(a server killed or restarted mid-answer), or nothing answers at the address at all.
Both are a `ServerGone`, which the run waits out (agent/loop/server_wait.py); a
time-out is neither (the server is there, and slow) and stays the provider's failure.
"""

from __future__ import annotations

import httpx2

from mlra.agent.providers.base import ProviderError, ServerGone

LOST_MID_ANSWER = (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError)
"""The transport's ways of saying a connection that was open is gone."""
NOT_READY = (502, 503, 504)
"""A server that is there and not ready: llama-server answers 503 "Loading model" while
it loads after a restart, and a proxy in front of a server that is down answers 502 or
504 (what a real llama-server, killed behind a logging proxy, gave)."""


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


def server_gone(
    name: str, base_url: str | None, exc: BaseException, retries: int | None
) -> ServerGone:
    """What a failed connection was: one lost while the answer came, or no server
    answering at all, with the retries the SDK made (never "gave up after 4 retries"
    when none were)."""
    cause = transport_cause(exc)
    after = f" (after {retries} {'retry' if retries == 1 else 'retries'})" if retries else ""
    where = base_url or "the API"
    detail = f"{type(cause).__name__}: {one_line(str(cause), 120)}"
    if isinstance(cause, LOST_MID_ANSWER):
        return ServerGone(
            f"{name}: the connection to {where} was lost mid-answer ({detail}){after}",
            mid_answer=True,
        )
    return ServerGone(
        f"{name}: cannot connect to {where}: the server is not answering ({detail}){after}",
        mid_answer=False,
    )


def not_ready(base_url: str | None, exc: BaseException, described: str) -> ProviderError:
    """An HTTP error the SDK gave up on: past its retries, a server at `--base-url` that
    says it is not ready is one that went away for a while, waited out as a refused
    connection is; anything else (and any status from a hosted API) stays the
    provider's failure."""
    status = getattr(exc, "status_code", None)
    if base_url is None or status not in NOT_READY:
        return ProviderError(described)
    return ServerGone(
        f"{described}; the server at {base_url} is not ready (loading its model, or down "
        "behind a proxy)",
        mid_answer=False,
        status=status,
    )
