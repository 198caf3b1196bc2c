"""Which columns of `mlra runs` a terminal too narrow for them all keeps (console/cli/
runs_cli.py, which first gives a search's cell its narrow form): long cells cut first,
then columns left out by their priority, then the id and the task's name cut in the middle.
"""

from __future__ import annotations

NOTES_HEADER = "notes"
"""The column a listing has when one of its runs has annotations (last)."""
SEARCH_HEADER = "search"
"""The column a listing has when one of its runs searched (after "exp.")."""
PRIORITY = [
    "id",
    "task",
    "status",
    "score",
    "success",
    "model",
    "reason",
    "normalized",
    SEARCH_HEADER,
    "best val.",
    "duration",
    "cost",
    "exp.",
    "re-graded",
    "tokens",
    "budget",
    "isol.",
    NOTES_HEADER,
    "forked from",
]
"""The columns in the order they are kept where the table is too wide: the run, what
it was, how it stands and how well it did (its score and verdict) first, then who did it
(the model: the key to comparing agents); the rest give way from the end of this list."""
KEPT = 5
"""The first columns of PRIORITY are kept whatever the width (the terminal cuts them)."""
GAP = 2
"""The spaces between two columns, in both the plain and the terminal table."""


def table_width(headers: list[str], table: list[list[str]]) -> int:
    """The table's width with every column whole."""
    widths = [max(len(h), *(len(c[i]) for c in table)) for i, h in enumerate(headers)]
    return sum(widths) + GAP * (len(headers) - 1)


def fit_columns(
    headers: list[str], table: list[list[str]], width: int
) -> tuple[list[str], list[list[str]]]:
    """The table with the fewest columns dropped for it to fit `width`, dropped in the
    reverse order of PRIORITY; the columns kept keep their order."""
    widths = {h: max(len(h), *(len(c[i]) for c in table)) for i, h in enumerate(headers)}
    kept = list(headers)
    droppable = [h for h in reversed(PRIORITY[KEPT:]) if h in widths]

    def total() -> int:
        return sum(widths[h] for h in kept) + GAP * (len(kept) - 1)

    # A long cell is cut before a column goes: a model of 53 characters cost the table
    # its duration, cost, search and forked-from columns at 160.
    for header, least in CUT_FIRST:
        if (over := total() - width) > 0 and widths.get(header, 0) > least:
            widths[header] = max(least, widths[header] - over)
            i = headers.index(header)
            for cells in table:
                cells[i] = middle_cut(cells[i], widths[header])
    while total() > width and droppable:
        kept.remove(droppable.pop(0))
    at = [headers.index(h) for h in kept]
    table = [[cells[i] for i in at] for cells in table]
    # Still too wide (an MLAgentBench task's ids run to 60 characters): the id, which
    # holds the task's name, then the task's, cut in the middle, not the status and score.
    for header, least in (("id", 30), ("task", 12)):
        if (over := total() - width) > 0 and widths[header] > least:
            widths[header] = max(least, widths[header] - over)
            i = kept.index(header)
            for cells in table:
                cells[i] = middle_cut(cells[i], widths[header])
    return kept, table


CUT_FIRST = (("model", 28), ("forked from", 24))
"""The cells cut (in the middle, to no less than this) before any column is left out:
a model's provider and name's end stay, a run id's date and hash."""


def middle_cut(text: str, width: int) -> str:
    """`text` in `width` characters: its start and its end (a run id's date and hash)."""
    if len(text) <= width:
        return text
    tail = (width - 1) // 2
    return text[: width - 1 - tail] + "…" + text[len(text) - tail :]
