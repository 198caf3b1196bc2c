"""TLS for the loopback servers that stand in for GitHub and arXiv.

mlra fetches for the agent over https only, so the servers the tests talk to speak
real TLS: a test certificate authority (trustme) signs a certificate for 127.0.0.1
and localhost, and mlra is told to trust that authority the way a user behind a
company proxy would (`[fetch] ca_bundle`), never by turning verification off.
"""

from __future__ import annotations

import functools
import ssl
import tempfile
from pathlib import Path
from socketserver import TCPServer

import trustme


@functools.cache
def _authority() -> tuple[trustme.CA, Path]:
    ca = trustme.CA()
    folder = Path(tempfile.mkdtemp(prefix="mlra-test-ca-"))
    pem = folder / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    pem.chmod(0o644)
    folder.chmod(0o755)
    return ca, pem


def ca_bundle() -> Path:
    """The test authority's certificate, a PEM file mlra can be told to trust."""
    return _authority()[1]


@functools.cache
def server_context() -> ssl.SSLContext:
    ca, _ = _authority()
    cert = ca.issue_cert("127.0.0.1", "localhost", "::1")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(context)
    return context


def serve_tls(server: TCPServer) -> None:
    """Make a socketserver speak TLS. The handshake happens in the handler's thread
    (on first read), so a client that connects and never speaks blocks nobody else."""
    server.socket = server_context().wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
