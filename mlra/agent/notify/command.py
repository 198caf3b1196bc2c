"""`--notify cmd:COMMAND`: the user's command, run with `sh -c` for each notification.

It reads the notification as JSON on stdin, the very bytes a webhook gets (payload.py:
its `text` escaped for Slack-style chat), and finds its main fields in MLRA_NOTIFY_*
variables too (for a one-line shell command), as plain text. Its environment carries no secrets
(agent/notify/child_env.py); it runs in a session of its own, so a command that
outlives its time limit is killed with everything it started. Its output is not
shown (the console may own the terminal): a failure says its exit status and the
last line it wrote to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from mlra.agent.notify.child_env import child_env
from mlra.agent.notify.note import Notification, NotifyFailed
from mlra.agent.notify.payload import payload

COMMAND_TIMEOUT_S = 10.0


def command_env(note: Notification) -> dict[str, str]:
    return child_env(
        {
            "MLRA_NOTIFY_KIND": note.kind,
            "MLRA_NOTIFY_TITLE": note.title,
            "MLRA_NOTIFY_MESSAGE": note.message,
            "MLRA_RUN_DIR": note.run_dir,
            "MLRA_RUN_ID": note.run_id,
        }
    )


class Command:
    described = "command"

    def __init__(self, command: str, *, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        self.command = command
        self.timeout_s = timeout_s

    async def send(self, note: Notification) -> None:
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=command_env(note),
            start_new_session=True,
        )
        try:
            _, err = await asyncio.wait_for(proc.communicate(payload(note) + b"\n"), self.timeout_s)
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
            raise NotifyFailed(
                f"the command ran past {self.timeout_s:g} s and was killed"
            ) from None
        if proc.returncode != 0:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            said = f": {lines[-1][:200]}" if lines else ""
            raise NotifyFailed(f"the command exited with status {proc.returncode}{said}")
