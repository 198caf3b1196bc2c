"""The environment of what `--notify` runs on this machine (a command, notify-send).

Copied from mlra's own, for the user's command needs their PATH, HOME and desktop
session, but minus every variable whose name looks like a secret (the rule the
sandbox applies, tools/sandbox/env.py): mlra's environment holds the model provider's
API keys, and a notification command is no reason to hand them on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from mlra.tools.sandbox.env import is_secret_name


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not is_secret_name(name)}
    env.update(extra or {})
    return env
