"""`--notify desktop`: a desktop notification where this machine has one.

`notify-send` (libnotify) with a desktop session to show it in (a display, Wayland or
a D-Bus session bus), or macOS's `osascript`. Where there is neither, `unavailable`
says why in one line, logged once as a warning: a run on a server is no error.

The Desktop Notifications spec lets a server read markup in the body (`<b>`, `<a
href>`, `<img src>`), and the agent writes part of it (a held call's arguments): the
body's `&`, `<` and `>` are sent as entities, so it shows as written and loads nothing.
The title is plain text by the spec; osascript's strings are quoted as AppleScript's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys

from mlra.agent.notify.child_env import child_env
from mlra.agent.notify.note import Notification, NotifyFailed

DESKTOP_TIMEOUT_S = 5.0
SESSION_VARS = ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")


def body_markup(text: str) -> str:
    """The body as notify-send's servers read it: the text, no markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _apple_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def desktop_command(title: str, message: str) -> list[str] | None:
    """The command that shows a notification here, or None where nothing can."""
    if sys.platform == "darwin" and shutil.which("osascript"):
        script = f"display notification {_apple_string(message)} with title {_apple_string(title)}"
        return ["osascript", "-e", script]
    sender = shutil.which("notify-send")
    if sender and any(os.environ.get(name) for name in SESSION_VARS):
        return [sender, "--app-name=mlra", title, body_markup(message)]
    return None


def unavailable() -> str | None:
    """Why this machine shows no desktop notifications, or None where it does."""
    if desktop_command("", "") is not None:
        return None
    if sys.platform != "darwin" and shutil.which("notify-send"):
        return (
            "no desktop session here (none of DISPLAY, WAYLAND_DISPLAY, DBUS_SESSION_BUS_ADDRESS)"
        )
    return "no desktop notifier here (notify-send is not on PATH)"


class Desktop:
    described = "desktop"

    async def send(self, note: Notification) -> None:
        argv = desktop_command(note.title, note.message[:500])
        if argv is None:
            raise NotifyFailed(unavailable() or "no desktop notifier here")
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=child_env(),
        )
        try:
            _, err = await asyncio.wait_for(proc.communicate(), DESKTOP_TIMEOUT_S)
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise NotifyFailed(f"{argv[0]} did not return within {DESKTOP_TIMEOUT_S:g} s") from None
        if proc.returncode != 0:
            said = err.decode("utf-8", "replace").strip().splitlines()
            raise NotifyFailed(
                f"{os.path.basename(argv[0])} exited with status {proc.returncode}"
                + (f": {said[-1][:200]}" if said else "")
            )
