"""`arxiv_search`, and what both arXiv tools share (`arxiv_read` is in tools/arxiv_read.py):
find papers on arXiv and read them in parts.

They run outside the agent's sandbox (which may have no network), confined as the
agent is (tools/fetch/): every request is https to an allowed host (arXiv's own
unless the user set other endpoints), pinned to a checked public address, made in a
bubblewrap box of its own with no redirect followed unchecked; the Atom answer is
parsed and a PDF's text extracted in such a box too, so neither a hostile answer nor
a PDF the agent left in the workspace is ever parsed by mlra itself. All requests
share one rate limiter, because arXiv asks every client for at most one request
every three seconds, whichever agent makes it. PDFs land in the workspace under
papers/ and their text is read a range of pages at a time, so a long paper does not
flood the context. The endpoints are configurable (a loopback server in the tests):
MLRA_ARXIV_API_URL, MLRA_ARXIV_PDF_URL, MLRA_ARXIV_INTERVAL_S,
MLRA_ARXIV_TIMEOUT_S, MLRA_ARXIV_BACKOFF_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlencode, urlsplit

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.fetch import landing
from mlra.tools.fetch.box import FetchBox, confinement, root_outside_of
from mlra.tools.fetch.https import Got, https_get
from mlra.tools.fetch.policy import FetchPolicy
from mlra.tools.fetched import Fetched
from mlra.tools.files import plural
from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import SandboxError

DEFAULT_API_URL = "https://export.arxiv.org/api/query"
DEFAULT_PDF_URL = "https://arxiv.org/pdf"
DEFAULT_INTERVAL_S = 3.0
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_BACKOFF_S = 3.0
DEFAULT_RETRIES = 2
MAX_FEED_BYTES = 8 * 1024 * 1024
PARSE_TIMEOUT_S = 120.0
ABSTRACT_CHARS = 700
FIELD_PREFIX = re.compile(r"\b(ti|au|abs|co|jr|cat|rn|id|all):|\b(AND|OR|ANDNOT)\b")
RETRY_STATUS = {429, 500, 502, 503, 504}

T = TypeVar("T")


# --- the shared limiter ---------------------------------------------------------------------


class RateLimiter:
    """Lets requests to one service through one at a time, at least `interval_s` apart
    as the service sees them.

    A request starts no sooner than `interval_s` after the one before ended (the arxiv
    package's own client waits so): what happens between entering the slot and the
    request reaching the server (a fetch box starting, more on a busy machine) varies,
    and only the end of the previous request bounds when that one arrived. Slots are
    reserved without awaiting, so concurrent callers queue in order. It holds no
    asyncio primitive, so one instance serves every event loop in the process.
    """

    POLL_S = 0.01
    """How often a caller waiting for the request in flight looks again."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._next = 0.0
        self._entered = -interval_s
        self._ended = -interval_s
        self._busy = False

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        start = max(time.monotonic(), self._next)
        self._next = start + self.interval_s
        # The reserved start, never while another request is out, and never sooner than
        # one interval after the request before entered and ended: on a busy machine a
        # caller can wake late, and the next one must not be let in closer to it.
        while True:
            earliest = max(start, self._entered + self.interval_s, self._ended + self.interval_s)
            wait = self.POLL_S if self._busy else earliest - time.monotonic()
            if wait <= 0:
                break
            await asyncio.sleep(wait)
        self._busy = True
        self._entered = time.monotonic()
        try:
            yield
        finally:
            self._busy = False
            self._ended = time.monotonic()
            self._next = max(self._next, self._ended + self.interval_s)


_shared: RateLimiter | None = None


def arxiv_limiter() -> RateLimiter:
    """The process's one limiter for arXiv, made on first use from the environment."""
    global _shared
    if _shared is None:
        _shared = RateLimiter(float(os.environ.get("MLRA_ARXIV_INTERVAL_S", DEFAULT_INTERVAL_S)))
    return _shared


@dataclass
class ArxivConfig:
    api_url: str
    pdf_url: str
    timeout_s: float
    backoff_s: float
    retries: int

    @classmethod
    def from_env(cls, **override: Any) -> ArxivConfig:
        env = os.environ
        values: dict[str, Any] = {
            "api_url": env.get("MLRA_ARXIV_API_URL", DEFAULT_API_URL),
            "pdf_url": env.get("MLRA_ARXIV_PDF_URL", DEFAULT_PDF_URL),
            "timeout_s": float(env.get("MLRA_ARXIV_TIMEOUT_S", DEFAULT_TIMEOUT_S)),
            "backoff_s": float(env.get("MLRA_ARXIV_BACKOFF_S", DEFAULT_BACKOFF_S)),
            "retries": int(env.get("MLRA_ARXIV_RETRIES", DEFAULT_RETRIES)),
        }
        values.update({k: v for k, v in override.items() if v is not None})
        values["api_url"] = values["api_url"].rstrip("?")
        values["pdf_url"] = values["pdf_url"].rstrip("/")
        return cls(**values)


class ArxivUnavailable(Exception):
    """arXiv could not be reached or kept failing; the message is for the agent."""


class _Retryable(Exception):
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class ArxivTool:
    def __init__(
        self,
        *,
        policy: FetchPolicy | None = None,
        limiter: RateLimiter | None = None,
        api_url: str | None = None,
        pdf_url: str | None = None,
        timeout_s: float | None = None,
        backoff_s: float | None = None,
        retries: int | None = None,
    ) -> None:
        self.limiter = limiter or arxiv_limiter()
        self.config = ArxivConfig.from_env(
            api_url=api_url,
            pdf_url=pdf_url,
            timeout_s=timeout_s,
            backoff_s=backoff_s,
            retries=retries,
        )
        # The endpoints are the user's to set (environment, arguments): allowed as hosts
        # the user named, beside the run's own allow-list.
        endpoints = [
            urlsplit(url).netloc
            for url in (self.config.api_url, self.config.pdf_url)
            if url not in (DEFAULT_API_URL, DEFAULT_PDF_URL) and urlsplit(url).netloc
        ]
        settings = policy.settings if policy is not None else None
        self.policy = FetchPolicy(settings, extra_hosts=endpoints)

    def _box(self, folder: Path, ctx: ToolContext, *, file_limit: int | None = None) -> FetchBox:
        ca = self.policy.ca_bundle
        return FetchBox(
            folder,
            bwrap=confinement(allow_unconfined=ctx.sandbox.isolation == "none"),
            hide=ctx.sandbox.spec.hide_paths,
            read_only=[ca] if ca else [],
            file_limit_bytes=file_limit,
            on_root_outside=root_outside_of(ctx, "a fetch step (an arXiv read)"),
        )

    async def _request(self, fn: Callable[[], Awaitable[T]], what: str, ctx: ToolContext) -> T:
        """One arXiv request, in the limiter's turn, retried with backoff."""
        deadline = time.monotonic() + ctx.timeout(None)
        attempt = 0
        while True:
            async with self.limiter.slot():
                try:
                    return await fn()
                except _Retryable as exc:
                    problem = exc.what
            wait = self.config.backoff_s * 2**attempt
            if attempt >= self.config.retries or time.monotonic() + wait >= deadline:
                tries = plural(attempt + 1, "try", "tries")
                raise ArxivUnavailable(
                    f"arXiv did not answer {what}: {problem} (after {tries}). arXiv may be down "
                    "or rate-limiting; try again in a minute, or go on without it"
                )
            attempt += 1
            await asyncio.sleep(wait)

    def _judge(self, got: Got, what: str) -> None:
        """Raise for a GET that did not bring a 200: retryable or said to the agent."""
        if got.error == "timeout":
            raise _Retryable(f"no answer within {self.config.timeout_s:g} s")
        if got.error in ("connect", "protocol", "runner"):
            raise _Retryable("could not connect")
        if got.error == "tls":
            raise SandboxError(
                f"the TLS certificate of {got.target.host} could not be verified: {got.detail}"
            )
        if got.status in RETRY_STATUS:
            raise _Retryable(f"HTTP {got.status}")
        if got.error == "too_large":
            raise SandboxError(f"{what} is larger than mlra takes; not downloaded")
        if got.status != 200:
            raise SandboxError(f"arXiv answered HTTP {got.status} for {what}")


# --- arxiv_search ---------------------------------------------------------------------------


Sort = Literal["relevance", "submitted", "updated"]
SORTS = {"relevance": "relevance", "submitted": "submittedDate", "updated": "lastUpdatedDate"}


class ArxivSearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        min_length=1,
        description="Words to search for, or arXiv query syntax (ti:, au:, abs:, cat:, AND, "
        'OR), e.g. "low-rank adaptation" or "ti:quantization AND cat:cs.LG".',
    )
    max_results: int = Field(default=10, ge=1, le=50, description="How many papers (1-50).")
    sort: Sort = Field(
        default="relevance",
        description="relevance, submitted (newest first) or updated (recently revised first).",
    )


