"""Which series are curves and which are one-off numbers: the one rule the Curves view
(console/text/curves_data.py), the report's panels and table (batch/report_curves.py) and
the exports (batch/export/source.py) share, so a number is a curve in all of them or in
none.

A training script prints its settings and sizes beside its metrics. Prose lines of them
(tiny-lm's `model: 0.69M parameters, d=128, layers=2`) are no progress lines and give
no points (log_lines.py); on a progress line or in a metrics file one may still be
repeated (`{"step": 10, "loss": 2.3, "batch_size": 32}`), and an older run's log holds
`d` and `layers` as series. A researcher opens a plot to see what moved over the run; drawn,
such a number is a dot or a flat line that takes a panel (and an axis: 2048 beside a
loss of 4) a moving curve needed. So:

- a series is a **curve** where its values change: two readings or more, not all equal;
- any other is a **one-off number**, read once or the same at every reading: what it
  says is its value, so it is listed and exported as a value, not drawn.

Counting readings alone would draw `batch_size` repeated on every line, or a constant
learning rate, as a curve; judging by name would guess. The cost of going by values: a
metric that never moved in a run (a loss stuck at one printed value) is a one-off of
that run alone, still listed with its value and its count of readings. Where runs are
shown or exported together, a name is a curve where it is one in any of them
(batch/curves.py's `curve_names`), so a run whose loss stuck, or that stopped after its
first reading, still lays its points over the others'.
"""

from __future__ import annotations

from collections.abc import Iterable


def is_curve(values: Iterable[float]) -> bool:
    """Whether these readings (in order) change: a curve, not a one-off number."""
    first: float | None = None
    for value in values:
        if first is None:
            first = value
        elif value != first:
            return True
    return False
