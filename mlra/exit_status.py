"""The exit statuses by which `mlra run` (and `resume`, `fork`) tell a batch why they
refused to start, where the batch must act on the why: kept apart from the command line
so the batch reads them without importing it (batch/runner.py)."""

from __future__ import annotations

EXIT_USAGE = 2
"""Bad input: the same command is refused again, so it is not tried again."""
EXIT_SERVER_DOWN = 75
"""The `--base-url` server could not be connected to (sysexits' EX_TEMPFAIL): one that
is starting or restarting answers later, so a batch waits for it and tries again."""
EXIT_API_UNREACHABLE = 69
"""A vendor's own API could not be connected to (sysexits' EX_UNAVAILABLE): a machine
with no network stays so for a batch's minutes, so a batch ends the run at once."""
