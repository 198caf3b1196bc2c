"""The program mlra's fetch sandbox runs (box.py): one step per invocation, JSON out.

It runs inside bubblewrap with only its own folder writable and the host's network,
so it must do exactly what it is told and nothing the content it handles could ask
for: `get` makes one HTTPS request to the address it is pinned to (no DNS, no
redirect followed: a redirect comes back as data for mlra to check), `arxiv-feed`
turns an arXiv Atom answer into paper records, `pdf-text` extracts a range of pages'
text from a PDF on its standard input, `describe` summarizes a fresh clone without
following any link in it. It is a single file of the standard library (pypdf aside),
shown read-only to the sandbox, so it imports nothing of mlra and needs none of the
project's folders. Every answer is one JSON object on stdout; strings in it are valid
UTF-8 (undecodable bytes of names become U+FFFD).
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import re
import socket
import ssl
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import urlsplit

LISTING_ENTRIES = 40
README_LINES = 25
README_BYTES = 64 * 1024
LINE_CHARS = 200
MAX_WALK_ENTRIES = 200_000
FEED_BYTES = 8 * 1024 * 1024
ATOM = {
    "atom": "http://www.w3.org/2005/Atom",
    "opensearch": "http://a9.com/-/spec/opensearch/1.1/",
}


def answer(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj))
    sys.stdout.flush()


def text_of(name: str) -> str:
    """A name as valid UTF-8 text (a surrogate-escaped byte becomes U+FFFD)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


# --- get ------------------------------------------------------------------------------------


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """Connects to the address mlra checked, whatever the name resolves to now; the
    certificate is still verified against the name."""

    def __init__(
        self, host: str, port: int, address: str, context: ssl.SSLContext, timeout: float
    ) -> None:
        super().__init__(host, port, context=context, timeout=timeout)
        self.pinned = address
        self.tls = context

    def connect(self) -> None:
        sock = socket.create_connection((self.pinned, self.port), self.timeout)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


def tls_context(ca: str | None) -> ssl.SSLContext:
    if ca:
        return ssl.create_default_context(cafile=ca)
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:
        return ssl.create_default_context()


