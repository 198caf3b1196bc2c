"""Whether a model call's request reached the server, told by the HTTP client itself.

A call stopped while the SDK still retried a name that does not resolve booked its
prompt's estimated tokens and their price all the same (`~2692 in`, $0.008), as a call
cut off mid-answer rightly does: only a request the server received can be billed.
httpcore tells each step of sending through the request's `trace` extension; the
providers' request hook (base.py `retry_hooks`) sets it on each model call's request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_SENT: ContextVar[Callable[[], None] | None] = ContextVar("mlra_request_sent", default=None)


@contextmanager
def request_sent_told_to(listener: Callable[[], None]) -> Iterator[None]:
    """Tell `listener` when a `generate` call made inside this block has sent a request
    whole to the server: a call cut off before that never reached it, and neither used
    nor is billed any tokens."""
    token = _SENT.set(listener)
    try:
        yield
    finally:
        _SENT.reset(token)


def watch_sending(request: Any) -> None:
    """Have httpcore tell the listener of `request_sent_told_to`, if any, once the model
    call's request `request` (an httpx request, about to be sent) was sent whole."""
    listener = _SENT.get()
    if listener is not None and request.method == "POST":
        request.extensions["trace"] = _sent_trace(listener)


def _sent_trace(listener: Callable[[], None]) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
    """httpcore's `trace` extension, telling `listener` once a request's body was sent
    (a proxy's CONNECT, which shares the request's extensions, is not the server)."""

    async def trace(name: str, info: dict[str, Any]) -> None:
        method = getattr(info.get("request"), "method", b"")
        if name.endswith("send_request_body.complete") and method != b"CONNECT":
            listener()

    return trace
