"""A batch's state, derived from its run folders alone.

The batch keeps no state file of its own: whether a run is done, live, dead
mid-way or failed is read from its event log (and the log's lock, which a live
run holds), and how often it was tried from the folders of earlier attempts. So
a batch killed at any moment is resumed by running the same command again.

Layout of a batch folder (run ids: `<task>__<model>__s<seed>-<mac>`, see `run_ids`):

    .mlra-batch-key          the secret the run ids' suffixes are made with (0600);
                             absent in a folder made before ids were keyed
    runs/<run-id>/           the current attempt of each run (an ordinary run folder)
    retired/<run-id>__a<n>/  earlier attempts that failed and were retried
    logs/<run-id>.log        what `mlra run` printed, every attempt under its own
                             header line (where it ran), growing while it runs
    logs/<run-id>.json       the run's card: task, model, seed, and why it never
                             started where it did not (the report's row for a run
                             with no folder of its own)
    .drivers/<run-id>        locked by the `mlra batch` driving the run now (empty)
    .incoming/<token>/       a Ray batch's runs arriving from nodes without the shared
                             disk, one folder per batch process (executors/arrivals.py)
    runs/<run-id>/placement.json   where each start of the attempt ran (Ray: node id
                             and host); an attempt lost with its node before any of
                             its folder reached the batch folder is a retired folder
                             holding only this file, so it counts as an attempt

Which endings are retried: only failures that say nothing about the agent (an
internal error, a model provider that failed, a run that never started). A run
that ended by itself without a score (the deadline, a budget, no submission) is
final: retrying exactly those would bias a batch's mean upwards. So is a request
the model's window cannot hold (its ending's cause "window_overflow", though its
reason is "provider_error"): it says something of the model, and a retry would
spend hours to end the same way. And a replay that stopped where its recording was
killed (cause "recording_unfinished"): it would stop there again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, LogDamage, log_is_live, read_events
from mlra.agent.record.run_progress import glance
from mlra.agent.record.state import RunState, fold

RUNS, RETIRED, LOGS = "runs", "retired", "logs"
PLACEMENT = "placement.json"

Kind = Literal["pending", "running", "finished", "unscored", "failed", "interrupted"]
ENDED: tuple[Kind, ...] = ("finished", "unscored")
"""A run's kinds once it has ended for good: a batch runs it no more."""
"""`unscored`: ended for good without a score (deadline, budget, no submission, a
submission that scored nothing, a replay that diverged or whose recording was killed, a
window overflow); not retried. `failed`: retried up to the limit."""


@dataclass
class RunStatus:
    run_id: str
    kind: Kind
    reason: str = ""
    """Why a run failed or did not finish (`error`, `budget`, `no score`, ...)."""
    detail: str = ""
    attempts: int = 0
    """Starts so far: retired attempts, the current one and its resumes."""
    retries: int = 0
    """Attempts started afresh after a failed one: the retired folders after the first,
    and the current one where it has begun (a folder of its own)."""
    cost_usd: float = 0.0
    score: float | None = None
    metric: str = ""
    """The score's metric, as the task's evaluator names it."""
    glance: str = ""
    """A running run's clock and newest progress, from its log (agent/record/run_progress.py)."""


def retired_attempts(out: Path, run_id: str) -> list[Path]:
    folder = out / RETIRED
    if not folder.is_dir():
        return []
    return sorted(folder.glob(f"{run_id}__a*"), key=lambda p: int(p.name.rsplit("__a", 1)[1]))


