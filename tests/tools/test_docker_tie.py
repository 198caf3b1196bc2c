"""The tie's socket settings and its keepalive (docker_tie.py), on sockets of the test's
own: the tie against the engine is tried in test_docker_sandbox.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import threading
from typing import Any

from mlra.tools.sandbox.docker_tie import Tie
from tests.fakes import tls


class _Container:
    """A container as Tie.hold sees it: its attach is the socket given."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def attach_socket(self, **_: Any) -> socket.socket:
        return self.sock


def test_a_tcp_tie_keeps_its_connection_probed() -> None:
    """A tie to a tcp:// engine whose peer vanished (a dropped route, a proxy gone) was
    never found closed, and with SO_KEEPALIVE alone only after two idle hours: the kernel
    now probes it after 30 idle seconds, every 10, 3 times."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        tie, untied = Tie.hold(_Container(client))
        try:
            assert untied is None and tie is not None
            assert client.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            for name, value in {"TCP_KEEPIDLE": 30, "TCP_KEEPINTVL": 10, "TCP_KEEPCNT": 3}.items():
                if hasattr(socket, name):
                    assert client.getsockopt(socket.IPPROTO_TCP, getattr(socket, name)) == value
        finally:
            assert tie is not None
            tie.release()
            accepted.close()


async def test_the_tie_writes_a_newline_now_and_then_from_the_loop() -> None:
    """A proxy or tunnel that closes idle connections closed the tie, on which nothing was
    ever written, and so ended the container under the run. mlra now writes a newline on
    it every KEEPALIVE_S (the keeper ignores it), from the loop, till the tie's release."""
    ours, engine = socket.socketpair()
    engine.setblocking(False)
    tie, untied = Tie.hold(_Container(ours))
    assert untied is None and tie is not None
    loop = asyncio.get_running_loop()
    try:
        tie.keep_alive(every=0.01)
        got = await asyncio.wait_for(loop.sock_recv(engine, 16), 10)
        assert got and set(got) == {ord("\n")}
    finally:
        tie.release()
    rest = b""
    while chunk := await asyncio.wait_for(loop.sock_recv(engine, 64), 10):
        rest += chunk
    assert set(rest) <= {ord("\n")}  # then the end of it: released, the socket shut
    engine.close()


async def test_a_tls_tie_gets_its_newline_too() -> None:
    """An https engine (tcp:// with TLS) gives the tie as a TLS socket, which got no
    newline (only a plain socket did), so a proxy's idle timeout closed it after all.
    The newline now goes through the TLS socket, encrypted, as any other write."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        raw = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        client_context = ssl.create_default_context(cafile=str(tls.ca_bundle()))
        engine_side = asyncio.to_thread(
            tls.server_context().wrap_socket, accepted, server_side=True
        )
        ours = client_context.wrap_socket(
            raw, server_hostname="127.0.0.1", do_handshake_on_connect=False
        )
        engine, _ = await asyncio.gather(engine_side, asyncio.to_thread(ours.do_handshake))
        tie, untied = Tie.hold(_Container(ours))
        assert untied is None and tie is not None
        try:
            tie.keep_alive(every=0.01)
            engine.settimeout(10)
            got = await asyncio.to_thread(engine.recv, 16)
            assert got and set(got) == {ord("\n")}
        finally:
            tie.release()
            engine.close()


async def test_a_tie_on_a_high_descriptor_still_gets_its_newline() -> None:
    """The keepalive asked select() whether the tie could take a byte, which refuses a
    descriptor past 1023 (a busy mlra: many runs, many files open): the first turn
    failed and the newlines stopped for good. A send that does not block needs no ask."""
    ours, engine = socket.socketpair()
    high = os.dup2(ours.fileno(), 1500)
    ours.close()
    ours = socket.socket(fileno=high)
    engine.setblocking(False)
    tie, untied = Tie.hold(_Container(ours))
    assert untied is None and tie is not None
    loop = asyncio.get_running_loop()
    try:
        tie.keep_alive(every=0.01)
        got = await asyncio.wait_for(loop.sock_recv(engine, 16), 10)
        assert got and set(got) == {ord("\n")}
    finally:
        tie.release()
        engine.close()


async def test_a_full_tie_skips_its_turn_and_is_kept_alive_after() -> None:
    """A tie that cannot take a byte now (its buffers full) neither blocks the loop nor
    ends the keepalive: the newline comes once there is room again."""
    ours, engine = socket.socketpair()
    ours.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        while True:
            ours.send(b"x" * 65536)
    ours.setblocking(True)  # as the engine's attach is
    engine.setblocking(False)
    tie, untied = Tie.hold(_Container(ours))
    assert untied is None and tie is not None
    loop = asyncio.get_running_loop()
    try:
        tie.keep_alive(every=0.01)
        got = b""
        while b"\n" not in got:  # the filler, then the newline
            got += await asyncio.wait_for(loop.sock_recv(engine, 1 << 20), 10)
    finally:
        tie.release()
        engine.close()


async def test_a_release_during_a_ping_leaves_no_timer(monkeypatch: Any) -> None:
    """`release` runs from worker threads: one that came while a newline was being sent
    cancelled the timer that was firing, and the ping then scheduled another, which
    fired once more after the release. No timer is left now."""
    from mlra.tools.sandbox import docker_tie

    ours, engine = socket.socketpair()
    tie, untied = Tie.hold(_Container(ours))
    assert untied is None and tie is not None
    pinged = asyncio.Event()

    def send_while_released(sock: socket.socket) -> None:
        releasing = threading.Thread(target=tie.release)
        releasing.start()
        releasing.join()
        pinged.set()

    monkeypatch.setattr(docker_tie, "_send_newline", send_while_released)
    try:
        tie.keep_alive(every=0.01)
        await asyncio.wait_for(pinged.wait(), 10)
        await asyncio.sleep(0)  # the release's cancel, queued to the loop, runs
        assert tie._timer is not None and tie._timer.cancelled()
    finally:
        tie.release()
        engine.close()
