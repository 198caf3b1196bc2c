"""`arxiv_read`: a paper's PDF fetched into the workspace and its text read in page ranges.

The PDF lands under papers/ (kept, and reused by content on the next read), and its text
is extracted in a fetch box of its own, never by mlra itself, since the file may be one
the agent wrote. A range of pages at a time keeps a long paper from flooding the context.
Requests go through the arXiv tools' shared limiter and confinement (tools/arxiv.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import stat
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.arxiv import PARSE_TIMEOUT_S, ArxivTool, ArxivUnavailable, runner_answer
from mlra.tools.fetch import landing
from mlra.tools.fetch.https import https_get
from mlra.tools.fetched import Fetched
from mlra.tools.files import format_size, plural
from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import Sandbox, SandboxError
from mlra.tools.sandbox.host_copies import copy_in

MAX_PDF_BYTES = 100 * 1024 * 1024
READ_CHARS = 30_000
PAPERS_DIR = "papers"
NEW_ID = re.compile(r"^\d{4}\.\d{4,5}(v\d+)?$")
OLD_ID = re.compile(r"^[a-z-]+(\.[A-Z]{2})?/\d{7}(v\d+)?$")


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


class ArxivRead(ArxivTool, Tool[ArxivReadArgs]):
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
                await copy_in(ctx.sandbox, staged, rel)
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
        answer = runner_answer(result.stdout)
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
