"""Notifications (`--notify`): telling a user who walked away what needs them.

note.py holds the notification and the `Notifier` interface, triggers.py which of
the run's events notify and what they say, hub.py the run's subscriber that sends
them off the run's path, destinations.py reads `--notify`, and bell.py, desktop.py,
command.py and webhook.py are the destinations.
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
