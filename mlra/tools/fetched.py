"""What a research tool brought in from the network, as the log records it.

The research tools run host-side and place what they fetch into the workspace.
Each one puts a list of these under the key "fetched" in its outcome's data,
which the `tool_result` event keeps verbatim, so a replay knows which repository
at which commit, or which paper with which hash, appeared where, without
going to the network again.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

FetchedKind = Literal["git", "arxiv_pdf", "arxiv_search"]


class Fetched(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: FetchedKind
    source: str
    """The clone URL, the PDF's URL or the search's query URL."""
    path: str | None = None
    """Where it landed in the workspace (relative); None for a search, which writes nothing."""
    commit: str | None = None
    sha256: str | None = None
    bytes: int = 0
    cached: bool = False
    """True when the workspace already held it and nothing was downloaded."""

    def record(self) -> dict[str, Any]:
        return self.model_dump()
