"""One HTTPS GET for the agent, each hop checked: the policy, then the fetch box.

The runner inside the box follows no redirect; a redirect comes back here, where its
target passes the same checks as the first URL (https, an allowed host, a public
address, pinned) before the next hop goes out. So a server cannot send a fetch to the
host's loopback or to a host the user did not allow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mlra.tools.fetch.box import FetchBox
from mlra.tools.fetch.policy import MAX_REDIRECTS, FetchPolicy, FetchRefused, Target

USER_AGENT = "mlra/0.1 (ML research agent)"


@dataclass
class Got:
    """How a GET ended: a status and the body's size (in the box's folder), or an error."""

    target: Target
    status: int | None = None
    content_type: str = ""
    bytes: int = 0
    error: str | None = None
    """tls, timeout, connect, protocol, too_large, or why the runner gave no answer."""
    detail: str = ""

    @property
    def url(self) -> str:
        return self.target.url


async def https_get(
    policy: FetchPolicy,
    box: FetchBox,
    url: str,
    *,
    out: str | None,
    max_bytes: int,
    timeout_s: float,
    what: str = "this URL",
) -> Got:
    """GET `url` into `out` (a file name in the box's folder; None: headers only),
    following up to MAX_REDIRECTS checked redirects. FetchRefused where the URL or a
    redirect is not allowed."""
    target = policy.check(url, what=what)
    for _hop in range(MAX_REDIRECTS + 1):
        pinned = await policy.pin(target)
        argv = [
            "get",
            "--url",
            pinned.url,
            "--address",
            pinned.address or "",
            "--out",
            out or "unused",
            "--max-bytes",
            str(max_bytes if out else 0),
            "--timeout",
            f"{max(0.1, timeout_s):.2f}",
            "--user-agent",
            USER_AGENT,
        ]
        if policy.ca_bundle is not None:
            argv += ["--ca", str(policy.ca_bundle)]
        result = await box.run(box.runner(*argv), timeout_s=timeout_s + 2)
        if result.timed_out:
            return Got(pinned, error="timeout")
        try:
            answer = json.loads(result.stdout)
        except ValueError:
            detail = result.stderr.strip().splitlines()[-1:] or [f"exit {result.exit_code}"]
            return Got(pinned, error="runner", detail=detail[0][:300])
        status = answer.get("status")
        location = answer.get("location")
        if isinstance(status, int) and 300 <= status < 400 and location:
            target = policy.follow(pinned, str(location), what=f"a redirect from {pinned.host}")
            continue
        return Got(
            pinned,
            status=status if isinstance(status, int) else None,
            content_type=str(answer.get("content_type", "")),
            bytes=int(answer.get("bytes", 0) or 0),
            error=answer.get("error"),
            detail=str(answer.get("detail", "")),
        )
    raise FetchRefused(f"{what} redirected more than {MAX_REDIRECTS} times")