class ArxivSearch(ArxivTool, Tool[ArxivSearchArgs]):
    name = "arxiv_search"
    description = (
        "Search arXiv for papers. Returns for each paper its id, title, authors, date, "
        "categories and abstract. Read a paper with arxiv_read(id)."
    )
    Args = ArxivSearchArgs

    async def run(self, args: ArxivSearchArgs, ctx: ToolContext) -> ToolOutcome:
        query = search_query(args.query)
        url = f"{self.config.api_url}?" + urlencode(
            {
                "search_query": query,
                "sortBy": SORTS[args.sort],
                "sortOrder": "descending",
                "start": 0,
                "max_results": args.max_results,
            }
        )
        self.policy.check(url, what="arXiv's search endpoint")
        try:
            papers = await self._request(lambda: self._search(url, ctx), "the search", ctx)
        except ArxivUnavailable as exc:
            raise SandboxError(str(exc)) from None
        papers = papers[: args.max_results]
        fetched = Fetched(kind="arxiv_search", source=url)
        data = {
            "query": query,
            "papers": [paper_record(p) for p in papers],
            "fetched": [fetched.record()],
        }
        if not papers:
            return ToolOutcome(
                output=f"No arXiv papers match {args.query!r}. Try fewer or other words.",
                data=data,
            )
        head = (
            f"[arXiv search {args.query!r}: {plural(len(papers), 'paper')}, sorted by {args.sort}]"
        )
        body = "\n".join(format_paper(i, p) for i, p in enumerate(papers, start=1))
        return ToolOutcome(output=f"{head}\n{body}", data=data)

    async def _search(self, url: str, ctx: ToolContext) -> list[dict[str, Any]]:
        """The search's papers: fetched and parsed in a box of their own."""
        staging = landing.staging_dir(ctx.sandbox.workspace)
        try:
            box = self._box(staging, ctx, file_limit=MAX_FEED_BYTES)
            got = await https_get(
                self.policy,
                box,
                url,
                out="feed.xml",
                max_bytes=MAX_FEED_BYTES,
                timeout_s=self.config.timeout_s,
                what="arXiv's search",
            )
            self._judge(got, "the search")
            result = await box.run(box.runner("arxiv-feed", "feed.xml"), timeout_s=PARSE_TIMEOUT_S)
            answer = runner_answer(result.stdout)
            if "error" in answer or not isinstance(answer.get("papers"), list):
                raise SandboxError(
                    f"arXiv's answer could not be read: {answer.get('error', 'no papers')}"
                )
            return [p for p in answer["papers"] if isinstance(p, dict)]
        finally:
            await asyncio.to_thread(landing.remove, staging)


