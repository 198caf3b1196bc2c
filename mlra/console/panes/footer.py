"""The footer: the keys that apply now, and on a terminal too narrow for all of them
the ones that matter most (quit and help always; a waiting call's approve, edit and
reject before breakpoints and stepping). A key left out still works: help (?) and
the command palette list every key."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.events import Resize
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from mlra.console.text.keymap import KEYS, REPLAY_KEYS, Key

KEPT = ("quit", "help")
"""Never left out: how to leave, and how to find every other key."""


def _ranks(keys: Iterable[Key]) -> dict[str, int]:
    return {k.action: k.gives_way for k in keys}


RANKS = {**_ranks(REPLAY_KEYS), **_ranks(KEYS)}


class ChoosesFooterKeys:
    """An app whose footer leaves out some of its enabled keys (the live console's,
    console/screens/run_control_keys.py); the footer of any other app offers them all."""

    def in_footer(self, action: str) -> bool:
        """Whether the footer offers the enabled key of `action`."""
        return True


def key_width(key: FooterKey, *, compact: bool) -> int:
    """The cells a key takes in the footer (Textual's FooterKey styles: compact keys
    have no padding and a margin of one; wide ones pad the key on both sides)."""
    text = cell_len(key.key_display) + 1 + cell_len(key.description)
    return text + 1 if compact else text + 2


def fitting(keys: list[FooterKey], width: int, *, compact: bool) -> list[FooterKey]:
    """The keys to show within `width` cells: those of the highest `gives_way` go
    first, then the rightmost; quit and help stay."""
    shown = list(keys)

    def total() -> int:
        return sum(key_width(k, compact=compact) for k in shown)

    droppable = [k for k in shown if k.action not in KEPT]
    # Highest rank first; among equals, the rightmost first.
    order = sorted(droppable, key=lambda k: (RANKS.get(k.action, 0), shown.index(k)), reverse=True)
    for key in order:
        if total() <= width:
            break
        shown.remove(key)
    return shown


class KeyFooter(Footer):
    """Textual's footer, leaving out what does not fit rather than cutting off the right."""

    _width = 0
    _shown: tuple[object, ...] | None = None
    """What the footer was last composed from (`_keys_now`)."""

    def _keys_now(self) -> tuple[object, ...]:
        """What the footer would show now: the screen's keys as the footer draws them,
        which of them the app offers, the width and the style."""
        offered = self._offered()
        keys = tuple(
            (b.key, b.description, b.action, enabled, tooltip, b.group and b.group.description)
            + ((offered(b.action),) if offered is not None else ())
            for _, b, enabled, tooltip in self.screen.active_bindings.values()
            if b.show
        )
        return keys, self.size.width, self.compact, self.app.app_focus

    def _offered(self) -> Callable[[str], bool] | None:
        app = self.app
        return app.in_footer if isinstance(app, ChoosesFooterKeys) else None

    def bindings_changed(self, screen: Screen) -> None:
        """Textual recomposes the footer whenever a screen's bindings are refreshed: each
        time a dialog closes, the focus moves or the run's phase changes. Rebuilding a
        row of keys lays the whole screen out again, which under an output flood put a
        key's answer behind a tenth of a second of layout, so the footer is rebuilt
        only when what it shows would change."""
        if self._shown is not None and screen is self.screen and self._keys_now() == self._shown:
            return
        super().bindings_changed(screen)

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown = self._keys_now()
        composed: list[Widget] = list(super().compose())
        palette = [w for w in composed if w.has_class("-command-palette")]
        keys = [w for w in composed if isinstance(w, FooterKey) and w not in palette]
        offered = self._offered()
        if offered is not None:
            hidden = [k for k in keys if not offered(k.action)]
            composed = [w for w in composed if w not in hidden]
            keys = [k for k in keys if k not in hidden]
        room = self.size.width or self.app.size.width
        for widget in palette:
            if isinstance(widget, FooterKey):
                room -= key_width(widget, compact=False) + 1  # docked right, with a border
        kept = fitting(keys, room, compact=self.compact)
        yield from (w for w in composed if w in kept or w not in keys)

    def on_resize(self, event: Resize) -> None:
        """A key that did not fit may fit now, and the other way round."""
        if event.size.width != self._width:
            self._width = event.size.width
            self.refresh(recompose=True)

    def watch_compact(self) -> None:
        self.refresh(recompose=True)
