"""The garbage collector's pace in a process whose console shares its event loop with
a live run.

A command printing thousands of lines a second makes tens of thousands of small
objects a second that live a tenth of a second (a batch of output waiting to be drawn,
its parsed metrics). At Python's default pace (a young collection every 700
allocations) they outlive two young collections, reach the oldest generation, and set
off a full collection every few seconds, which scans every object the process holds:
measured under such a flood (bench/key_latency.py), 14 full passes in a minute of
about 260 ms each, a key's answer waiting behind whichever was running. Collecting the
young less often lets those objects die young, and freezing what the process built
before the run (modules, schemas, the app) keeps the passes that remain from
rescanning it. Cycles are still collected; only the pace changes."""

from __future__ import annotations

import gc

YOUNG_COLLECTION_EVERY = 20_000
"""Allocations between young collections (Python's default: 700). Measured beside the
default, under the bench's flood: full collections went from 14 a minute to none, the
collector's time from about 4 s to under 1 s a minute, the longest pause from 640 ms
to 140 ms (docs/measurements.md)."""


def steady_collector() -> None:
    """For a process that is the console's alone (`mlra run`, `resume`, `fork`,
    `attach`): not for a test process, where freezing keeps every earlier test's
    objects for good."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)