def run_status(out: Path, run_id: str, *, copy: Path | None = None) -> RunStatus:
    """`copy`: the run's folder as its node's copy of its event logs (executors/live_log.py),
    for a run running where the batch folder is not: it is live while the batch has it."""
    retired = retired_attempts(out, run_id)
    earlier = len(retired)
    if copy is not None:
        status = _running_copy(copy, run_id, earlier)
        if status is not None:
            return status
    run_dir = out / RUNS / run_id
    log = run_dir / EVENTS_FILE
    if not log.is_file():
        if run_dir.exists():
            return RunStatus(
                run_id, "failed", "error", "no event log", attempts=earlier + 1, retries=earlier
            )
        # The attempt after the last retired one has not begun (queued, or refused before
        # it made its folder): it is no retry yet; the retired ones after the first were.
        status = RunStatus(run_id, "pending", attempts=earlier, retries=max(0, earlier - 1))
        last = read_placements(retired[-1]) if retired else []
        if last and last[-1].outcome:  # the last attempt was lost before it had a folder here
            status.reason, status.detail = last[-1].outcome, last[-1].detail
        return status
    live = log_is_live(log)
    try:
        events = read_events(log)
    except LogDamage as exc:
        return RunStatus(run_id, "failed", "error", str(exc), attempts=earlier + 1, retries=earlier)
    status, state = _running(run_id, events, earlier)
    if live:
        status.glance = _glance(run_dir, events, state)
        return status
    finished, evaluation = state.finished, state.evaluation
    if finished is None:
        status.kind, status.reason = "interrupted", "unfinished"
    elif finished.cause == "recording_unfinished":
        # A replay whose recording was killed there: resumed or retried, it stops again.
        status.kind = "unscored"
        status.reason, status.detail = finished.cause, finished.message
    elif finished.status == "stopped" and finished.reason == "stopped" and evaluation is None:
        # Stopped without evaluating: what a batch's Ctrl-C does to its runs.
        status.kind, status.reason = "interrupted", "stopped"
    elif finished.status == "finished" and evaluation is not None and evaluation.score is not None:
        status.kind, status.score = "finished", evaluation.score
        status.metric = evaluation.metric
    elif finished.status == "finished":
        # The run ended by itself (the agent, the deadline, a budget) with no score:
        # that is its outcome, and another try would only be a second draw.
        status.kind = "unscored"
        status.reason = "no score" if finished.reason == "submitted" else finished.reason
        status.detail = (evaluation.error if evaluation else None) or finished.message
    elif finished.reason == "replay_diverged" or finished.cause == "window_overflow":
        # A replay that departs from its recording departs again, and a request the
        # model's window cannot hold is made again, each run ending at once: no retry.
        status.kind = "unscored"
        status.reason, status.detail = finished.cause or finished.reason, finished.message
    else:
        status.kind = "failed"
        status.reason, status.detail = finished.reason, finished.message
    return status


def _running_copy(copy: Path, run_id: str, earlier: int) -> RunStatus | None:
    """A run's status from the copy of its logs, None where the copy has none to read
    (not begun, or gone as the run ended: its own folder says the rest)."""
    try:
        events = read_events(copy / EVENTS_FILE)
    except (OSError, LogDamage):
        return None
    if not events:
        return None
    status, state = _running(run_id, events, earlier)
    status.glance = _glance(copy, events, state)
    return status


def _running(run_id: str, events: list[ev.Event], earlier: int) -> tuple[RunStatus, RunState]:
    """A run read from its log as running, before its ending (if any) is read."""
    state = fold(events)
    resumes = sum(isinstance(e, ev.RunResumed) for e in events)
    status = RunStatus(
        run_id,
        "running",
        attempts=earlier + 1 + resumes,
        retries=earlier,
        cost_usd=state.cost_usd,
    )
    return status, state


def _glance(run_dir: Path, events: list[ev.Event], state: RunState) -> str:
    """A live run's clock and newest progress, with each running attempt's where it searches."""
    now = time.time()
    words = glance(events, state.elapsed_s, now)
    attempts = [
        _attempt_glance(run_dir, n.id, n.started.folder, now) for n in state.attempts.running
    ]
    return words + (" · " + "; ".join(attempts) if attempts else "")


def _attempt_glance(run_dir: Path, attempt: str, folder: str, now: float) -> str:
    """A searching run's running attempt, read from its own log (`a2 40s · step 100/600
    loss 5.1`): the run itself only waits for its attempts, so its own log says nothing
    of how they go."""
    try:
        events = read_events(run_dir / folder / EVENTS_FILE)
    except (OSError, LogDamage):
        return attempt  # not begun yet, or unreadable: its name alone
    return f"{attempt} {glance(events, fold(events).elapsed_s, now)}"


def retire(out: Path, run_id: str) -> Path:
    """Move a failed attempt aside so the run can start afresh under its own id."""
    n = len(retired_attempts(out, run_id)) + 1
    target = out / RETIRED / f"{run_id}__a{n}"
    target.parent.mkdir(parents=True, exist_ok=True)
    (out / RUNS / run_id).rename(target)
    return target


NODE_LOST = "node lost"
"""A placement's outcome where the attempt ended with its node: the only one counted
"lost with a node"."""

