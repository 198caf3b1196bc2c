"""The words a model call's events are said in, one line each: its speed, a retry's
cause, a context window learned from the server. Shared by every display, as
console/text/event_lines.py's lines are; what the server wrote is never printed here.
"""

from __future__ import annotations

from mlra import events as ev
from mlra.durations import format_duration


def retry_cause(
    status: int | None, retry: ev.ModelRetry | None = None, *, waiting: bool = True
) -> str:
    """What a `model_retry` retries after: an HTTP status, a failed connection, or (200)
    an answer that was none (an HTML page, a stream that broke off); for a server that
    went away, why and, while it waits (`waiting`), how long, its clock paused."""
    if retry is not None and retry.cause is not None:
        why = {
            "connection_lost": "the connection was lost mid-answer",
            "not_answering": "the server is not answering",
            "loading_model": "the server is still loading its model",
            "not_ready": f"the server answered HTTP {retry.status}, not ready",
        }[retry.cause]
        if not waiting:  # the wait is over: the call is asked again
            return f"after {why}"
        return f"after {why}; waiting {retry.wait_s or 0:g}s, clock paused"
    if status == 200:
        return "after an invalid answer"
    return f"after {status}" if status else "after a failed connection"


def learned_window_line(e: ev.ContextWindowLearned) -> str:
    """A window the server stated: where it is below what the agents need, that is said
    with what can be done, never the advice to start from it (`mlra run` refuses it)."""
    source = e.told_by or "the server's answer"
    line = (
        f"the model's window is taken as {e.context_window:,} tokens from {source} "
        f"(was {e.assumed or 0:,})"
    )
    if e.smallest is not None and e.context_window < e.smallest:
        return (
            f"{line}: below the smallest window mlra's agents work in (about {e.smallest:,} "
            "tokens); start the server with a larger context (llama.cpp --ctx-size, Ollama "
            "num_ctx) or run with --tools none"
        )
    return f"{line}; pass --context-window {e.context_window} to start from it"


def tokens_per_second(rate: float) -> str:
    """A writing speed: tenths below ten a second, where a small local model on a busy CPU
    writing half a token a second read "~0 tok/s", as if it had stopped."""
    return f"{rate:.1f} tok/s" if rate < 9.95 else f"{rate:.0f} tok/s"


def short_seconds(seconds: float) -> str:
    """Tenths of a second under ten seconds, where a rounded "3s" would hide what a
    cache saved."""
    return f"{seconds:.1f}s" if seconds < 10 else format_duration(seconds)


def model_speed(e: ev.ModelCall) -> str:
    """A model call's time, told apart: how long the server read the prompt and how fast it
    wrote the answer ("prompt read in 3.1s, 120 tokens at 38 tok/s"); counts the server did
    not send are estimates, marked "~". Both are the server's own, in wall time, a pause
    of the run's in them: the server reads and writes on through it (over the unpaused
    time alone, 46 tokens written across a pause read "92000 tok/s")."""
    mark = "~" if e.tokens_estimated else ""
    parts = []
    writing = e.latency_s
    if e.first_token_s is not None:
        parts.append(f"prompt read in {e.first_token_s:.1f}s")
        writing -= e.first_token_s
    tokens = f"{mark}{e.output_tokens:,} tokens"
    if writing > 0 and e.output_tokens:
        tokens += f" at {mark}{tokens_per_second(e.output_tokens / writing)}"
    parts.append(tokens)
    return ", ".join(parts)


def model_call_line(e: ev.ModelCall) -> str:
    """`worker answered in 3.2s: prompt read in 1.1s, ~120 tokens at ~38 tok/s`, its time
    by the run clock, as the status line counted it while it ran: the run's pause while
    the server answered is said apart (`answered in 1.0s (plus 1m20s paused)`), where a
    1-second answer paused for 80 s read "answered in 81.0s"."""
    what = "" if e.purpose == "turn" else f"'s {e.purpose}"
    took = f"{max(0.0, e.latency_s - e.paused_s):.1f}s"
    if e.paused_s >= 0.05:  # under that, "plus 0.0s paused"
        took += f" (plus {short_seconds(e.paused_s)} paused)"
    return f"{e.agent}{what} answered in {took}: {model_speed(e)}"


def retry_line(e: ev.ModelRetry) -> str:
    of = f"/{e.max_retries}" if e.max_retries else ""
    return f"{e.agent} model retry {e.attempt}{of} {retry_cause(e.status, e)}"
