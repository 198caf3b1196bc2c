"""Notifications (`--notify`): telling a user who walked away what needs them.

note.py holds the notification and the `Notifier` interface; triggers.py which of the
run's events notify and what they say; hub.py the run's subscriber; dispatch.py the
sending, bounded and off the run's path (shared with batch/notify.py); destinations.py
reads `--notify`; bell.py, desktop.py, command.py and webhook.py are the destinations
(payload.py the JSON a command and a webhook get, its chat text escaped; child_env.py
the secret-free environment of what they run, threads.py the daemon threads their
blocking work runs in).
"""

from mlra.agent.notify.destinations import Destination, parse_destinations
from mlra.agent.notify.hub import Notifications
from mlra.agent.notify.note import Notification, Notifier, NotifyFailed

__all__ = [
    "Destination",
    "Notification",
    "Notifications",
    "Notifier",
    "NotifyFailed",
    "parse_destinations",
]
