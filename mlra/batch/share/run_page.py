"""One run as one self-contained HTML page, written as its log is read.

run_read.py reads the log once; as it does, the transcript and the plan are written to
temporary files within their shares of the budget (transcript.py), and the curves are
thinned (curves_svg.py). The page is then put together: the header, what was redacted
and left out, the notes, the attempts, the curves, the plan, the transcript; copied in
pieces, so no part of it is ever held whole in memory.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import IO, Any

from mlra.batch.share import sections
from mlra.batch.share.curves_svg import MAX_BUCKETS
from mlra.batch.share.page import fold_buttons, head, tail
from mlra.batch.share.run_read import read_run
from mlra.batch.share.text import Redactor, esc_line, json_for_script
from mlra.batch.share.transcript import PlanChanges, Transcript

MB = 1024 * 1024
DEFAULT_MAX_MB = 20.0
FIXED_SHARE = 0.1
"""Of the budget, what the header, notes, attempts and curves may take (they are never
cut; a page whose fixed part exceeds it still has them whole)."""
PLAN_SHARE = 0.1
CURVES_SHARE = 0.25
"""Of the budget, what the curves may take before they are drawn with fewer points."""
MIN_BUCKETS = 25


def _copy(src: IO[bytes], out: IO[bytes], size: int) -> None:
    src.seek(0)
    while size > 0 and (chunk := src.read(min(size, 1 << 20))):
        out.write(chunk)
        size -= len(chunk)


def write_run_page(
    run_dir: Path, out_path: Path, *, max_mb: float = DEFAULT_MAX_MB, redact: Redactor | None = None
) -> dict[str, Any]:
    """Write the page; return what it says of itself (the embedded summary).

    The transcript is written while the log is read, before the parts never cut are
    known; once they are, it is copied only as far as the last step that still fits the
    budget beside them (FIXED_SHARE is the first guess at their size, not a bound)."""
    budget = int(max_mb * MB)
    redact = redact or Redactor()
    with (
        tempfile.TemporaryFile("w+b", dir=out_path.parent) as tbody,
        tempfile.TemporaryFile("w+b", dir=out_path.parent) as pbody,
    ):
        transcript = Transcript(tbody, int(budget * (1 - FIXED_SHARE - PLAN_SHARE)), redact)
        plan = PlanChanges(pbody, int(budget * PLAN_SHARE), redact)
        read = read_run(run_dir, transcript, plan)
        transcript.close()
        r = read.result
        top = head(
            esc_line(redact(f"{read.task or r.task} · {r.model} · mlra share"))
        ) + sections.header(read, redact)
        fixed = sections.fixed_sections(read, redact)
        buckets = MAX_BUCKETS
        drawn = sections.curves(read, buckets)
        while len(drawn) > budget * CURVES_SHARE and buckets > MIN_BUCKETS:
            buckets //= 2  # many curves: each drawn with fewer points, none left out
            drawn = sections.curves(read, buckets)
        fixed += drawn
        summary = sections.summary_data(read)
        for key in ("task", "task_label", "model", "run_id", "reason"):
            if isinstance(summary.get(key), str):
                summary[key] = redact(summary[key])
        plan_top = f"<h2>Plan, as it changed ({plan.changes})</h2>\n"
        steps_top = f"<h2>Transcript ({transcript.steps} steps)</h2>\n" + fold_buttons()
        written = f'<p class="dim">Page written {time.strftime("%Y-%m-%d %H:%M:%S %Z")}.</p>'
        reserve = 4096  # the list of what was left out, and the summary's counts
        around = top + fixed + plan_top + steps_top + written + tail(json_for_script(summary))
        room = budget - len(around.encode("utf-8")) - plan.written - reserve
        steps_size, cut_steps = transcript.fitting(max(0, room))
        transcript.steps_left_out += cut_steps
        left_out = sections.left_out(read, transcript, plan, buckets)
        summary["left_out"] = left_out
        summary["redacted"] = dict(redact.counts)
        partial = out_path.with_name(out_path.name + ".part")
        with open(partial, "wb") as out:
            for part in (top, sections.what_page_leaves(redact, left_out), fixed, plan_top):
                out.write(part.encode("utf-8"))
            _copy(pbody, out, plan.written)
            out.write(steps_top.encode("utf-8"))
            _copy(tbody, out, steps_size)
            out.write((written + tail(json_for_script(summary))).encode("utf-8"))
        partial.replace(out_path)
    return summary
