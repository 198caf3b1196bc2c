"""The context window of a local server, read before the run and, where the server was
still loading its model then, read again once it answers.

llama-server answers every request with HTTP 503 "Loading model" until its model is
loaded, `/props` included. A run started with the server (a script starting both, a
restart) read no window, kept mlra's default and never asked again: requests sized for
32,768 tokens went to a server of 4,096 until one was refused, and a larger window went
unused. Now the window is asked once more after the first answer, and a window told
then is the run's from there (`context_window_learned`, saying where it was read).

`WindowReading` is what the OpenAI- and Anthropic-compatible providers share of it,
mixed in before `ModelProvider`; the reading itself is agent/providers/server_window.py.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from mlra.agent.providers.server_window import (
    ServerProbe,
    ServerUnreachable,
    read_server_window,
    unknown_note,
)


@dataclass(frozen=True)
class WindowTold:
    """A window the server told after the run had gone by another."""

    window: int
    assumed: int
    told_by: str


class WindowReading:
    name: str
    model: str
    context_window: int
    context_window_from: str
    max_output_tokens: int
    _api_key: str
    _output_set: bool
    _probe: ServerProbe
    _notices: list[str]

    _ask_again_at: str | None = None
    """The server's `/v1` URL, where its window is to be asked once more after it answers."""
    _window_told: WindowTold | None = None

    async def read_window(self, url: str, *, shown_url: str = "") -> None:
        """Before the run: the window as the server at `url` (its `/v1`) tells it; none
        told is said once, and asked again after the first answer where the server was
        loading its model. ServerUnreachable where it cannot be connected to at all."""
        found = await self._probe.window(url, self.model, self._api_key, shown_url=shown_url)
        if found is None:
            return  # the window was set or known: only whether the server is there
        if found.window is None:
            self._notices.append(unknown_note(self.name, found, self.context_window))
            self._ask_again_at = url if found.loading else None
            return
        self._take_window(found.window)

    async def read_window_again(self) -> None:
        """After an answer: the window of a server that was loading its model when asked
        before the run, asked once more (no retries; a server that still tells none
        keeps the default, as said)."""
        url, self._ask_again_at = self._ask_again_at, None
        if url is None:
            return
        with contextlib.suppress(ServerUnreachable):
            found = await read_server_window(url, self.model, self._api_key)
            if found.window is not None and found.window != self.context_window:
                told_by = f"{found.told_by}, read once its model was loaded"
                self._window_told = WindowTold(found.window, self.context_window, told_by)
                self._take_window(found.window)

    def take_window_told(self) -> WindowTold | None:
        told, self._window_told = self._window_told, None
        return told

    def _take_window(self, window: int) -> None:
        self.context_window = window
        self.context_window_from = "server"
        if not self._output_set:
            self.max_output_tokens = min(self.max_output_tokens, max(1, window // 4))
