"""The user's model server, asked before a run starts (`mlra run`, `resume`, `fork`).

Kept apart so the three commands refuse alike: a base URL nothing answers at (refused,
no such host, a TLS failure) is said as bad input is, in one line (exit status 75) before a
run folder is made or a run log is written, not as `provider_error` after the model
call's retries. A vendor's own API is only connected to (agent/providers/api_reach.py):
a name that does not resolve or a port that refuses is refused alike (exit status 69),
as no retry mends it; an outage once the run has begun is the run's retries' and its pause's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mlra.agent.providers.api_reach import HostedApiUnreachable
from mlra.agent.providers.server_window import ServerUnreachable
from mlra.console.text.args import ApiUnreachable, ServerDown


def limits_or_refused(provider: Any) -> None:
    """The provider's limits as its server tells them (`discover_limits`), or a UsageError
    where its server cannot be reached at all (`ServerDown` for a `--base-url` server,
    `ApiUnreachable` for a vendor's API: told apart by exit status, a batch waits for
    the one and not the other). A server that is up but slow or erring is no refusal:
    the run starts, with the default window and the warning that says so."""

    if provider is None:
        return
    try:
        asyncio.run(provider.discover_limits())
    except HostedApiUnreachable as exc:
        raise ApiUnreachable(str(exc)) from None
    except ServerUnreachable as exc:
        raise ServerDown(str(exc)) from None
