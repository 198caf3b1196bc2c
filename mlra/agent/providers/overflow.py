"""What a server's "too long for the window" refusal states: its window, the size it
counted, and whether the answer's budget was part of that count.

A request refused as too long is mended before it is sent again (agent/loop/overflow_mend.py),
and mended by at least what the server said was too much: the numbers come from the
servers' own words, as they write them:

- llama.cpp's llama-server (and Ollama, which wraps its error in a string):
  "request (3090 tokens) exceeds the available context size (3072 tokens), try
  increasing it" (type `exceed_context_size_error`): the prompt alone is counted.
- vLLM, OpenAI and llama-cpp-python: "This model's maximum context length is 2048
  tokens. However, you requested 2130 tokens (1874 in the messages, 256 in the
  completion)": the answer's budget counts; "your request has M input tokens" and
  "your messages resulted in M tokens": it does not.
- Anthropic: "prompt is too long: 210000 tokens > 200000 maximum".
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Overflow:
    window: int | None
    """The window the server states, in its tokens."""
    requested: int | None
    """What it counted of the refused request, in its tokens."""
    answer_counts: bool
    """Whether `requested` holds the answer's budget (`max_tokens`) as well as the prompt:
    where it does not, a smaller answer does not mend the request."""

    @property
    def excess(self) -> int | None:
        """How many of the server's tokens were too many, where it says."""
        if self.window is None or self.requested is None:
            return None
        return max(1, self.requested - self.window)


_LLAMA_CPP = re.compile(
    r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)", re.I
)
_ANTHROPIC = re.compile(r"prompt is too long:\s*(\d+) tokens\s*>\s*(\d+)", re.I)
_MAXIMUM = re.compile(r"maximum context length is (\d+)", re.I)
_WITH_ANSWER = re.compile(r"(?:you requested|for a total of at least) (\d+) tokens", re.I)
_PROMPT_ONLY = re.compile(
    r"(?:request has|messages resulted in|prompt contains) (\d+)(?: input)? tokens", re.I
)


def stated_overflow(text: str) -> Overflow:
    """The numbers a refusal states; None where it states them not."""
    if found := _LLAMA_CPP.search(text):
        return Overflow(int(found.group(2)), int(found.group(1)), answer_counts=False)
    if found := _ANTHROPIC.search(text):
        return Overflow(int(found.group(2)), int(found.group(1)), answer_counts=False)
    window = _MAXIMUM.search(text)
    if window is None:
        return Overflow(None, None, answer_counts=True)
    if found := _WITH_ANSWER.search(text):
        return Overflow(int(window.group(1)), int(found.group(1)), answer_counts=True)
    if found := _PROMPT_ONLY.search(text):
        return Overflow(int(window.group(1)), int(found.group(1)), answer_counts=False)
    return Overflow(int(window.group(1)), None, answer_counts=True)