OUT_OF_MEMORY = "out of memory"
"""A placement's outcome where Ray killed the run for its memory: a failure of the run's,
which a batch report judges (batch/report_judged.py), as it is no lost node."""

DRIVERS = ".drivers"
"""`.drivers/<run-id>`: flock'ed by the `mlra batch` that drives the run now (kept: a
lock file removed could be locked by two, each on a file of its own)."""


@contextlib.contextmanager
def driving(out: Path, run_id: str) -> Iterator[bool]:
    """Whether this batch drives the run (held until the block ends), False where another
    `mlra batch` on the folder does. Two at once each read the run's state, then acted on
    it: both started it, or one set aside the attempt the other had just begun. A file
    system without `flock` (NFS) drives as before."""
    path = out / DRIVERS / run_id
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    mine = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        except OSError:
            pass
        mine = True
        _HELD.add(path.absolute())
        yield True
    finally:
        if mine:
            _HELD.discard(path.absolute())
        os.close(fd)


_HELD: set[Path] = set()
"""The `.drivers/` locks this process holds: its own runs are not "driven elsewhere" (a
report it writes as the cluster goes, locks still held, called them queued by a batch
still running, when that batch is this one, ending)."""


def driven_elsewhere(out: Path) -> list[str]:
    """The runs another `mlra batch` drives now (its `.drivers/` lock held; this process's
    own are not another's): a report written meanwhile calls them failed ("success 0%"), so the
    batch driving them writes it as it ends. The probe is shared, as `log_is_live`'s is."""
    held = []
    drivers = out / DRIVERS
    for path in sorted(drivers.iterdir()) if drivers.is_dir() else []:
        if path.absolute() in _HELD:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            held.append(path.name)
        except OSError:
            pass
        finally:
            os.close(fd)
    return held


class RunCard(BaseModel):
    """What the batch knows of a run before it has a folder: enough for its report row."""

    run_id: str
    task: str
    """The task as the batch tells it apart (`BatchTask.label`): its name, or the end of
    its folder's path where another of the batch's tasks has the same name."""
    model: str
    seed: int
    not_started: str | None = None
    """Why it never started, where it did not (`resources`, `usage`, `server unreachable`,
    `API unreachable`)."""
    detail: str = ""


def write_card(out: Path, card: RunCard) -> None:
    path = out / LOGS / f"{card.run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(card.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_cards(out: Path) -> dict[str, RunCard]:
    """The batch's run cards by run id (none for a plain runs folder)."""
    cards: dict[str, RunCard] = {}
    folder = out / LOGS
    if not folder.is_dir():
        return cards
    for path in sorted(folder.glob("*.json")):
        try:
            card = RunCard.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            continue  # not a card (or a damaged one): the run's own folder still counts
        cards[card.run_id] = card
    return cards


class Placement(BaseModel):
    """One start of an attempt on a node, and how it ended where the run could not say."""

    node_id: str
    host: str
    ip: str = ""
    started_at: float = 0.0
    outcome: str = ""
    """`node lost` (NODE_LOST) when the attempt ended with its node, or what else ended it
    outside the run (`out of memory`, `worker died`, `error on node`); empty when the run
    itself ended."""
    detail: str = ""

    @property
    def where(self) -> str:
        return f"{self.host} (node {self.node_id[:8]})"


def read_placements(folder: Path) -> list[Placement]:
    try:
        data = json.loads((folder / PLACEMENT).read_text(encoding="utf-8"))
        return [Placement.model_validate(p) for p in data]
    except (OSError, ValueError, TypeError, ValidationError):
        return []


def add_placement(folder: Path, placement: Placement) -> None:
    """Append to the folder's placements (written whole, then renamed over)."""
    entries = [*read_placements(folder), placement]
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (PLACEMENT + ".tmp")
    tmp.write_text(json.dumps([p.model_dump() for p in entries], indent=2) + "\n", encoding="utf-8")
    tmp.replace(folder / PLACEMENT)


def lost_attempt(out: Path, run_id: str, placement: Placement) -> Path:
    """An attempt that left nothing in the batch folder: a retired folder of its placement."""
    n = len(retired_attempts(out, run_id)) + 1
    folder = out / RETIRED / f"{run_id}__a{n}"
    add_placement(folder, placement)
    return folder
