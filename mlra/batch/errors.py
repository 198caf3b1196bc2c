"""The batch's one error: input it cannot run as given (the message is one readable line)."""

from __future__ import annotations


class BatchError(Exception):
    """A batch that cannot be run as given; the message is one readable line."""
