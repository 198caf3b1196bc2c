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


def _copy(src: IO[str], out: IO[str]) -> None:
    src.seek(0)
    while chunk := src.read(1 << 20):
        out.write(chunk)


def write_run_page(
    run_dir: Path, out_path: Path, *, max_mb: float = DEFAULT_MAX_MB, redact: Redactor | None = None
) -> dict[str, Any]:
    """Write the page; return what it says of itself (the embedded summary)."""
    budget = int(max_mb * MB)
    redact = redact or Redactor()
    with (
        tempfile.TemporaryFile("w+", encoding="utf-8", dir=out_path.parent) as tbody,
        tempfile.TemporaryFile("w+", encoding="utf-8", dir=out_path.parent) as pbody,
    ):
        transcript = Transcript(tbody, int(budget * (1 - FIXED_SHARE - PLAN_SHARE)), redact)
        plan = PlanChanges(pbody, int(budget * PLAN_SHARE), redact)
        read = read_run(run_dir, transcript, plan)
        transcript.close()
        fixed = sections.fixed_sections(read, redact)
        summary = sections.summary_data(read)
        left_out = sections.left_out(read, transcript, plan)
        summary["left_out"] = left_out
        summary["redacted"] = dict(redact.counts)
        partial = out_path.with_name(out_path.name + ".part")
        with open(partial, "w", encoding="utf-8", newline="\n") as out:
            title = esc_line(f"{read.result.task} · {read.result.model} · mlra share")
            out.write(head(title))
            out.write(sections.header(read, redact))
            out.write(sections.what_page_leaves(redact, left_out))
            out.write(fixed)
            out.write(f"<h2>Plan, as it changed ({plan.changes})</h2>\n")
            _copy(pbody, out)
            out.write(f"<h2>Transcript ({transcript.steps} steps)</h2>\n")
            out.write(fold_buttons())
            _copy(tbody, out)
            out.write(f'<p class="dim">Page written {time.strftime("%Y-%m-%d %H:%M:%S %Z")}.</p>')
            out.write(tail(json_for_script(summary)))
        partial.replace(out_path)
    return summary
