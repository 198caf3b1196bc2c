"""The transcript and the plan's changes for the shared page, written turn by turn as the
log is read: each step a folded `<details>` block, each text escaped once (text.py).

Written to a file as it goes, never held whole: a 300 MB log makes a page of at most its
budget. Each text is cut to head and tail past `text_limit` characters; once the
transcript has used its share of the budget the steps after are left out, counted, and
the page says how many (the scores, attempts and notes are elsewhere and never cut).
The streamed pieces (`text_delta`, `tool_output`) and the samples (`resource_sample`,
`metrics`) are not transcript: the whole text is in the thought or result they precede.
"""

from __future__ import annotations

import json
from typing import IO

from mlra import events as ev
from mlra.batch.share.text import Redactor, block, esc_line
from mlra.durations import format_duration
from mlra.terminal_text import as_drawn

TEXT_LIMIT = 12_000
"""Characters of one text (an output, a thought) kept before it is cut to head and tail."""


def _clock(t: float) -> str:
    return format_duration(t)


class Transcript:
    def __init__(
        self, out: IO[bytes], budget: int, redact: Redactor, text_limit: int = TEXT_LIMIT
    ) -> None:
        self.out, self.budget, self.redact, self.text_limit = out, budget, redact, text_limit
        self.written = 0
        self.step_starts: list[int] = []
        """Where each step's block begins in `out`: a page short of room ends at one."""
        self.open = False
        self.steps = 0
        self.steps_left_out = 0
        self.texts_cut = 0
        self.full = False
        self.attempt = False
        """A search's attempt's own run (its `run_started`): its ending is read so."""

    def _write(self, html_text: str) -> None:
        data = html_text.encode("utf-8")
        self.out.write(data)
        self.written += len(data)

    def _pre(self, text: str, cls: str = "") -> str:
        if not text:
            return ""
        inner, was_cut = block(text, self.text_limit, self.redact)
        self.texts_cut += was_cut
        return f'<pre class="{cls}">{inner}</pre>' if cls else f"<pre>{inner}</pre>"

    def _open_step(self, title: str) -> None:
        self._close_step()
        if self.written >= self.budget:
            self.full = True
        if self.full:
            self.steps_left_out += 1
            return
        self.step_starts.append(self.written)
        self._write(f'<details class="step"><summary>{title}</summary>\n')
        self.open = True

    def _close_step(self) -> None:
        if self.open:
            self._write("</details>\n")
            self.open = False

    def _item(self, label: str, body: str, cls: str = "") -> None:
        if self.full:
            return
        if not self.open:
            self._open_step("before the first step")
        if self.full:
            return
        kind = f' class="ev {cls}"' if cls else ' class="ev"'
        self._write(f'<div{kind}><div class="lbl">{label}</div>{body}</div>\n')

    def feed(self, event: ev.Event) -> None:
        t = f'<span class="dim">{_clock(event.t)}</span>'
        match event:
            case ev.RunStarted():
                self.attempt = event.is_attempt
            case ev.StepStarted():
                self.steps += 1
                self._open_step(
                    f"{t} step {event.step} · {esc_line(event.agent)} · turn {event.turn}"
                )
                if event.prompt.strip():
                    self._item("prompt", self._pre(event.prompt), "prompt")
            case ev.WorkerThought() | ev.SupervisorMessage():
                who = "supervisor" if isinstance(event, ev.SupervisorMessage) else "thought"
                if event.text.strip():
                    self._item(f"{t} {who}", self._pre(event.text), "thought")
            case ev.ToolCall():
                args = (
                    json.dumps(event.arguments, ensure_ascii=False, indent=1)
                    if event.arguments is not None
                    else event.raw_arguments or ""
                )
                label = f"{t} call <b>{esc_line(event.tool)}</b> {esc_line(event.call_id)}"
                self._item(label, self._pre(args), "call")
            case ev.ToolResult():
                how = "ok" if event.ok else "failed"
                code = "" if event.exit_code is None else f", exit {event.exit_code}"
                label = f"{t} result {esc_line(event.call_id)} ({how}{code})"
                # as the console and headless output show it: a progress bar's last state
                output = as_drawn(event.output)
                self._item(label, self._pre(output), "result" if event.ok else "result bad")
            case ev.Notice():
                self._item(f"{t} {esc_line(event.level)}", self._pre(event.message), "notice")
            case ev.ModelError() if event.cut_off:
                # A call the deadline, a stop or a lost connection cut off: no failure of
                # the model, as the console and headless output say.
                self._item(f"{t} call cut off", self._pre(event.error), "notice")
            case ev.ModelError():
                self._item(f"{t} model error", self._pre(event.error), "result bad")
            case ev.SubtaskStarted():
                self._item(f"{t} subtask {event.subtask}", self._pre(event.instructions))
            case ev.SubtaskFinished():
                label = f"{t} subtask {event.subtask} {esc_line(event.outcome)}"
                self._item(label, self._pre(event.report))
            case ev.Review():
                if event.guidance.strip():
                    self._item(f"{t} review", self._pre(event.guidance))
            case ev.Control():
                said = event.text or ""
                self._item(f"{t} control {esc_line(event.action)}", self._pre(said), "control")
            case ev.ExperimentNote():
                self._item(f"{t} experiment", self._pre(f"{event.hypothesis}\n{event.change}"))
            case ev.Validation():
                score = "-" if event.score is None else f"{event.score:.6g}"
                text = f"{event.metric} = {score}" + (f"\n{event.error}" if event.error else "")
                self._item(f"{t} validation {esc_line(event.artifact)}", self._pre(text))
            case ev.Submission():
                what = f"{event.path or '(nothing)'} by {event.by}\n{event.note}"
                self._item(f"{t} submission", self._pre(what), "call")
            case ev.EvaluationFinished():
                score = "-" if event.score is None else f"{event.score:.6g}"
                text = f"{event.metric} = {score}" + (f"\n{event.error}" if event.error else "")
                self._item(f"{t} graded", self._pre(text), "call")
            case ev.AttemptStarted():
                self._item(
                    f"{t} attempt {esc_line(event.attempt)} started",
                    self._pre(
                        f"{event.operator} from {event.parent or 'the starter'}\n{event.instructions}"
                    ),
                )
            case ev.AttemptFinished():
                score = "" if event.score is None else f" {event.score:.6g}"
                self._item(
                    f"{t} attempt {esc_line(event.attempt)} {esc_line(event.status)}{score}",
                    self._pre(event.summary or event.why or ""),
                )
            case ev.HistorySummarized():
                label = f"{t} turns {event.first_turn}–{event.last_turn} summarized"
                self._item(label, self._pre(event.summary), "notice")
            case ev.JobStarted():
                self._item(f"{t} job {esc_line(event.job)} started", self._pre(event.command))
            case ev.JobEnded():
                code = "" if event.exit_code is None else f", exit {event.exit_code}"
                label = f"{t} job {esc_line(event.job)} {esc_line(event.end)}{code}"
                self._item(label, self._pre(event.reason))
            case ev.RunFinished():
                reason = ev.as_read(event, attempt=self.attempt).reason
                self._item(
                    f"{t} run {esc_line(event.status)} ({esc_line(reason)})",
                    self._pre(event.message),
                    "notice",
                )
            case _:
                pass

    def close(self) -> None:
        self._close_step()

    def fitting(self, room: int) -> tuple[int, int]:
        """How many bytes of the transcript fit in `room` (cut where a step begins), and
        how many steps that leaves out."""
        if self.written <= room:
            return self.written, 0
        kept = [start for start in self.step_starts if start <= room]
        end = kept[-1] if kept else 0
        return end, len(self.step_starts) - len(kept)


