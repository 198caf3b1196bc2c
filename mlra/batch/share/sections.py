"""The parts of a run's page that are never cut: its header, what the page redacted and
left out, people's notes, the attempts (a tree and a table) and the curves.

Each is written from the fold of the whole log (run_page.py), every text through
text.py's escaping and redaction: a task name, a note or an attempt's summary is the
run's text as much as the agent's output is.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from mlra import __version__
from mlra.batch.share.curves_svg import series_svg, svg
from mlra.batch.share.text import Redactor, esc, esc_line
from mlra.durations import format_duration
from mlra.scores import format_normalized

if TYPE_CHECKING:
    from mlra.batch.share.run_read import RunRead
    from mlra.batch.share.transcript import PlanChanges, Transcript


def _num(value: float | None, digits: int = 6) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _row(name: str, value_html: str) -> str:
    return f"<tr><td>{name}</td><td>{value_html}</td></tr>"


def verdict(read: RunRead) -> str:
    r = read.result
    if read.status == "running":
        return "still running (a snapshot as of now)"
    if r.score is None:
        return f"no score ({r.reason})"
    if r.self_reported:
        return "self-reported score, not a measurement"
    if r.success is None:
        return "not judged"
    return "success" if r.success else "not a success"


def header(read: RunRead, redact: Redactor) -> str:
    r, s = read.result, read.state
    line = lambda t: esc_line(redact(t))  # noqa: E731
    score = "-" if r.score is None else f"{line(r.metric or 'score')} = {_num(r.score)}"
    if r.normalized_score is not None:
        score += f" (normalized {format_normalized(r.normalized_score)})"
    cls = "good" if r.success else "poor" if r.success is False else "warn"
    started = (
        datetime.datetime.fromtimestamp(s.started_ts, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        if s.started_ts
        else "-"
    )
    rows = [
        _row(
            "task",
            line(read.task or r.task)
            + (f' <span class="dim">{line(s.task_title)}</span>' if s.task_title else ""),
        ),
        _row("model", line(r.model)),
        _row(
            "status",
            # A run with no ending has no reason of its own (it was "interrupted (error)").
            line(read.status) + (f" ({line(r.reason)})" if r.reason != read.status else ""),
        ),
        _row("score", score),
        _row(
            "verdict",
            f'<span class="{cls}">{esc(verdict(read))}</span>'
            + (f' <span class="dim">{line(r.success_bar)}</span>' if r.success_bar else ""),
        ),
        _row("started", started),
        _row(
            "time",
            f"{format_duration(r.duration_s)} on the run clock, {format_duration(r.wall_s)} wall",
        ),
        _row("steps · tool calls", f"{r.steps} · {r.tool_calls}"),
        _row("tokens", f"{'~' if r.tokens_estimated else ''}{r.tokens:,}"),
        _row("cost", f"${r.cost_usd:.4f}"),
        _row(
            "isolation",
            line(r.isolation or "-") + (' <b class="poor">UNISOLATED</b>' if r.unisolated else ""),
        ),
        _row("run id", line(r.run_id)),
        _row(
            "mlra",
            f"{line(read.recorded_by or '-')} (recorded the run), {esc(__version__)} (wrote "
            f"this page); log {read.size:,} bytes, SHA-256 <code>{read.sha256}</code>",
        ),
    ]
    if r.best_validation is not None:
        rows.insert(
            4,
            _row("best validation", f"{line(r.validation_metric or '')} {_num(r.best_validation)}"),
        )
    return (
        f'<h1>{line(read.task or r.task)} <span class="dim">· {line(r.model)}</span></h1>\n'
        f'<table class="kv">{"".join(rows)}</table>\n'
    )


def left_out(
    read: RunRead, transcript: Transcript, plan: PlanChanges, buckets: int
) -> dict[str, int]:
    counts = {
        "transcript texts cut to head and tail": transcript.texts_cut,
        "transcript steps left out past the size budget": transcript.steps_left_out,
        "plan changes left out past the size budget": plan.left_out,
        "plan step texts cut to head and tail": plan.texts_cut,
        "curve points thinned (each bucket's extremes kept)": read.curves.left_out(buckets)
        + read.attempts.left_out(buckets),
        "attempts whose curves are not drawn (past the first 24)": read.attempts.left_out_attempts,
        "log lines that were not events": read.bad_lines,
        "bytes of a half-written last line": read.torn_tail,
    }
    return {k: v for k, v in counts.items() if v}


def what_page_leaves(redact: Redactor, left: dict[str, int]) -> str:
    parts = ["<h2>What this page leaves out</h2><ul>"]
    if redact.counts:
        for kind, n in sorted(redact.counts.items()):
            parts.append(f"<li>redacted: {n} × {esc(kind)}</li>")
    else:
        parts.append("<li>redacted: nothing matched a secret's pattern</li>")
    for what, n in left.items():
        parts.append(f"<li>{esc(what)}: {n:,}</li>")
    if not left:
        parts.append("<li>nothing else: every text is whole</li>")
    parts.append(
        "<li>the streamed pieces (text deltas, command output chunks) and resource samples: "
        "the transcript shows each whole text and result instead</li></ul>\n"
    )
    return "".join(parts)


def _notes(read: RunRead, redact: Redactor) -> str:
    if not read.notes:
        return '<h2>Notes</h2><p class="dim">No one has annotated this run.</p>\n'
    rows = []
    for n in read.notes:
        when = datetime.datetime.fromtimestamp(n.ts, datetime.UTC).strftime("%Y-%m-%d %H:%M")
        rating = "" if n.rating is None else f"{n.rating:+d}"
        tags = " ".join(f"#{t}" for t in n.tags)
        rows.append(
            f'<tr><td class="num">{n.step}</td><td>{esc_line(tags)}</td><td>{rating}</td>'
            f"<td><pre>{esc(redact(n.comment))}</pre></td><td>{esc_line(n.who)}</td><td>{when}</td></tr>"
        )
    return (
        f"<h2>Notes ({len(read.notes)})</h2><table><tr><th>step</th><th>tags</th><th>rating</th>"
        f"<th>comment</th><th>who</th><th>when (UTC)</th></tr>{''.join(rows)}</table>\n"
    )


def _attempts(read: RunRead, redact: Redactor) -> str:
    tree = read.state.attempts
    if not tree:
        return ""
    best = tree.best
    lines, rows = [], []
    for node in tree.in_tree_order():
        mark = " ★" if node is best else ""
        what = redact(node.what)
        lines.append(
            "  " * tree.depth(node.id)
            + f"{esc_line(node.id)}{mark} [{esc_line(tree.score_text(node))}] {esc_line(what[:100])}"
        )
        why = redact(node.finished.why) if node.finished is not None else ""
        rows.append(
            f"<tr><td>{esc_line(node.id)}{mark}</td><td>{esc_line(node.parent or '-')}</td>"
            f"<td>{esc_line(node.started.operator)}</td><td>{esc_line(node.status)}</td>"
            f'<td class="num">{_num(node.score)}</td>'
            f'<td class="num">{format_duration(node.elapsed_s(read.state.elapsed_s))}</td>'
            f"<td>{esc(what)}</td><td>{esc(why)}</td></tr>"
        )
    return (
        f'<h2>Attempts ({len(tree)})</h2><div class="tree">{"<br>".join(lines)}</div>\n'
        "<table><tr><th>attempt</th><th>from</th><th>operator</th><th>status</th><th>score</th>"
        f"<th>time</th><th>what it tried</th><th>why</th></tr>{''.join(rows)}</table>\n"
    )


def curves(read: RunRead, buckets: int) -> str:
    """The curves section, each series drawn from at most `buckets` buckets."""
    figures = [series_svg(name, series, buckets) for name, series in read.curves.named()]
    curve = read.result.validation_curve
    if curve:
        best: list[tuple[float, float]] = []
        higher = read.result.validation_higher_is_better is not False
        for t, score in curve:
            if not best or (score > best[-1][1] if higher else score < best[-1][1]):
                best.append((t, score))
            else:
                best.append((t, best[-1][1]))
        name = f"best {read.result.validation_metric or 'validation'} so far"
        figures.insert(0, svg(name, best, "s", step_line=True))
    figures += read.attempts.figures(buckets)
    if not figures:
        return '<h2>Curves</h2><p class="dim">The run read no curves.</p>\n'
    return f"<h2>Curves ({len(figures)})</h2>\n" + "\n".join(figures) + "\n"


def fixed_sections(read: RunRead, redact: Redactor) -> str:
    """The notes and the attempts: never cut."""
    return _notes(read, redact) + _attempts(read, redact)


def summary_data(read: RunRead) -> dict[str, Any]:
    """The page's facts as data (embedded as JSON): what a tool reading pages would take."""
    r = read.result
    data: dict[str, Any] = {
        "mlra_version": __version__,
        "log_sha256": read.sha256,
        "log_size": read.size,
        "recorded_by": read.recorded_by,
        "status": read.status,
        **r.model_dump(
            include={
                "run_id",
                "task",
                "model",
                "reason",
                "metric",
                "score",
                "normalized_score",
                "success",
                "duration_s",
                "cost_usd",
                "tokens",
                "best_validation",
            }
        ),
    }
    if read.task and read.task != r.task:  # another task beside it has its name
        data["task_label"] = read.task
    tree = read.state.attempts
    if tree:
        data["attempts"] = [
            {"id": n.id, "parent": n.parent, "status": n.status, "score": n.score}
            for n in tree.in_tree_order()
        ]
    return data
