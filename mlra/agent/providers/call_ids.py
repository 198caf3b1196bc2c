"""A tool call's id, which no other call of its run may share.

A call's id keys its events in the run's log (`tool_call`, `tool_result`, `control`),
the user's decision at its breakpoint and its place in the console. Some
OpenAI-compatible servers send no ids, or the same one every time ("0"): such a call's
id was `call_0` in every answer, and after the user edited the first `call_0` at its
breakpoint, every later `call_0` ran with the edited arguments. A call sent with no id
gets one here (agent/providers/openai_replies.py); one its run has had already gets a
new one before the run sees it (agent/loop/model_turn.py).
"""

from __future__ import annotations

import uuid


def new_call_id(prefix: str = "call") -> str:
    """Random: no two runs need to share their ids, and a replay keeps the recording's.
    `prefix` says where the call came from (`call_text`: written in the answer's text)."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"
