"""A small arXiv on loopback: the export API's Atom answers and PDFs, over real HTTPS.

The research tools talk to it exactly as to arXiv (HTTPS, with a certificate
from the test authority in tests/fakes/tls.py); only the base URLs differ. Searches
are answered from recorded Atom responses in tests/data/arxiv/: a query that
mentions a response's keyword gets it, any other query the empty feed. PDFs
are real (tiny, hand-built) documents, one per id in `papers`; other ids get
arXiv's 404. `mode` makes it misbehave: "503" answers every request with 503
(arXiv's rate-limit answer), "hang" accepts and never answers; `fail_first=N`
answers 503 to the first N requests and then behaves.
"""

from __future__ import annotations

import textwrap
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from tests.fakes.tls import serve_tls

DATA = Path(__file__).resolve().parent.parent / "data" / "arxiv"
FEEDS = {"attention": "search_attention.xml"}
EMPTY_FEED = "empty.xml"
Mode = Literal["ok", "503", "hang"]


def default_papers() -> dict[str, list[str]]:
    """Page texts of the papers the server holds, by id (with and without version)."""
    pages = [
        f"Attention Is All You Need (test copy). Page {n}. "
        + {
            1: "Abstract. MARKER-ABSTRACT The Transformer relies entirely on attention.",
            2: "Model architecture. MARKER-ARCHITECTURE Scaled dot-product attention.",
            3: "Results. MARKER-RESULTS BLEU 28.4 on English-to-German translation.",
        }[n]
        for n in (1, 2, 3)
    ]
    return {"1706.03762": pages, "1706.03762v7": pages}


def minimal_pdf(pages: list[str]) -> bytes:
    """A valid PDF with one line of Helvetica text per page, readable by any PDF reader."""
    objects: list[bytes] = []
    n_pages = len(pages)
    font_id = 3 + 2 * n_pages
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n_pages))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n_pages} >>".encode())
    for i, text in enumerate(pages):
        safe = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        lines = textwrap.wrap(safe, 80, break_on_hyphens=False) or [""]
        ops = ["BT", "/F1 11 Tf", "14 TL", "50 750 Td"]
        ops += [f"({line}) Tj T*" for line in lines]
        ops.append("ET")
        stream = "\n".join(ops).encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 {font_id} 0 R >> >> /Contents {4 + 2 * i} 0 R >>".encode()
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{off:010d} 00000 n \n".encode() for off in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    ).encode()
    return bytes(out)


@dataclass
class Seen:
    at: float
    path: str
    query: dict[str, list[str]]


class ArxivServer:
    def __init__(
        self,
        *,
        mode: Mode = "ok",
        fail_first: int = 0,
        papers: dict[str, list[str]] | None = None,
    ) -> None:
        self.mode = mode
        self.fail_first = fail_first
        self.pdfs = {k: minimal_pdf(v) for k, v in (papers or default_papers()).items()}
        self.requests: list[Seen] = []
        self.redirect_pdfs: str | None = None
        """Answer every PDF request with a redirect to this base URL instead."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"https://{host!s}:{port}"

    @property
    def api_url(self) -> str:
        return f"{self.base}/api/query"

    @property
    def pdf_url(self) -> str:
        return f"{self.base}/pdf"

    def env(self) -> dict[str, str]:
        """The environment that points a child `mlra` process at this server."""
        return {"MLRA_ARXIV_API_URL": self.api_url, "MLRA_ARXIV_PDF_URL": self.pdf_url}

    def start(self) -> ArxivServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        serve_tls(self._httpd)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> ArxivServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _seen(self, path: str, query: dict[str, list[str]]) -> int:
        with self._lock:
            self.requests.append(Seen(time.monotonic(), path, query))
            return len(self.requests)


class _Handler(BaseHTTPRequestHandler):
    fake: ArxivServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        count = self.fake._seen(parts.path, query)
        if self.fake.mode == "hang":
            self.fake._stopping.wait()
            return
        if self.fake.mode == "503" or count <= self.fake.fail_first:
            self._send(503, b"Service Unavailable", "text/plain", {"Retry-After": "1"})
            return
        if parts.path == "/api/query":
            wanted = " ".join(query.get("search_query", [""])).lower()
            name = next((f for key, f in FEEDS.items() if key in wanted), EMPTY_FEED)
            self._send(200, (DATA / name).read_bytes(), "application/atom+xml; charset=utf-8")
        elif parts.path.startswith("/pdf/") and self.fake.redirect_pdfs:
            paper = parts.path.removeprefix("/pdf/")
            self._send(301, b"", "text/plain", {"Location": f"{self.fake.redirect_pdfs}/{paper}"})
        elif parts.path.startswith("/pdf/"):
            paper = parts.path.removeprefix("/pdf/")
            pdf = self.fake.pdfs.get(paper)
            if pdf is None:
                self._send(404, b"<html><body>Paper not found</body></html>", "text/html")
            else:
                self._send(200, pdf, "application/pdf")
        else:
            self._send(404, b"not found", "text/plain")

    def _send(
        self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)
