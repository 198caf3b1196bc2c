"""The replay's playing: the run shown moving on by itself, events or agent steps at a
chosen rate, until a key stops it or the run ends.

Apart from the replay app (console/apps/replay_app.py) because it is a clock over the cursor,
nothing else: each tick moves the cursor as the arrow keys would and asks the app to
show it, so playing can never show what stepping would not.
"""

from __future__ import annotations

from textual.app import App
from textual.timer import Timer

from mlra.console.text.replay import PlayUnit, ReplayModel

RATES = [0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000]
DEFAULT_RATE = {"events": 5, "steps": 1}
"""Indices into RATES: 20 events a second, or 1 agent step a second."""
MIN_TICK_S = 0.05


class ReplayPlayback(App[int]):
    """The play keys of the replay (a mixin of `ReplayApp`, which sets these)."""

    model: ReplayModel
    playing: bool
    unit: PlayUnit
    rate_index: int
    _play_timer: Timer | None
    _play_credit: float

    def show_cursor(self) -> None:
        raise NotImplementedError

    def _tick(self) -> None:
        raise NotImplementedError

    def _playing_text(self) -> str | None:
        if not self.playing:
            return None
        rate = RATES[self.rate_index]
        return f"playing {rate:g} {self.unit if rate != 1 else self.unit[:-1]}/s"

    def action_play(self) -> None:
        if self.playing:
            self._stop_playing()
        elif self.model.cursor == len(self.model.events) - 1:
            self.notify("at the end of the run: Home goes back to its start")
            return
        else:
            self.playing = True
            self._play_credit = 0.0
            self._restart_timer()
        self._tick()

    def _stop_playing(self) -> None:
        self.playing = False
        if self._play_timer is not None:
            self._play_timer.stop()
            self._play_timer = None

    def _restart_timer(self) -> None:
        if self._play_timer is not None:
            self._play_timer.stop()
        rate = RATES[self.rate_index]
        self._play_timer = self.set_interval(max(MIN_TICK_S, 1 / rate), self._play_tick)

    def _play_tick(self) -> None:
        if not self.is_running:
            return  # shutting down (see MlraApp._on_tick_timer): the panes are going
        rate = RATES[self.rate_index]
        self._play_credit += rate * max(MIN_TICK_S, 1 / rate)
        moves = int(self._play_credit)
        self._play_credit -= moves
        model = self.model
        for _ in range(moves):
            before = model.cursor
            if self.unit == "steps":
                model.next_step()
            else:
                model.forward()
            if model.cursor == before:
                self._stop_playing()
                break
        self.show_cursor()

    def _set_rate(self, index: int) -> None:
        self.rate_index = max(0, min(len(RATES) - 1, index))
        if self.playing:
            self._restart_timer()
        self._tick()
        self.notify(f"speed: {RATES[self.rate_index]:g} {self.unit}/s", timeout=2)

    def action_faster(self) -> None:
        self._set_rate(self.rate_index + 1)

    def action_slower(self) -> None:
        self._set_rate(self.rate_index - 1)

    def action_play_unit(self) -> None:
        self.unit = "steps" if self.unit == "events" else "events"
        self._set_rate(DEFAULT_RATE[self.unit])
