"""`arxiv_search` and `arxiv_read`: find papers on arXiv and read them in parts.

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
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlencode, urlsplit

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.fetch import landing
from mlra.tools.fetch.box import FetchBox, confinement
from mlra.tools.fetch.https import Got, https_get
from mlra.tools.fetch.policy import FetchPolicy
from mlra.tools.fetched import Fetched
from mlra.tools.files import format_size, plural
from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import Sandbox, SandboxError

DEFAULT_API_URL = "https://export.arxiv.org/api/query"
DEFAULT_PDF_URL = "https://arxiv.org/pdf"
DEFAULT_INTERVAL_S = 3.0
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_BACKOFF_S = 3.0
DEFAULT_RETRIES = 2
MAX_PDF_BYTES = 100 * 1024 * 1024
MAX_FEED_BYTES = 8 * 1024 * 1024
PARSE_TIMEOUT_S = 120.0
READ_CHARS = 30_000
ABSTRACT_CHARS = 700
PAPERS_DIR = "papers"
NEW_ID = re.compile(r"^\d{4}\.\d{4,5}(v\d+)?$")
OLD_ID = re.compile(r"^[a-z-]+(\.[A-Z]{2})?/\d{7}(v\d+)?$")
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


class _ArxivTool:
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


class ArxivSearch(_ArxivTool, Tool[ArxivSearchArgs]):
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
            answer = _answer(result.stdout)
            if "error" in answer or not isinstance(answer.get("papers"), list):
                raise SandboxError(
                    f"arXiv's answer could not be read: {answer.get('error', 'no papers')}"
                )
            return [p for p in answer["papers"] if isinstance(p, dict)]
        finally:
            await asyncio.to_thread(landing.remove, staging)


def _answer(stdout: bytes) -> dict[str, Any]:
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


# --- arxiv_read -----------------------------------------------------------------------------


class ArxivReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        description="The arXiv id, e.g. 1706.03762 or 1706.03762v7 (an arxiv.org URL works too)."
    )
    start_page: int = Field(default=1, ge=1, description="First page to read (1-based).")
    end_page: int | None = Field(
        default=None,
        ge=1,
        description="Last page to read (inclusive); default: as many pages as fit in one reply.",
    )


class ArxivRead(_ArxivTool, Tool[ArxivReadArgs]):
    name = "arxiv_read"
    description = (
        "Download an arXiv paper's PDF into the workspace (papers/<id>.pdf) and return its "
        "text, a range of pages at a time (start_page/end_page); long papers are read in "
        "several calls. A paper already downloaded is not fetched again."
    )
    Args = ArxivReadArgs

    async def run(self, args: ArxivReadArgs, ctx: ToolContext) -> ToolOutcome:
        paper = normalize_id(args.id)
        rel = f"{PAPERS_DIR}/{paper.replace('/', '_')}.pdf"
        url = f"{self.config.pdf_url}/{paper}"
        self.policy.check(url, what="arXiv's PDF endpoint")
        cached = _cached_pdf(ctx.sandbox, rel)
        if not cached:
            try:
                await self._request(
                    lambda: self._download(url, paper, rel, ctx), f"for {paper}", ctx
                )
            except ArxivUnavailable as exc:
                raise SandboxError(str(exc)) from None
        size, digest, total, pages = await self._read(ctx, rel, paper, args)
        fetched = Fetched(
            kind="arxiv_pdf", source=url, path=rel, sha256=digest, bytes=size, cached=cached
        )
        data: dict[str, Any] = {
            "id": paper,
            "path": rel,
            "pages": total,
            "fetched": [fetched.record()],
        }
        got = "already in the workspace" if cached else f"downloaded, {format_size(size)}"
        if args.start_page > total:
            raise SandboxError(
                f"{paper} has {plural(total, 'page')}; start_page {args.start_page} is past "
                f"the end ({rel}, {got})"
            )
        first, last = args.start_page, args.start_page + len(pages) - 1
        data.update(start_page=first, end_page=last)
        parts = [f"[{rel} ({got}): arXiv {paper}, {_pages(first, last)} of {total}]"]
        for number, text in enumerate(pages, start=first):
            parts.append(f"--- page {number} ---")
            parts.append(text or "(no text on this page: a figure or a scanned image)")
        if last < total:
            parts.append(
                f"[{_pages(last + 1, total)} not shown; read on with arxiv_read "
                f"id={paper!r} start_page={last + 1}]"
            )
        return ToolOutcome(output="\n".join(parts), data=data)

    async def _download(self, url: str, paper: str, rel: str, ctx: ToolContext) -> None:
        """Fetch the PDF in a box into a staging folder, then move it into the workspace."""
        staging = landing.staging_dir(ctx.sandbox.workspace)
        try:
            box = self._box(staging, ctx, file_limit=MAX_PDF_BYTES)
            got = await https_get(
                self.policy,
                box,
                url,
                out="paper.pdf",
                max_bytes=MAX_PDF_BYTES,
                timeout_s=self.config.timeout_s,
                what=f"the PDF of {paper}",
            )
            if got.status == 404:
                raise SandboxError(
                    f"arXiv has no paper {paper!r} (HTTP 404); check the id with arxiv_search"
                )
            if got.error == "too_large":
                raise SandboxError(
                    f"the PDF of {paper} is larger than {format_size(MAX_PDF_BYTES)}; "
                    "not downloaded"
                )
            self._judge(got, f"the PDF of {paper}")
            staged = staging / "paper.pdf"
            head = _head(staged)
            if not head.startswith(b"%PDF-"):
                raise SandboxError(
                    f"arXiv returned no PDF for {paper} (got {got.content_type or 'unknown type'}, "
                    f"{got.bytes:,} bytes); the paper may be withdrawn or have no PDF"
                )
            refused = ctx.sandbox.claim_disk(got.bytes)
            if refused is not None:
                raise SandboxError(f"{refused}; the PDF of {paper} was not kept")
            await asyncio.to_thread(landing.hand_over, staged, ctx.sandbox.workspace)
            if not await asyncio.to_thread(landing.move_in, ctx.sandbox, staged, rel, replace=True):
                await ctx.sandbox.copy_in(staged, rel)
        finally:
            await asyncio.to_thread(landing.remove, staging)

    async def _read(
        self, ctx: ToolContext, rel: str, paper: str, args: ArxivReadArgs
    ) -> tuple[int, str, int, list[str]]:
        """(size, sha256, page count, page texts) of the workspace's copy, opened without
        following a link out and read by the box on its standard input."""
        try:
            fd, _ = ctx.sandbox.open_beneath(rel, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            raise SandboxError(f"{rel} is gone from the workspace; read it again") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_PDF_BYTES:
                raise SandboxError(
                    f"{rel} is not a PDF of at most {format_size(MAX_PDF_BYTES)}; remove it and "
                    "read the paper again"
                )
            digest = await asyncio.to_thread(_sha256, fd, st.st_size)
            os.lseek(fd, 0, os.SEEK_SET)
            staging = landing.staging_dir(ctx.sandbox.workspace)
            try:
                box = self._box(staging, ctx)
                argv = ["pdf-text", "--start", str(args.start_page), "--budget", str(READ_CHARS)]
                argv += ["--max-bytes", str(MAX_PDF_BYTES)]
                if args.end_page is not None:
                    argv += ["--end", str(args.end_page)]
                result = await box.run(box.runner(*argv), timeout_s=PARSE_TIMEOUT_S, stdin_fd=fd)
            finally:
                await asyncio.to_thread(landing.remove, staging)
        finally:
            os.close(fd)
        answer = _answer(result.stdout)
        if result.timed_out:
            answer = {"error": f"reading it took over {PARSE_TIMEOUT_S:.0f} s"}
        texts = answer.get("texts")
        if "error" in answer or not isinstance(texts, list):
            _remove(ctx.sandbox, rel)
            raise SandboxError(
                f"the PDF of {paper} could not be read ({answer.get('error', 'no text')}); it was "
                "removed, so the next arxiv_read downloads it again"
            )
        return st.st_size, digest, int(answer.get("pages", 0)), [str(t) for t in texts]


def _cached_pdf(sandbox: Sandbox, rel: str) -> bool:
    """Whether the workspace already holds the paper: a regular file, not too large,
    that starts as a PDF (read without following a link out)."""
    try:
        fd, _ = sandbox.open_beneath(rel, os.O_RDONLY)
    except (OSError, SandboxError):
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_PDF_BYTES:
            return False
        return os.read(fd, 5) == b"%PDF-"
    finally:
        os.close(fd)


def _head(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        return os.read(fd, 5)
    finally:
        os.close(fd)


def _sha256(fd: int, size: int) -> str:
    digest = hashlib.sha256()
    left = size
    while left > 0 and (chunk := os.read(fd, min(1 << 20, left))):
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()


def normalize_id(raw: str) -> str:
    """1706.03762, arXiv:1706.03762v7 and arxiv.org/abs|pdf/... URLs all name one paper."""
    text = raw.strip()
    text = re.sub(r"^(https?://)?(www\.|export\.)?arxiv\.org/(abs|pdf)/", "", text)
    text = re.sub(r"^arxiv:", "", text, flags=re.IGNORECASE)
    text = text.removesuffix(".pdf").strip("/")
    if NEW_ID.match(text) or OLD_ID.match(text):
        return text
    raise SandboxError(
        f"{raw!r} is not an arXiv id; ids look like 1706.03762 (or 1706.03762v7, or "
        "hep-th/9901001). Find ids with arxiv_search"
    )


def _pages(first: int, last: int) -> str:
    return f"page {first}" if first == last else f"pages {first}-{last}"


def _remove(sandbox: Sandbox, rel: str) -> None:
    """Delete a workspace file by its folder's descriptor, opened beneath the workspace
    (by path, a folder swapped for a link would make mlra delete a host file)."""
    parent_rel, _, name = rel.rpartition("/")
    try:
        parent, _ = sandbox.open_beneath(parent_rel or ".", os.O_RDONLY | os.O_DIRECTORY)
    except (OSError, SandboxError):
        return
    try:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=parent)
    finally:
        os.close(parent)
