"""A run folder's result as the batch report reads it: its result.json where that still
stands for the log (a log grown since, by a resume or a kill, makes it stale), else the
log folded, so a run that never wrote one, or was killed, is counted from what it did.
"""

from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, LogDamage, log_is_live, read_events
from mlra.agent.record.run_result import RunResult, result_of, stands_for_log
from mlra.agent.record.state import fold


def load_run(run_dir: Path) -> tuple[RunResult, int | None, bool] | None:
    """A run folder's result, its seed and whether it started (None: nothing to read)."""
    log = run_dir / EVENTS_FILE
    events: list[ev.Event] = []
    if log.is_file():
        try:
            events = read_events(log)
        except LogDamage:
            events = []
    seed = None
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    if started is not None:
        seed = started.config.get("seed")
    result_file = run_dir / "result.json"
    stored = None
    if result_file.is_file():
        stored = RunResult.model_validate_json(result_file.read_text(encoding="utf-8"))
    if stored is not None and (not events or stands_for_log(stored, result_file, log)):
        if stored.isolation is None and started is not None:  # a result.json from before
            stored.isolation = started.sandbox.isolation
        return stored, seed, started is not None or bool(stored.task)
    if started is None:
        return None
    state = fold(events)
    # `running` or `interrupted`, as `mlra compare` says it in the same report: both were
    # "unfinished", a run still going said not to have finished.
    return result_of(state, running=log_is_live(log)), seed, True
