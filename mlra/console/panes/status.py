"""The status line: the run's phase, what it is doing now (the model generating, a
command running, a call waiting for approval), the score, task and model.

One line, whatever the terminal's width: what matters least is shortened or left
out first (the model's name first), so the phase, the score and the keys that get
the user out stay whole at 80 columns. The run's name (its task) is shortened, not
left out, before what the run is doing is: it says which run this console shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Unpack

from rich.text import Text
from textual.widgets import Static

from mlra import events as ev
from mlra.agent.loop.ending import UNSUBMITTED
from mlra.agent.record.run_progress import WAIT_OVER_S
from mlra.agent.record.state import RunState
from mlra.console.panes import WidgetOptions, sized_by_content
from mlra.console.text.event_lines import score_line, waiting_words
from mlra.console.text.model_lines import retry_cause, short_seconds
from mlra.console.text.model_wait import answer_speed
from mlra.durations import format_duration
from mlra.tasks.evaluators.progress import progress_words
from mlra.terminal_text import printable_line

PHASES = {
    "starting": ("STARTING", "black on grey70"),
    "running": ("RUNNING", "black on green3"),
    "paused": ("PAUSED", "black on yellow"),
    "awaiting_approval": ("WAITING FOR APPROVAL", "black on dark_orange"),
    "evaluating": ("EVALUATING", "black on cyan"),
    "finished": ("FINISHED", "black on dodger_blue1"),
    "stopped": ("STOPPED", "black on grey70"),
    "error": ("ERROR", "white on red3"),
}

HINTS = {
    "paused": "Space resume · n step",
    "awaiting_approval": "a approve · e edit · r reject",
    "finished": "q quit",
    "stopped": "q quit",
    "error": "q quit",
}


def score_style(e: ev.EvaluationFinished) -> str:
    """The score's colour says what it means: green only where it beats the baseline
    (and reaches the success bar, where there is one); red below the baseline or
    with no score at all; plain where there is nothing to compare it with."""
    if not e.ok or e.score is None:
        return "bold red"
    if e.self_reported or not e.direction_known:
        return "bold yellow"  # a report, or a number no one said which way is better
    if e.baseline is None:
        return "bold yellow" if e.success is False else "bold"
    if e.score == e.baseline:
        return "bold yellow"
    beats = e.score > e.baseline if e.higher_is_better else e.score < e.baseline
    if not beats:
        return "bold red"
    return "bold yellow" if e.success is False else "bold green"


def score_texts(e: ev.EvaluationFinished, *, unisolated: bool = True) -> list[Text]:
    """The score, from its whole line to its bare value: a narrow status line takes
    the longest that fits, so it never shows a label without its number. `unisolated`
    False: the line's badge says UNISOLATED already, once is enough."""
    style = score_style(e)
    line = score_line(e, unisolated=unisolated)
    unisolated_ = " UNISOLATED" if e.agent_isolation == "none" and unisolated else ""
    if e.self_reported:
        unisolated_ = " SELF-REPORTED" + unisolated_
    if not e.ok or e.score is None:
        return [Text(f"score: {line}", style=style), Text("no score", style=style)]
    out = [Text(f"score: {line}", style=style)]
    # The verdict without its reasons: whole words where the full line does not fit.
    verdict = "" if e.success is None else " success" if e.success else " below the success bar"
    base = f" (baseline {e.baseline:.4g})" if e.baseline is not None else ""
    middle = f"score: {printable_line(e.metric)} = {e.score:.4g}{base}{verdict}{unisolated_}"
    if middle != f"score: {line}":
        out.append(Text(middle, style=style))
    if e.baseline is not None:
        out.append(
            Text(f"{e.metric} {e.score:.4g} (baseline {e.baseline:.4g}){unisolated_}", style=style)
        )
        out.append(
            Text(f"score {e.score:.4g} (baseline {e.baseline:.4g}){unisolated_}", style=style)
        )
    out.append(Text(f"score {e.score:.4g}{unisolated_}", style=style))
    return out


def _command(call: ev.ToolCall | ev.ApprovalRequested, state: RunState | None = None) -> str:
    """A call's arguments in one short line: a command's text, else the JSON. The
    arguments it runs with: the user's, where they edited it at a breakpoint (the
    `tool_call` event keeps what the model asked for). The JSON whole for a call its
    tool refused (`tool_call` `refused`): a command's text alone would hide why."""
    args = call.arguments or {}
    asked = state.running.get(call.call_id) if state is not None else None
    if state is not None and call.call_id in state.edited_calls:
        args = state.edited_calls[call.call_id]
    elif getattr(asked or call, "refused", None) is not None:
        return " ".join(json.dumps(args, ensure_ascii=False).split())
    text = args.get("command") or args.get("code") or args.get("path")
    if not isinstance(text, str):
        text = json.dumps(args, ensure_ascii=False) if args else ""
    return " ".join(text.split())


