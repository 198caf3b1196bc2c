"""Whether a vendor's own API (no `--base-url`) can be connected to at all, asked
before a run starts.

A machine with no network, asked for a hosted model, used to start the run and wait
out its first call: the SDK's retries, then the run's `--server-wait` (5 minutes by
default), about 7 minutes before the run ended on `Name or service not known`. Nothing
of that wait could mend a name that does not resolve or a port nothing listens on, so
`mlra run` refuses in one line first (console/cli/model_server.py), as it does for a
`--base-url` nothing answers at. The check is a name lookup and a TCP connection to
where the SDK would connect (its base URL as the environment sets it, such as
`ANTHROPIC_BASE_URL` or `OPENAI_BASE_URL`, or the proxy `HTTPS_PROXY`, `ALL_PROXY`
name for it unless `NO_PROXY` exempts it): no request is sent, so no key is checked
and nothing is billed. An outage that begins after this is the run's to wait out.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import urllib.request
from urllib.parse import urlsplit

from mlra.agent.providers.server_window import ServerUnreachable, connect_cause

REACH_TIMEOUT_S = 10.0
"""The name lookup's and the connection's limit each: the SDKs' own connect time-out,
past which their first call would fail the same way."""
HOSTED_HINT = "is this machine online? (behind a proxy, set HTTPS_PROXY)"


class HostedApiUnreachable(ServerUnreachable):
    """A vendor's API (or the proxy to it) not connected to: unlike a `--base-url`
    server, which may be starting, no wait of a batch's mends a machine's missing
    network, so `mlra run` says it with its own exit status (console/cli/model_server.py)."""


def proxy_for(url: str) -> str | None:
    """The proxy the SDK's HTTP client (httpx, trusting the environment) connects
    through for `url`, or None where it connects directly."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    default = {"https": 443, "http": 80, "socks5": 1080, "socks5h": 1080}.get(parts.scheme, 443)
    return parts.hostname or "", parts.port or default


async def reach_api(url: str, *, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Raise ServerUnreachable (naming `url`) where the address the SDK would connect to
    for `url` does not resolve, refuses the connection, has no route, or does not answer
    it within `timeout_s`; return once a connection was made (and closed)."""
    proxy = proxy_for(url)
    host, port = _host_port(proxy or url)
    through = f"its proxy {proxy}: " if proxy else ""
    hint = "is the proxy up?" if proxy else HOSTED_HINT
    loop = asyncio.get_running_loop()
    try:
        addresses = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout_s
        )
    except TimeoutError:
        cause = f"{through}no answer to the name lookup within {timeout_s:g} s"
        raise HostedApiUnreachable(url, cause, hint) from None
    except OSError as exc:
        raise HostedApiUnreachable(url, through + connect_cause(exc), hint) from None
    failure: BaseException | None = None
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, address), timeout_s)
            return
        except TimeoutError:
            failure = failure or TimeoutError()
        except OSError as exc:
            failure = exc
        finally:
            with contextlib.suppress(OSError):
                sock.close()
    if failure is None or isinstance(failure, TimeoutError):
        cause = f"{through}no answer to connect within {timeout_s:g} s"
    else:
        cause = through + connect_cause(failure)
    raise HostedApiUnreachable(url, cause, hint)
