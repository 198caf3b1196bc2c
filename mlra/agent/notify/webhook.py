"""`--notify https://...`: the notification POSTed as a JSON body to the user's URL
(payload.py: its `text` escaped for Slack-style chat, which such a URL often is).

A short time-out, in a thread, so a slow or dead receiver never holds the run. The
URL may carry a token (a Slack or ntfy hook does), so it is never written anywhere:
`described` names its host alone, and a failure says what failed without the URL.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from urllib.parse import urlsplit

from mlra import __version__
from mlra.agent.notify.note import Notification, NotifyFailed
from mlra.agent.notify.payload import payload
from mlra.agent.notify.threads import in_daemon_thread

WEBHOOK_TIMEOUT_S = 5.0


def host_of(url: str) -> str:
    """The URL's host (and a port that is not the scheme's own), without user or path."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return host if port is None else f"{host}:{port}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: it would send to a place the user did not name."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


OPENER = urllib.request.build_opener(_NoRedirects())


class Webhook:
    def __init__(self, url: str, *, timeout_s: float = WEBHOOK_TIMEOUT_S) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.described = f"webhook to {host_of(url)}"

    def _post(self, body: bytes) -> None:
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": f"mlra/{__version__}"},
        )
        try:
            with OPENER.open(request, timeout=self.timeout_s) as response:
                response.read(65536)
        except urllib.error.HTTPError as exc:
            moved = " (a redirect, not followed)" if 300 <= exc.code < 400 else ""
            raise NotifyFailed(f"it answered HTTP {exc.code}{moved}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise NotifyFailed(f"it could not be reached: {reason}") from None

    async def send(self, note: Notification) -> None:
        body = payload(note)
        await in_daemon_thread(lambda: self._post(body), name="mlra-notify-webhook")
