"""Cutting long text down for the model.

The head of a command's output usually says what ran and the tail says how it
ended (the final loss, the traceback), so both are kept and the middle goes.
The tail gets the larger share because errors and results come last.
"""

from __future__ import annotations

HEAD_SHARE = 0.4
SNAP_FRACTION = 0.2
"""Cut at a line break when one lies within this fraction of a part's length."""


def truncate_middle(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to about `limit` characters (head 40 %, tail 60 %), and whether it was cut.

    The marker in between says how much was cut, so the model knows the output
    was longer and can look at the rest itself (e.g. with `sed -n` or a log file).
    """
    if len(text) <= limit:
        return text, False
    limit = max(limit, 0)
    head_len = int(limit * HEAD_SHARE)
    tail_len = limit - head_len

    head_end = head_len
    snapped_head = False
    newline = text.rfind("\n", 0, head_len)
    if newline != -1 and head_len - newline <= max(1, int(head_len * SNAP_FRACTION)):
        head_end = newline
        snapped_head = True

    tail_start = len(text) - tail_len
    snapped_tail = False
    newline = text.find("\n", tail_start)
    if newline != -1 and newline - tail_start < max(1, int(tail_len * SNAP_FRACTION)):
        tail_start = newline + 1
        snapped_tail = True
    tail_start = max(tail_start, head_end)

    cut = text[head_end:tail_start]
    lines = cut.count("\n")
    if snapped_head and snapped_tail:
        lines -= 1
    lines = max(lines, 0)
    line_word = "line" if lines == 1 else "lines"
    marker = f"\n[... {len(cut):,} characters ({lines:,} {line_word}) cut from the middle ...]\n"
    return text[:head_end] + marker + text[tail_start:], True
