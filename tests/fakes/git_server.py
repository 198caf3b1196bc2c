"""A git host on loopback over HTTPS: git's own `http-backend` behind a TLS server.

`github_clone` clones over https only, so its tests clone from this: real git smart
HTTP (the same protocol GitHub speaks), served from bare repositories in a folder,
with a certificate from the test authority (tests/fakes/tls.py). It can also
redirect a path elsewhere (as GitHub does for a renamed repository, or as a hostile
server would, to the host's loopback), answer 503, or never answer.
"""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from tests.fakes.tls import serve_tls

Mode = Literal["ok", "503", "hang"]


@dataclass
class GitRequest:
    path: str
    query: str


@dataclass
class GitServer:
    root: Path
    """A folder of bare repositories, served at /<name>.git."""
    mode: Mode = "ok"
    redirects: dict[str, str] = field(default_factory=dict)
    """Path prefix -> the Location to answer with (the rest of the path appended)."""
    host: str = "127.0.0.1"
    requests: list[GitRequest] = field(default_factory=list)
    _httpd: ThreadingHTTPServer | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return int(self._httpd.server_address[1])

    @property
    def base(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def allow(self) -> str:
        """The `--allow-host` entry that lets mlra fetch from this server."""
        return f"{self.host}:{self.port}"

    def url(self, name: str) -> str:
        return f"{self.base}/{name}.git"

    def __enter__(self) -> GitServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer((self.host, 0), handler)
        self._httpd.daemon_threads = True
        serve_tls(self._httpd)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    fake: GitServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        self.fake.requests.append(GitRequest(parts.path, parts.query))
        if self.fake.mode == "hang":
            self.fake._stopping.wait()
            return
        if self.fake.mode == "503":
            self._plain(503, b"Service Unavailable")
            return
        for prefix, location in self.fake.redirects.items():
            if parts.path.startswith(prefix):
                rest = parts.path[len(prefix) :] + (f"?{parts.query}" if parts.query else "")
                self.send_response(301)
                self.send_header("Location", location + rest)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.fake.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "REQUEST_METHOD": method,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "REMOTE_ADDR": "127.0.0.1",
        }
        done = subprocess.run(
            ["git", "http-backend"], input=body, capture_output=True, env=env, check=False
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _plain(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def bare_repo(source: Path, dest: Path) -> Path:
    """A bare copy of the repository at `source`, to serve."""
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(source), str(dest)], check=True, capture_output=True
    )
    # Shallow fetches of a commit by id ask for this.
    subprocess.run(
        ["git", "-C", str(dest), "config", "uploadpack.allowReachableSHA1InWant", "true"],
        check=True,
    )
    return dest