PLAN_TEXT = 2000
"""Characters of a plan step's title or note kept before it is cut to head and tail."""


class PlanChanges:
    """Each `plan_updated` as a list of its steps, within its own share of the budget."""

    def __init__(self, out: IO[bytes], budget: int, redact: Redactor) -> None:
        self.out, self.budget, self.redact = out, budget, redact
        self.written = 0
        self.changes = 0
        self.left_out = 0
        self.texts_cut = 0
        self._last: list[tuple[str, str, str]] | None = None

    def _text(self, text: str) -> str:
        inner, was_cut = block(text, PLAN_TEXT, self.redact)
        self.texts_cut += was_cut
        return inner

    def feed(self, event: ev.PlanUpdated) -> None:
        steps = [(s.title, s.status, s.note) for s in event.steps]
        if steps == self._last:
            return
        self._last = steps
        self.changes += 1
        if self.written >= self.budget:
            self.left_out += 1
            return
        items = "".join(
            f'<li class="{esc_line(status)}"><span class="st">{esc_line(status)}</span> '
            f"{block(title, PLAN_TEXT, self.redact)[0]}"
            + (
                f' <span class="dim">{block(note, PLAN_TEXT, self.redact)[0]}</span>'
                if note
                else ""
            )
            + "</li>"
            for title, status, note in steps
        )
        text = (
            f'<div class="plan"><div class="lbl"><span class="dim">{_clock(event.t)}</span> '
            f"{esc_line(event.agent)}</div><ol>{items}</ol></div>\n"
        )
        data = text.encode("utf-8")
        self.out.write(data)
        self.written += len(data)
