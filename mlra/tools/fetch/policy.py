"""Which URLs mlra fetches for the agent: https only, allowed hosts, public addresses.

The agent chooses URLs; a URL is a request, never an authority. Before anything is
fetched, mlra checks that the scheme is https (no file://, ssh://, git://, http://,
no credentials in the URL), that the host and port are on the allow-list (GitHub and
arXiv by default; the user adds hosts in the config file or with `--allow-host`), and
only then resolves the name, so a URL naming a host that is not allowed never even
reaches the DNS (a name is a channel too). Every address the name resolves to must be
public (no loopback, private, link-local, shared, reserved or multicast range, also
when wrapped in IPv6), and the fetch is pinned to the address that was checked, so a
second lookup by git or curl cannot be answered differently (DNS rebinding). Redirects
are not followed by the fetching program: each hop comes back to mlra and passes the
same checks.

A host the user names by its IP address is taken as written (the user chose that
address); a name the user lists under `private_hosts` may resolve to a private address
(a company's own GitLab). Nothing the agent can write changes these settings: they come
from the user's config file and flags, and are recorded in the run's config.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.sandbox.base import SandboxError

DEFAULT_HOSTS = ("github.com", "arxiv.org", "export.arxiv.org")
"""What the research tools need and nothing more: git's smart HTTP is served by
github.com itself, arXiv's API by export.arxiv.org and its PDFs by arxiv.org."""
HTTPS_PORT = 443
MAX_REDIRECTS = 5
RESOLVE_TIMEOUT_S = 15.0
MAX_URL_CHARS = 2048

AddressT = ipaddress.IPv4Address | ipaddress.IPv6Address

NAT64 = ipaddress.ip_network("64:ff9b::/96")


class FetchRefused(SandboxError):
    """A URL the policy does not allow; the message says why, for the agent."""


class FetchSettings(BaseModel):
    """The user's word on what mlra may fetch for the agent (config file and flags).

    Recorded in the run's config, so a resumed or forked run fetches by the same rules.
    """

    model_config = ConfigDict(extra="forbid")

    allow_hosts: list[str] = Field(default_factory=list)
    """Hosts added to the defaults, as `host` (port 443) or `host:port`."""
    private_hosts: list[str] = Field(default_factory=list)
    """Allowed hosts whose names may resolve to private or loopback addresses."""
    ca_bundle: str | None = None
    """A PEM file of certificate authorities to trust instead of the system's (a
    company's TLS-inspecting proxy, a test server); shown read-only to the fetcher."""


@dataclass(frozen=True)
class HostRule:
    host: str
    port: int
    any_address: bool
    """The user named this address, or listed the name as private: not checked."""


@dataclass(frozen=True)
class Target:
    """A URL that passed the policy; `address` once resolved and pinned."""

    url: str
    host: str
    port: int
    address: str | None = None

    @property
    def host_port(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == HTTPS_PORT else f"{host}:{self.port}"

    def pin(self) -> str:
        """The `HOST:PORT:ADDRESS` form curl (`--resolve`, git's `http.curloptResolve`)
        and mlra's fetch runner take."""
        assert self.address is not None
        address = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.host}:{self.port}:{address}"


