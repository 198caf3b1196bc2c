"""A run's limits as its events set them: its start's, then each resume's or fork's
settings (`--time-limit`, say) and each raise of its time limit (`time_limit_raised`).

The one fold of them: the run's state (agent/record/state.py) keeps one, and so does a
display that says a call by the time the run had left as it was made (the headless
lines, the console's transcript, the replay: console/text/event_lines.py), so none
of them can count a raise or a resume the others do not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlra import events as ev


@dataclass
class RunLimits:
    limits: ev.Limits | None = None
    """The limits the run has now (None before its `run_started`)."""
    changed: dict[str, Any] = field(default_factory=dict)
    """The settings a resume, a fork or a raise changed since `run_started` (its config's
    names): `limits` holds those that are limits; a settings view lays them over the
    config."""

    def apply(self, event: ev.Event) -> None:
        match event:
            case ev.RunStarted():
                self.limits = event.limits
            case ev.RunResumed() | ev.RunForked():
                self._settings(event.settings)
            case ev.TimeLimitRaised():
                self._settings({"time_limit_s": event.limit_s})
            case _:
                pass

    def _settings(self, changed: dict[str, Any]) -> None:
        """Limits a resume, a fork or a raise changed: the run goes on under them."""
        self.changed.update(changed)
        if self.limits is not None:
            known = {k: v for k, v in changed.items() if k in ev.Limits.model_fields}
            self.limits = ev.Limits.model_validate({**self.limits.model_dump(), **known})

    @property
    def time_limit_s(self) -> float | None:
        """The run's time limit now; a printer of a resumed run, which sees no
        `run_started`, knows it where the resume set it (`--time-limit`) or raised it."""
        if self.limits is not None:
            return self.limits.time_limit_s
        limit = self.changed.get("time_limit_s")
        return None if limit is None else float(limit)

    def left_at(self, t: float) -> float | None:
        """The run's time left at run time `t` under its limit now; None where no event
        said the limit."""
        limit = self.time_limit_s
        return None if limit is None else limit - t
