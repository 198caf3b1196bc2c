"""A model's answer as it streams: logged in pieces (`text_delta`) while the run's log
is short of its size budget's shortening point (agent/record/log_budget.py).

Past that point the pieces go to the live console alone (agent/loop/unlogged.py): the
answer that arrives is logged whole (`model_call`, and the thought or message the
transcript shows), so a replay shows what the live console ended with, and a model
that writes at length no longer grows the log twice. An answer given up on (a lost
connection, a retry, the run's end) has no such record, so its text so far is logged
then as one piece marked `whole`, which the displays put in place of the pieces they
showed: a replay shows the cut-off answer as the live console did.
"""

from __future__ import annotations

from mlra import events as ev
from mlra.agent.loop.run_context import RunContext

DELTA_FLUSH_CHARS = 64
"""Streamed model text is logged in pieces of about this size, not per token."""


class AnswerStream:
    def __init__(self, run: RunContext, agent: ev.AgentRole, turn: int) -> None:
        self._run = run
        self._agent: ev.AgentRole = agent
        self._turn = turn
        self._buffer: list[str] = []
        self._pieces: list[str] = []
        """The answer's text so far, in the pieces it came in (logged or not)."""
        self._held = False
        """Some of its pieces went to the live console only."""

    def add(self, piece: str) -> None:
        self._buffer.append(piece)
        if "\n" in piece or sum(map(len, self._buffer)) >= DELTA_FLUSH_CHARS:
            self.flush()

    def flush(self) -> None:
        if not self._buffer:
            return
        text = "".join(self._buffer)
        self._buffer.clear()
        self._pieces.append(text)
        delta = ev.TextDelta(agent=self._agent, turn=self._turn, text=text)
        if self._run.log_budget.shortening():
            self._held = True
            self._run.unlogged.show(delta)
        else:
            self._run.emit(delta)

    def answered(self) -> None:
        """The answer arrived, and is logged whole: what streamed is let go."""
        self.flush()
        self._pieces.clear()
        self._held = False

    def given_up(self) -> None:
        """The answer will not be its turn's (a failure, a retry, the run's end): logged
        before what says so, whole where the log did not take all of its pieces; an
        answer asked again streams from nothing."""
        self.flush()
        if self._held:
            text = "".join(self._pieces)
            self._run.emit(ev.TextDelta(agent=self._agent, turn=self._turn, text=text, whole=True))
        self._pieces.clear()
        self._held = False
