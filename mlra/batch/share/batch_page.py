"""A batch (or a folder of runs) as one self-contained page: a table of its groups as
`mlra report` counts them, one table a task of its runs' outcomes, then the runs
compared as `mlra report` compares them, with their curves (compare_section.py).

The rows are the report's (batch/report_rows.py: the same counting of attempts and
seeds), so the page and report.md agree; each run's log is named by its SHA-256. A run's
own transcript and its every curve are its own page (`mlra share RUN`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlra import __version__
from mlra.agent.record.eventlog import EVENTS_FILE
from mlra.agent.record.run_result import log_digest
from mlra.batch.report_rows import RunRow, collect, summarize
from mlra.batch.report_tables import search_counts, success_cell
from mlra.batch.share.compare_section import comparison
from mlra.batch.share.page import head, tail
from mlra.batch.share.run_page import CURVES_SHARE, DEFAULT_MAX_MB, MB
from mlra.batch.share.run_read import NotARun
from mlra.batch.share.text import Redactor, esc, esc_line, json_for_script
from mlra.batch.state import RUNS
from mlra.durations import format_duration


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _success(r: RunRow) -> str:
    """Said as `mlra compare` says it: a run with no score, or whose task does not say
    which way its metric improves, was not judged, which "no" would hide."""
    if r.score is None:
        return "no score"
    if r.self_reported:
        return "self-reported"
    if not r.direction_known or r.success is None:
        return "not judged"
    return "yes" if r.success else "no"


def write_batch_page(
    folder: Path, out_path: Path, redact: Redactor | None = None, max_mb: float = DEFAULT_MAX_MB
) -> dict[str, Any]:
    redact = redact or Redactor()
    rows = collect(folder)
    if not rows:
        raise NotARun(f"{folder} holds no runs")
    groups = summarize(rows)
    runs_dir = folder / RUNS if (folder / RUNS).is_dir() else folder
    line = lambda t: esc_line(redact(t))  # noqa: E731
    parts = [head(line(f"{folder.name} · batch · mlra share"))]
    parts.append(
        f'<h1>{line(folder.name)} <span class="dim">· {len(rows)} runs, '
        f"{len(groups)} task and model group{'' if len(groups) == 1 else 's'} · "
        f"mlra {esc(__version__)}</span></h1>\n"
    )
    parts.append(
        "<h2>Groups</h2><table><tr><th>task</th><th>model</th><th>runs</th><th>scored</th>"
        "<th>score mean ± se</th><th>success</th><th>median time</th><th>tokens</th>"
        "<th>cost</th></tr>"
    )
    for g in groups:
        se = "" if g.score_se is None else f" ± {g.score_se:.3g}"
        success = success_cell(g)
        median = "-" if g.median_duration_s is None else format_duration(g.median_duration_s)
        parts.append(
            f'<tr><td>{line(g.task)}</td><td>{line(g.model)}</td><td class="num">{g.runs}</td>'
            f'<td class="num">{g.scored}</td><td class="num">{_num(g.score_mean)}{se}</td>'
            f'<td>{success}</td><td>{median}</td><td class="num">{g.tokens:,}</td>'
            f'<td class="num">${g.cost_usd:.4f}</td></tr>'
        )
    parts.append("</table>\n")
    data: dict[str, Any] = {"mlra_version": __version__, "runs": []}
    for task in sorted({r.task for r in rows}):
        members = [r for r in rows if r.task == task]
        parts.append(
            f"<h2>{line(task or '(no task)')} ({len(members)})</h2><table><tr><th>run</th>"
            "<th>model</th><th>seed</th><th>try</th><th>status</th><th>score</th>"
            "<th>success</th><th>best validation</th><th>attempts</th><th>time</th>"
            "<th>cost</th><th>log SHA-256</th></tr>"
        )
        for r in members:
            log = runs_dir / r.run_id / EVENTS_FILE
            sha = log_digest(log) if log.is_file() and r.counted else ""
            searched = search_counts(r) if r.searched else "-"
            # "try": which start of the run (1, then a retry's 2), headed "start" before,
            # which read as a time. An interrupted run's failure is its status.
            status = r.status + (f" ({r.failure})" if r.failure not in (None, r.status) else "")
            parts.append(
                f"<tr><td>{line(r.run_id)}</td><td>{line(r.model)}</td><td>{'-' if r.seed is None else r.seed}</td>"
                f"<td>{r.attempt}{'' if r.counted else ' (not counted)'}</td>"
                f'<td>{line(status)}</td><td class="num">{_num(r.score)}</td>'
                f"<td>{_success(r)}</td>"
                f'<td class="num">{_num(r.best_validation)}</td><td>{esc(searched)}</td>'
                f'<td>{format_duration(r.duration_s)}</td><td class="num">${r.cost_usd:.4f}</td>'
                f"<td><code>{sha[:16]}</code></td></tr>"
            )
            data["runs"].append(
                {  # redacted as the table above is: the JSON carried what the table hid
                    "run_id": redact(r.run_id),
                    "task": redact(r.task),
                    "model": redact(r.model),
                    "seed": r.seed,
                    "status": r.status,
                    "score": r.score,
                    "success": r.success,
                    "log_sha256": sha or None,
                }
            )
        parts.append("</table>\n")
    compared, data["compared"] = comparison(folder, rows, redact, int(max_mb * MB * CURVES_SHARE))
    parts.append(compared)
    redacted = ", ".join(f"{n} × {k}" for k, n in sorted(redact.counts.items())) or "nothing"
    parts.append(f'<p class="dim">Redacted: {esc(redacted)}.</p>\n')
    data["redacted"] = dict(redact.counts)
    parts.append(tail(json_for_script(data)))
    partial = out_path.with_name(out_path.name + ".part")
    partial.write_text("".join(parts), encoding="utf-8")
    partial.replace(out_path)
    return data