def _with(head: str, what: str) -> str:
    """`head: what`, or `head` alone for a call with nothing to show (`validate` takes no
    arguments: no label ends in a colon)."""
    return f"{head}: {what}" if what else head


def _clip(text: str, width: int) -> str:
    """The run's words cut to `width`, on one line and shown, not obeyed."""
    return printable_line(text if len(text) <= width else text[: max(0, width - 1)] + "…")


def activity(state: RunState, elapsed_s: float) -> list[Text]:
    """What the run is doing now, longest first; empty when there is nothing to say."""
    pending = state.pending_approval
    if pending is not None:
        what = _command(pending, state)
        why = f" ({printable_line(pending.reason)})" if pending.reason else ""
        tool = printable_line(pending.tool)
        return [
            Text(_with(tool, _clip(what, 60)) + why, style="bold dark_orange"),
            Text(_with(tool, _clip(what, 24)), style="bold dark_orange"),
            Text(tool, style="bold dark_orange"),
        ]
    if state.phase == "evaluating" and state.evaluation_progress is not None:
        words = progress_words(state.evaluation_progress)  # escaped there
        return [
            Text(f"grading {w if len(w) <= n else w[: n - 1] + '…'}", style="cyan")
            for w, n in ((words, 80), (words, 30))
        ]
    if state.phase not in ("running", "paused"):
        return []
    if state.generating_since is not None:
        took = format_duration(max(0.0, elapsed_s - state.generating_since))
        retry = state.retry
        if retry is not None:
            # The clock stands still while the run waits for its server: once it runs
            # again the retry is in flight, and its "clock paused" would be false.
            after = retry_cause(retry.status, retry, waiting=elapsed_s <= retry.t + WAIT_OVER_S)
            of = f"/{retry.max_retries}" if retry.max_retries else ""
            return [
                Text(
                    f"{state.generating_agent} generating… {took} (retry {retry.attempt}{of} {after})",
                    style="bold yellow",
                ),
                Text(f"generating… {took} (retry {retry.attempt} {after})", style="bold yellow"),
                Text(f"retry {retry.attempt} {after}", style="bold yellow"),
            ]
        if state.answering_since is None:
            # No piece of the answer yet: the server reads the prompt (a local server's
            # prompt processing can be most of the call).
            return [
                Text(f"{state.generating_agent} reading the prompt… {took}", style="cyan"),
                Text(f"reading the prompt… {took}", style="cyan"),
            ]
        speed = answer_speed(state, elapsed_s)
        read = (
            f" (prompt read in {short_seconds(state.first_token_s)})"
            if state.first_token_s is not None
            else ""
        )
        return [
            Text(f"{state.generating_agent} generating… {took}{speed}{read}", style="cyan"),
            Text(f"{state.generating_agent} generating… {took}{speed}", style="cyan"),
            Text(f"generating… {took}{speed}", style="cyan"),
        ]
    if state.running:
        # The latest: a supervisor's assign_subtask runs while its worker's calls do.
        call = max(state.running.values(), key=lambda c: c.seq)
        if state.paused and call.agent == "supervisor" and state.subtask is not None:
            # Paused between the worker's steps: the supervisor's call only waits on its
            # worker, and the worker is the one the pause holds.
            return _worker_held(state)
        took = format_duration(max(0.0, elapsed_s - call.t))
        if call.tool == "attempt_wait":
            running = [node.id for node in state.attempts.running]
            left = state.run_limits.left_at(call.t)
            words = waiting_words(call.arguments, running, elapsed_s - call.t, left)
            return [Text(words, style="cyan"), Text(f"waiting {took}", style="cyan")]
        what = _command(call, state)
        tool = printable_line(call.tool)
        if state.paused and call.logs_start and call.call_id not in state.begun:
            # Held before it began (the step's next call, or one approved while paused):
            # it is what `n` or Space runs next, not a call running (suspended).
            return [
                Text(_with(f"{tool} before it runs", _clip(what, 60)), style="cyan"),
                Text(f"{tool} before it runs", style="cyan"),
            ]
        return [
            Text(_with(f"{tool} {took}", _clip(what, 60)), style="cyan"),
            Text(_with(f"{tool} {took}", _clip(what, 20)), style="cyan"),
            Text(f"{tool} {took}", style="cyan"),
        ]
    if state.paused and state.worker_alone is not None and state.subtask is not None:
        # The worker alone (--agent worker, or handed the task): no supervisor call
        # stands over its steps, and the pause holds it all the same.
        return _worker_held(state)
    return []


