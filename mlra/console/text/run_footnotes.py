"""The marks `mlra runs` puts in its table, and the footnotes under it that say what
each mark, and each run's note (a log shortened near its budget), means."""

from __future__ import annotations

from mlra.console.text.run_rows import RunRow
from mlra.terminal_text import printable_line

UNISOLATED = "*"
"""After a score earned without isolation (sandbox isolation "none")."""
SELF_REPORTED = "^"
"""After a score the workspace's own code wrote (the task's `metric.self_reported`)."""
MISMATCH = "result≠log"
LIVE = "(live)"
"""After a running run's status where it serves its controls (`mlra attach`, `mlra ctl`)."""


def footnotes(rows: list[RunRow], *, short_search: bool = False) -> list[str]:
    """`short_search`: the search column in its narrow form (run_rows.short_search_cell)."""
    notes = []
    if any(r.unisolated and r.score is not None for r in rows):
        notes.append(f"{UNISOLATED} unisolated: scored with sandbox isolation none")
    reported = sorted({(r.task, r.self_reported) for r in rows if r.self_reported})
    for task, why in reported:
        notes.append(f"{SELF_REPORTED} self-reported, not measured ({task}: {why})")
    bars = sorted({(r.task, r.success_bar) for r in rows if r.success_bar})
    if bars:
        notes.append(
            "success by the task's rule, as each run was judged: "
            + "; ".join(f"{task}: {bar}" for task, bar in bars)
        )
    if any(r.tokens_estimated for r in rows):
        notes.append(
            "~ estimated: the server sent no token counts for some calls (or they were cut "
            "off); mlra counted four characters a token"
        )
    if any(r.attempts is not None for r in rows) and short_search:
        notes.append(
            "search: attempts tried, the graded attempt and its validation score (sub: "
            "submitted; graded best: nothing was submitted, so the best validated one was "
            "graded), and the best validation where it is another's; how each attempt ended "
            "and the validation-to-test gap need a wider terminal (or --json)"
        )
    elif any(r.attempts is not None for r in rows):
        notes.append(
            "search: attempts tried and how they ended, the best validation (attempt, score), the graded attempt "
            "(sub: submitted; graded best: nothing was submitted, so the best validated one "
            "was graded) and its gap, test score minus validation score"
        )
    if any(r.live for r in rows):
        notes.append(
            f"{LIVE}: the run answers on its control socket: mlra attach ID watches and "
            "steers it, mlra ctl ID status|pause|stop... acts on it"
        )
    if any(r.regrades for r in rows):
        notes.append(
            "re-graded: the latest `mlra eval` of the run (and what it graded); "
            "score is the run's own"
        )
    if any(r.budget_memory_mb or r.budget_disk_mb for r in rows):
        notes.append(
            "budget: the run's use against its budget, everything it starts together (mem: "
            "while it runs; disk: its workspace and its attempts' folders), in GB"
        )
    if any(r.annotations for r in rows):
        notes.append("notes: annotations of the run's steps (`mlra annotate ID` lists them)")
    for row in rows:
        if row.log_shortened:
            notes.append(
                f"{row.id}: its log neared its size budget and was shortened from there "
                "(commands' output cut, for the model too: --log-budget)"
            )
        if row.result_mismatch:
            notes.append(f"{row.id}: {MISMATCH}: {row.problem}")
    return [printable_line(note) for note in notes]
