"""`--notify` as the user writes it, read into destinations, and each made a notifier.

DEST is `bell`, `desktop`, `cmd:COMMAND` or an `http(s)://` URL; several may be given
(the flag repeated, or one value with commas). A `cmd:` takes the rest of its value,
commas and all, since a shell command may hold them. A bad one is refused with one
line before the run starts (console/cli/notify_args.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from mlra.agent.notify.bell import Bell
from mlra.agent.notify.command import Command
from mlra.agent.notify.desktop import Desktop
from mlra.agent.notify.note import Notifier
from mlra.agent.notify.webhook import Webhook, host_of

DestinationKind = Literal["bell", "desktop", "command", "webhook"]
USAGE = "bell, desktop, cmd:COMMAND or an http(s):// URL"


@dataclass(frozen=True)
class Destination:
    kind: DestinationKind
    value: str = ""
    """The command, or the URL; empty for the bell and the desktop."""

    @property
    def written(self) -> str:
        """As the user wrote it (what the config carries; never logged)."""
        match self.kind:
            case "command":
                return f"cmd:{self.value}"
            case "webhook":
                return self.value
            case _:
                return self.kind

    @property
    def described(self) -> str:
        """In words safe for the log and the screen: no command, no URL path or query."""
        match self.kind:
            case "command":
                return "command"
            case "webhook":
                return f"webhook to {host_of(self.value)}"
            case _:
                return self.kind


def _one(text: str) -> Destination:
    word = text.strip()
    if word.lower() in ("bell", "desktop"):
        return Destination("bell" if word.lower() == "bell" else "desktop")
    if word.startswith("cmd:"):
        command = word[4:].strip()
        if not command:
            raise ValueError("cmd: needs a command after it (cmd:COMMAND)")
        return Destination("command", command)
    if "://" in word:
        parts = urlsplit(word)
        if parts.scheme.lower() not in ("http", "https"):
            raise ValueError(f"a webhook is an http:// or https:// URL, not {parts.scheme}://")
        try:
            parts.port  # noqa: B018 (raises on a port that is not a number)
        except ValueError:
            raise ValueError("the webhook URL's port is not a number") from None
        if not parts.hostname or any(c.isspace() for c in word):
            raise ValueError("the webhook URL names no host, or holds spaces")
        return Destination("webhook", word)
    shown = word if len(word) <= 40 else word[:40] + "…"
    raise ValueError(f"{shown!r} is not a destination (use {USAGE})")


def parse_destinations(text: str) -> list[Destination]:
    """One `--notify` value: one destination, or several separated by commas."""
    found: list[Destination] = []
    rest = text
    while rest.strip():
        head, comma, tail = rest.partition(",")
        if head.strip().startswith("cmd:"):
            head, tail, comma = rest, "", ""  # the command takes the rest, commas and all
        if not head.strip():
            raise ValueError(f"an empty destination in {text!r} (use {USAGE})")
        found.append(_one(head))
        rest = tail
        if comma and not tail.strip():
            raise ValueError(f"an empty destination after the last comma (use {USAGE})")
    if not found:
        raise ValueError(f"no destination given (use {USAGE})")
    return found


def notifier_for(destination: Destination) -> Notifier:
    match destination.kind:
        case "bell":
            return Bell()
        case "desktop":
            return Desktop()
        case "command":
            return Command(destination.value)
        case "webhook":
            return Webhook(destination.value)