def get(args: argparse.Namespace) -> None:
    parts = urlsplit(args.url)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    conn = PinnedHTTPSConnection(
        parts.hostname or "", parts.port or 443, args.address, tls_context(args.ca), args.timeout
    )
    headers = {
        "User-Agent": args.user_agent,
        "Accept-Encoding": "identity",
        "Connection": "close",
    }
    try:
        conn.request("GET", target, headers=headers)
        resp = conn.getresponse()
    except ssl.SSLError as exc:
        return answer({"error": "tls", "detail": str(exc)[:300]})
    except TimeoutError:
        return answer({"error": "timeout"})
    except OSError as exc:
        return answer({"error": "connect", "detail": str(exc)[:300]})
    except http.client.HTTPException as exc:
        return answer({"error": "protocol", "detail": f"{type(exc).__name__}: {exc}"[:300]})
    result: dict[str, Any] = {
        "status": resp.status,
        "content_type": resp.getheader("content-type", ""),
    }
    if 300 <= resp.status < 400:
        result["location"] = resp.getheader("location", "")
    if 300 <= resp.status < 400 or args.max_bytes <= 0:  # no body wanted
        conn.close()
        return answer(result)
    written = 0
    try:
        with open(args.out, "wb") as out:
            while chunk := resp.read(1 << 16):
                written += len(chunk)
                if written > args.max_bytes:
                    result["error"] = "too_large"
                    break
                out.write(chunk)
    except TimeoutError:
        result["error"] = "timeout"
    except (OSError, http.client.HTTPException) as exc:
        result["error"] = "connect"
        result["detail"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        conn.close()
    if result.get("error") == "too_large":
        os.unlink(args.out)
    result["bytes"] = min(written, args.max_bytes)
    answer(result)


# --- arxiv-feed -----------------------------------------------------------------------------


def arxiv_feed(args: argparse.Namespace) -> None:
    with open(args.file, "rb") as f:
        data = f.read(FEED_BYTES + 1)
    if len(data) > FEED_BYTES:
        return answer({"error": "the answer is too large to be an arXiv feed"})
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        return answer({"error": f"not an Atom feed ({exc})"})
    total_text = root.findtext("opensearch:totalResults", default="0", namespaces=ATOM)
    papers = []
    for entry in root.findall("atom:entry", ATOM):
        entry_id = (entry.findtext("atom:id", default="", namespaces=ATOM) or "").strip()
        published = (entry.findtext("atom:published", default="", namespaces=ATOM) or "").strip()
        if not entry_id or not published:
            continue
        papers.append(
            {
                "id": entry_id.rsplit("/abs/", 1)[-1],
                "title": " ".join((entry.findtext("atom:title", "", ATOM) or "").split()),
                "authors": [
                    (a.findtext("atom:name", "", ATOM) or "").strip()
                    for a in entry.findall("atom:author", ATOM)
                ],
                "published": published[:10],
                "categories": [
                    c.get("term", "") for c in entry.findall("atom:category", ATOM) if c.get("term")
                ],
                "summary": entry.findtext("atom:summary", "", ATOM) or "",
            }
        )
    try:
        total = int(total_text.strip())
    except ValueError:
        total = len(papers)
    answer({"total": total, "papers": papers})


# --- pdf-text -------------------------------------------------------------------------------


def pdf_text(args: argparse.Namespace) -> None:
    data = sys.stdin.buffer.read(args.max_bytes + 1)
    if len(data) > args.max_bytes:
        return answer({"error": "the PDF is larger than the cap"})
    if not data.startswith(b"%PDF-"):
        return answer({"error": "not a PDF"})
    try:
        from pypdf import PdfReader

        reader = PdfReader(io.BytesIO(data))
        total = len(reader.pages)
        last = min(args.end or total, total)
        texts: list[str] = []
        used = 0
        for index in range(args.start - 1, last):
            text = _clean(reader.pages[index].extract_text() or "")
            if texts and used + len(text) > args.budget:
                break
            if len(text) > args.budget:
                text = text[: args.budget] + f"\n[... page cut at {args.budget:,} characters]"
            texts.append(text)
            used += len(text)
    except Exception as exc:  # pypdf raises many kinds on a broken file
        return answer({"error": f"{type(exc).__name__}: {exc}"[:300]})
    answer({"pages": total, "texts": texts})


def _clean(text: str) -> str:
    lines = [line.rstrip() for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


# --- describe -------------------------------------------------------------------------------


def _git(repo: str, *argv: str) -> str:
    result = subprocess.run(
        ["git", "-C", repo, *argv], capture_output=True, timeout=60, check=False
    )
    return result.stdout.decode("utf-8", "replace").strip() if result.returncode == 0 else ""


def describe(args: argparse.Namespace) -> None:
    repo = args.repo
    head = _git(repo, "log", "-1", "--format=%H%x00%s%x00%cs").split("\x00")
    commit, subject, date = [*head, "", "", ""][:3]
    branch = _git(repo, "symbolic-ref", "-q", "--short", "HEAD")
    entries: list[tuple[str, os.stat_result]] = []
    with os.scandir(repo) as it:
        for entry in it:
            if entry.name == ".git":
                continue
            try:
                entries.append((entry.name, entry.stat(follow_symlinks=False)))
            except OSError:
                continue
    entries.sort(key=lambda e: (not stat.S_ISDIR(e[1].st_mode), e[0]))
    listing = [
        text_of(name)
        + ("/" if stat.S_ISDIR(st.st_mode) else "@" if stat.S_ISLNK(st.st_mode) else "")
        for name, st in entries[:LISTING_ENTRIES]
    ]
    if len(entries) > LISTING_ENTRIES:
        listing.append(f"... {len(entries) - LISTING_ENTRIES} more")
    readme, readme_text, readme_note = _readme(repo, entries)
    files, size, complete = _count(repo)
    answer(
        {
            "commit": commit,
            "subject": subject,
            "date": date,
            "branch": branch or None,
            "listing": listing,
            "readme": readme,
            "readme_text": readme_text,
            "readme_note": readme_note,
            "files": files,
            "bytes": size,
            "complete": complete,
        }
    )


def _readme(
    repo: str, entries: list[tuple[str, os.stat_result]]
) -> tuple[str | None, str, str | None]:
    """The top-level README's first lines, read without following a link."""
    named = [(n, st) for n, st in entries if n.lower().startswith("readme")]
    named.sort(
        key=lambda e: (os.path.splitext(e[0])[1].lower() not in {".md", ".rst", ".txt", ""}, e[0])
    )
    for name, st in named:
        if stat.S_ISLNK(st.st_mode):
            return text_of(name), "", "a symbolic link, not followed"
        if not stat.S_ISREG(st.st_mode):
            continue
        try:
            fd = os.open(os.path.join(repo, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            data = f.read(README_BYTES)
        lines = data.decode("utf-8", "replace").splitlines()
        cut = len(data) >= README_BYTES
        shown = [line[:LINE_CHARS] for line in lines[:README_LINES]]
        text = "\n".join(shown)
        if len(lines) > README_LINES or cut:
            more = len(lines) - README_LINES
            text += f"\n[... {more:,}{'+' if cut else ''} more lines]" if more > 0 else "\n[...]"
        return text_of(name), text, None
    return None, "", None


def _count(repo: str) -> tuple[int, int, bool]:
    """Files and bytes outside .git, by lstat, iteratively (a tree may be very deep)."""
    files = size = seen = 0
    stack = [repo]
    while stack:
        folder = stack.pop()
        try:
            it = os.scandir(folder)
        except OSError:
            continue
        with it:
            for entry in it:
                seen += 1
                if seen > MAX_WALK_ENTRIES:
                    return files, size, False
                if entry.name == ".git" and folder == repo:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                else:
                    files += 1
                    size += st.st_size
    return files, size, True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mlra-fetch")
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("get")
    p.add_argument("--url", required=True)
    p.add_argument("--address", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max-bytes", type=int, required=True)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--ca")
    p.add_argument("--user-agent", default="mlra/0.1 (ML research agent)")
    p = sub.add_parser("arxiv-feed")
    p.add_argument("file")
    p = sub.add_parser("pdf-text")
    p.add_argument("--start", type=int, default=1)
    p.add_argument("--end", type=int)
    p.add_argument("--budget", type=int, required=True)
    p.add_argument("--max-bytes", type=int, required=True)
    p = sub.add_parser("describe")
    p.add_argument("repo")
    args = parser.parse_args(argv)
    {"get": get, "arxiv-feed": arxiv_feed, "pdf-text": pdf_text, "describe": describe}[args.step](
        args
    )


if __name__ == "__main__":
    main()