def _worker_held(state: RunState) -> list[Text]:
    """What a pause between the worker's steps holds: the worker, before its next step
    (steps are numbered across the run's subtasks)."""
    step = state.steps + 1
    return [
        Text(f"worker before step {step} (subtask {state.subtask})", style="cyan"),
        Text(f"worker before step {step}", style="cyan"),
    ]


@dataclass
class Part:
    """One piece of the line: its forms, longest first; a higher `rank` gives way first.
    `then`: a part that gives way in stages at different ranks (the run's name is
    shortened early, cut short only after what the run is doing, and left out last),
    `then[i]` its rank once shortened i+1 times; the last one holds from there on."""

    forms: list[Text]
    rank: float
    droppable: bool = True
    at: int = field(default=0)
    then: tuple[float, ...] = ()

    @property
    def text(self) -> Text:
        return self.forms[self.at]

    @property
    def rank_now(self) -> float:
        if self.at == 0 or not self.then:
            return self.rank
        return self.then[min(self.at, len(self.then)) - 1]


def fit(parts: list[Part], width: int) -> Text:
    """The parts, in order, each in its longest form that lets the line fit `width`:
    the highest-ranked part is shortened first, then left out if it may be."""
    shown = list(parts)
    while sum(p.text.cell_len for p in shown) > width:
        for part in sorted(shown, key=lambda p: -p.rank_now):
            if part.at + 1 < len(part.forms):
                part.at += 1
                break
            if part.droppable:
                shown.remove(part)
                break
        else:
            break  # nothing left to give: the terminal cuts the line
    line = Text(no_wrap=True, overflow="ellipsis")
    for part in shown:
        line.append_text(part.text)
    return line


def best_so_far(state: RunState) -> list[Text]:
    """The best validated score so far, and which attempt earned it in a search:
    what a researcher asks first of a run still going. Empty before one."""
    node = state.attempts.best
    if node is not None and node.score is not None:
        return [
            Text(f"  best {node.id} {node.score:.4g} (validated)", style="bold"),
            Text(f"  best {node.id} {node.score:.4g}", style="bold"),
            Text(f"  {node.id} {node.score:.4g}", style="bold"),
        ]
    row = state.experiments.best
    if row is not None and row.score is not None:
        return [
            Text(f"  best {row.score:.4g} (validated)", style="bold"),
            Text(f"  best {row.score:.4g}", style="bold"),
            Text(f"  {row.score:.4g}", style="bold"),
        ]
    return []


def clock_words(state: RunState, elapsed_s: float) -> list[Text]:
    """How long it has run and how long is left; once ended, how long it took."""
    took = format_duration(elapsed_s)
    if state.finished is not None:
        return [Text(f"  took {took}", style="dim"), Text(f"  {took}", style="dim")]
    limits = state.limits
    if limits is None or not limits.time_limit_s:
        return [Text(f"  {took}", style="dim")]
    left = format_duration(max(0.0, limits.time_limit_s - elapsed_s))
    return [
        Text(f"  {took} · {left} left", style="dim"),
        Text(f"  {left} left", style="dim"),
    ]


def load_words(state: RunState) -> list[Text]:
    """The run's own CPU and memory, everything it started summed (a search's attempts
    included): a run that works shows it. Empty once sampling stopped."""
    sample = state.resources
    if sample is None or state.finished is not None or sample.run_cpu_percent is None:
        return []
    mem = f" · {sample.run_mem_mb / 1024:.1f} GB" if sample.run_mem_mb is not None else ""
    return [
        Text(f"  cpu {sample.run_cpu_percent:.0f}%{mem}", style="dim"),
        Text(f"  cpu {sample.run_cpu_percent:.0f}%", style="dim"),
    ]


def run_name(state: RunState) -> Part:
    """The run's name (its task), which says which run this is where several consoles
    are open: shortened to 24 characters early on (after the console's own name and the
    model), to 12 only once what the run is doing is at its shortest, and left out only
    once the score is too, the phase and the way out staying whole."""
    name = printable_line(state.task) or "…"
    forms = [Text(f" {_clip(name, n)} ", style="bold") for n in (len(name), 24, 12)]
    return Part([*forms, Text(" ")], rank=7, then=(3.8, 1.5))


