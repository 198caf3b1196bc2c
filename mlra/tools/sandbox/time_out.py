"""A command's time-out that its run may raise while the command runs.

A command never outlives its run's deadline, so its time-out is the lesser of its own
and the time the run has left when it starts. A search's attempt can be given more time
while it runs (a later attempt's larger share: agent/loop/attempt_time.py); a command
the old deadline bound was then killed at the limit it started under, though its run
now went on. Its time-out is this object, which the run raises with its deadline
(agent/loop/tool_step.py), and a sandbox waiting on the command reads it again when
the old one is spent (tools/sandbox/runner.py).
"""

from __future__ import annotations


class TimeOut:
    """Seconds of a command's own running time (pauses not counted) before it is killed.
    Only ever raised, never past `wanted`: a waiter that finds it spent reads it again."""

    def __init__(self, seconds: float, *, wanted: float | None = None) -> None:
        self.seconds = float(seconds)  # an int's `__float__` may not hand back an int
        self.wanted = float(max(seconds, wanted) if wanted is not None else seconds)
        """The command's own time-out (its `timeout`, else the run's default), which no
        raise of the run's deadline takes it past."""

    @property
    def bound(self) -> bool:
        """The run's deadline, not the command's own time-out, is what will stop it."""
        return self.seconds < self.wanted

    def raise_by(self, seconds: float) -> bool:
        """Move it `seconds` later (no further than `wanted`); whether it moved."""
        moved = min(self.wanted, self.seconds + seconds)
        if moved <= self.seconds:
            return False
        self.seconds = moved
        return True

    def cap(self, seconds: float) -> None:
        """Never past `seconds`, now or after any raise (a grading's own time-out, which
        a validation's time-out from its run must keep too)."""
        self.wanted = min(self.wanted, float(seconds))
        self.seconds = min(self.seconds, self.wanted)

    def __float__(self) -> float:
        return float(self.seconds)

    def __repr__(self) -> str:
        return f"TimeOut({self.seconds:g}, wanted={self.wanted:g})"