def split_host(text: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` as (lower-case host, port or None)."""
    raw = text.strip()
    if not raw or any(c.isspace() for c in raw) or "/" in raw or "@" in raw:
        raise ValueError(f"{text!r} is not a host (write HOST or HOST:PORT)")
    port: int | None = None
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0:
            raise ValueError(f"{text!r} is not a host (an IPv6 address goes in brackets)")
        host, rest = raw[1:end], raw[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"{text!r} is not a host (write [ADDRESS]:PORT)")
            port = _port(rest[1:], text)
    elif raw.count(":") == 1:
        host, _, port_text = raw.partition(":")
        port = _port(port_text, text)
    elif ":" in raw:
        host = raw  # a bare IPv6 address
    else:
        host = raw
    host = _normal_host(host)
    if not host:
        raise ValueError(f"{text!r} is not a host")
    return host, port


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{whole!r} has no valid port (1-65535)")
    return int(text)


def _normal_host(host: str) -> str:
    host = host.strip().rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return ""


def _literal(host: str) -> AddressT | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def address_problem(address: str) -> str | None:
    """What kind of address this is when it may not be fetched from (not a public
    one: "a loopback address"), or None."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    inner: AddressT = ip
    if isinstance(ip, ipaddress.IPv6Address):
        # IPv4 wrapped in IPv6 reaches the IPv4 address: judge that one.
        if ip.ipv4_mapped is not None:
            inner = ip.ipv4_mapped
        elif ip.sixtofour is not None:
            inner = ip.sixtofour
        elif ip.teredo is not None:
            inner = ip.teredo[1]
        elif ip in NAT64:
            inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    for kind, test in (
        ("a loopback", inner.is_loopback),
        ("a private", inner.is_private),
        ("a link-local", inner.is_link_local),
        ("a multicast", inner.is_multicast),
        ("an unspecified", inner.is_unspecified),
        ("a reserved", inner.is_reserved),
    ):
        if test:
            return f"{kind} address"
    if not inner.is_global:
        return "not a public address"
    return None


class FetchPolicy:
    """The allow-list and the checks every fetch for the agent goes through."""

    def __init__(
        self,
        settings: FetchSettings | None = None,
        *,
        defaults: Iterable[str] = DEFAULT_HOSTS,
        extra_hosts: Iterable[str] = (),
    ) -> None:
        """`extra_hosts` are endpoints the user set elsewhere (MLRA_ARXIV_API_URL):
        allowed as user-named hosts."""
        self.settings = settings or FetchSettings()
        private = {split_host(h) for h in self.settings.private_hosts}
        self.rules: list[HostRule] = []
        for text in defaults:
            host, port = split_host(text)
            self.rules.append(HostRule(host, port or HTTPS_PORT, any_address=False))
        for text in [*self.settings.allow_hosts, *extra_hosts, *self.settings.private_hosts]:
            host, port = split_host(text)
            named = _literal(host) is not None or (host, port) in private
            self.rules.append(HostRule(host, port or HTTPS_PORT, any_address=named))

    @property
    def ca_bundle(self) -> Path | None:
        return Path(self.settings.ca_bundle) if self.settings.ca_bundle else None

    def allowed(self) -> str:
        """The allow-list as the agent reads it in a refusal."""
        shown: list[str] = []
        for rule in self.rules:
            text = Target("", rule.host, rule.port).host_port
            if text not in shown:
                shown.append(text)
        return ", ".join(shown)

    def rule_for(self, host: str, port: int) -> HostRule | None:
        """The most permissive rule naming this host and port."""
        found = [r for r in self.rules if r.host == host and r.port == port]
        return max(found, key=lambda r: r.any_address, default=None)

    def check(self, url: str, *, what: str = "this URL") -> Target:
        """The URL as a target, or FetchRefused saying why not. No network, no DNS."""
        if len(url) > MAX_URL_CHARS or any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
            raise FetchRefused(f"{what} is not a well-formed URL")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise FetchRefused(f"{what} is not a well-formed URL") from None
        scheme = parts.scheme.lower()
        if scheme != "https":
            raise FetchRefused(
                f"{what} uses {scheme + '://' if scheme else 'no scheme'}; mlra fetches for "
                "the agent over https:// only (no file://, ssh://, git:// or http://)"
            )
        if parts.username is not None or parts.password is not None:
            raise FetchRefused(f"{what} carries credentials; mlra fetches only public content")
        host = _normal_host(parts.hostname or "")
        if not host:
            raise FetchRefused(f"{what} names no host")
        port = port or HTTPS_PORT
        if self.rule_for(host, port) is None:
            shown = Target("", host, port).host_port
            raise FetchRefused(
                f"{shown} is not on the list of hosts mlra may fetch from for the agent "
                f"({self.allowed()}); the user can allow more hosts (--allow-host, or "
                "[fetch] allow_hosts in mlra's config file)"
            )
        netloc = Target("", host, port).host_port
        normal = urlunsplit(("https", netloc, parts.path or "/", parts.query, ""))
        return Target(url=normal, host=host, port=port)

    async def pin(self, target: Target) -> Target:
        """The target with the address it will be fetched from: every address the name
        resolves to checked, the first kept. FetchRefused for a non-public address on a
        host that may not have one, or a name that does not resolve."""
        rule = self.rule_for(target.host, target.port)
        if rule is None:  # checked already; kept for callers that skip `check`
            raise FetchRefused(f"{target.host_port} is not an allowed host")
        literal = _literal(target.host)
        if literal is not None:
            addresses = [str(literal)]
        else:
            addresses = await _resolve(target.host, target.port)
        if not rule.any_address:
            for address in addresses:
                problem = address_problem(address)
                if problem is not None:
                    raise FetchRefused(
                        f"{target.host} resolves to {address}, {problem}; mlra fetches for the "
                        "agent from public addresses only"
                    )
        # IPv4 first: more networks route it.
        addresses.sort(key=lambda a: ":" in a)
        return replace(target, address=addresses[0])

    def follow(self, target: Target, location: str, *, what: str = "a redirect") -> Target:
        """The target a redirect points to, checked as the first URL was."""
        from urllib.parse import urljoin

        return self.check(urljoin(target.url, location), what=what)


async def _resolve(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S
        )
    except (OSError, TimeoutError):
        raise FetchRefused(f"could not resolve {host} (no network, or no such host)") from None
    addresses: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise FetchRefused(f"{host} resolves to no address")
    return addresses