def runner_answer(stdout: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(stdout)
    except ValueError:
        return {"error": "the reader gave no answer"}
    return answer if isinstance(answer, dict) else {"error": "the reader gave no answer"}


def search_query(text: str) -> str:
    """Plain words become an AND of all-field terms; arXiv syntax is passed as written."""
    text = " ".join(text.split())
    if FIELD_PREFIX.search(text) or '"' in text:
        return text
    words = [w for w in re.split(r"[\s]+", text) if w]
    return " AND ".join(f"all:{w}" for w in words)


def paper_record(paper: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": str(paper.get("id", "")),
        "title": str(paper.get("title", "")),
        "authors": [str(a) for a in paper.get("authors") or []],
        "published": str(paper.get("published", "")),
        "categories": [str(c) for c in paper.get("categories") or []],
    }


def format_paper(n: int, paper: dict[str, Any]) -> str:
    record = paper_record(paper)
    names = record["authors"]
    authors = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    abstract = " ".join(str(paper.get("summary", "")).split())
    if len(abstract) > ABSTRACT_CHARS:
        abstract = abstract[:ABSTRACT_CHARS].rsplit(" ", 1)[0] + " …"
    cats = ", ".join(record["categories"][:4])
    return (
        f"{n}. {record['id']}  {record['title']}\n"
        f"   {authors} · {record['published']} · {cats}\n"
        f"   {abstract}"
    )