def glance(state: RunState, elapsed_s: float, *, unisolated: bool) -> list[Part]:
    """The three answers every console's top line gives at any width: how well (the
    final score with its verdict, or the best validated so far), how long, and that
    it works (its CPU and memory); the score and the time are never dropped."""
    parts: list[Part] = []
    if state.evaluation is not None:
        forms = [Text("  ") + t for t in score_texts(state.evaluation, unisolated=unisolated)]
        # The score's reasons (top, normalized, the success rule) give way before the
        # run's name is cut (rank 7.5): its second form, where there is one, is the
        # whole score without them (`score: ` still leads it; the shorter forms do not).
        reasons = len(forms) > 1 and forms[1].plain.startswith("  score: ")
        parts.append(Part(forms, rank=7.5 if reasons else 2, droppable=False, then=(2,)))
    else:
        best = best_so_far(state)
        if best:
            parts.append(Part(best, rank=2, droppable=False))
    parts.append(Part(clock_words(state, elapsed_s), rank=3, droppable=False))
    load = load_words(state)
    if load:
        parts.append(Part(load, rank=6))
    return parts


class StatusBar(Static):
    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[RunState, float | None, str | None] | None = None
        self.note: list[Text] = []
        """A word on the console itself, longest form first (an attached console: whether
        it holds the run's controls or only watches)."""

    def on_resize(self) -> None:
        if self._shown is not None:
            state, elapsed, error = self._shown
            self.show(state, elapsed_s=elapsed, provider_error=error)

    def show(
        self,
        state: RunState,
        *,
        elapsed_s: float | None = None,
        provider_error: str | None = None,
    ) -> None:
        """Redraw from the run's state; `elapsed_s` is the run clock now (a live run's
        clock runs on between events; a recorded run's stands at its last event)."""
        self._shown = (state, elapsed_s, provider_error)
        elapsed = state.elapsed_s if elapsed_s is None else elapsed_s
        label, style = PHASES.get(state.phase, (state.phase.upper(), "reverse"))
        if state.phase == "awaiting_approval" and state.paused:
            label = "PAUSED · " + label
        short = label.split(" · ")[-1]
        if state.phase == "running" and state.pausing:  # `n` while it ran: it pauses soon
            label, short = "RUNNING · pausing after this action", "PAUSING"
            if state.pausing_attempts:  # a search: once its attempts' actions in hand end
                label = "RUNNING · pausing after the attempts' actions in hand"
        parts = [
            Part([Text(" mlra ", style="bold white on grey23")], rank=9),
            run_name(state),
            Part([Text(f"· {printable_line(state.model) or '…'} ")], rank=8),
            Part(
                [Text(f" {label} ", style=style), Text(f" {short} ", style=style)],
                rank=0,
                droppable=False,
            ),
        ]
        badge = state.sandbox is not None and state.sandbox.isolation == "none"
        if badge:
            # Nothing this run scores is confined: no width leaves it out.
            parts.append(
                Part([Text(" UNISOLATED ", style="bold black on yellow")], rank=0, droppable=False)
            )
        if self.note:
            parts.append(Part(self.note, rank=3.5, droppable=False))  # after what it is doing
        if state.phase == "paused" and provider_error:
            parts.append(
                Part(
                    [
                        Text(f" model provider failing: {_clip(provider_error, 80)}", style="red"),
                        Text(f" provider failing: {_clip(provider_error, 30)}", style="red"),
                    ],
                    rank=4,
                )
            )
        doing = activity(state, elapsed)
        if doing:
            # Shortened before the keys' hint gives way (5); its shortest form is left
            # out only once the run's name is down to 12 characters (3.8).
            stages = (5.5,) * (len(doing) - 2) + (3.6,)
            rank = 5.5 if len(doing) > 1 else 3.6
            parts.append(Part([Text(" ") + t for t in doing], rank=rank, then=stages))
        hint = HINTS.get(state.phase)
        if hint:
            keep = state.phase in ("finished", "stopped", "error")  # the way out
            parts.append(
                Part([Text(f"  {hint}", style="dim")], rank=1 if keep else 5, droppable=not keep)
            )
        parts += glance(state, elapsed, unisolated=not badge)
        ended = state.finished if state.evaluation is None else None
        # An ending with no score says why in as many words as fit, never a bare
        # FINISHED (which reads as a run that went well). Its one 120-character form
        # left it out at 160 columns, after the task and the model had given way to
        # it: its words are shortened before they are (rank 8.5), down to two words.
        if ended is not None and ended.status == "error":
            forms = [Text(f"  {_clip(ended.message, n)}", style="red") for n in (120, 60, 30)]
            parts.append(Part([*forms, Text("  error", style="red")], rank=8.5, droppable=False))
        elif ended is not None and ended.reason in UNSUBMITTED:
            forms = [
                Text(f"  not submitted: {_clip(ended.message, n)}", style="yellow")
                for n in (120, 60, 30)
            ]
            forms.append(Text("  not submitted", style="yellow"))
            parts.append(Part(forms, rank=8.5, droppable=False))
        width = self.size.width or self.app.size.width or 160
        self.update(fit(parts, width), layout=sized_by_content(self))
