"""Which of a run's events the user is told of, and in what words.

Derived only from the typed events the run writes, in order, as a display derives
its panes, so a notification says what the log says: a call held for approval
(`approval_requested`), a validation that beat every earlier one in the metric's own
direction (the experiments table's `best` mark, or a search attempt's validated score),
a model provider failure that paused the run (a non-fatal `model_error` followed by
the system's `pause`; one whose `server_waited_s` says a wait for the server gave up is
said as such), a run waiting for its model server (the first `model_retry` with a
cause, and the `model_call` that ends the wait; not every retry; a search's attempts'
waits, read from their own logs, are counted with the run's), the time warning
(`time_warning`), and the end (`run_finished`, with the grading's score, normalized
score and success).
"""

from __future__ import annotations

import json
from pathlib import Path

from mlra import events as ev
from mlra.agent.notify.note import Notification, NotificationKind
from mlra.durations import format_duration
from mlra.scores import format_normalized

MESSAGE_CHARS = 300


def _short(text: str, limit: int = MESSAGE_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _naming_model(error: ev.ModelError) -> str:
    """The error's line naming its model once: a provider's own line starts with the
    model's name already ("m: HTTP 500 ..."), which the run's model ("openai/m") would
    only repeat."""
    name = error.model.split("/", 1)[-1]
    if error.error.startswith((f"{error.model}:", f"{name}:")):
        return error.error
    return f"{error.model}: {error.error}"


def _score(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


class Triggers:
    def __init__(self, run_id: str, run_dir: Path) -> None:
        self.run_id = run_id
        self.run_dir = str(run_dir)
        self.task = ""
        self._metric = ""
        self._validations: dict[int, ev.Validation] = {}
        self._best: float | None = None
        self._provider_error: ev.ModelError | None = None
        self._evaluation: ev.EvaluationFinished | None = None
        self._server_waits: list[ev.ModelRetry] = []
        """The waits for the server since its last answer: the first is told, the rest not."""
        self._server_gave_up = False
        """The last provider failure ended a wait for the server: the pause or end says so."""

    def _note(
        self, kind: NotificationKind, event: ev.Event, title: str, message: str, **fields: object
    ) -> Notification:
        message = _short(message)
        return Notification.model_validate(
            {
                "kind": kind,
                "title": title,
                "message": message,
                "text": f"{title}: {message}",
                "run_id": self.run_id,
                "run_dir": self.run_dir,
                "task": self.task,
                "seq": event.seq,
                "t": event.t,
                **fields,
            }
        )

    def notification(self, event: ev.Event) -> Notification | None:
        """What `event` tells the user, or None for the events they are not told of."""
        match event:
            case ev.RunStarted():
                self.task = event.task
            case ev.ApprovalRequested():
                return self._approval(event)
            case ev.Validation():
                self._validations[event.seq] = event
            case ev.Experiment() if event.best:
                return self._best_validation(event)
            case ev.AttemptFinished() if event.status == "validated" and event.score is not None:
                return self._best_attempt(event)
            case ev.ModelRetry() if event.cause is not None:
                self._server_waits.append(event)
                if len(self._server_waits) == 1:
                    return self._server_wait(event)
            case ev.ModelCall() if self._server_waits:
                return self._server_back(event)
            case ev.ModelError() if event.cut_off is None:
                # Only a wait that used up its limit says the server did not come back;
                # an error after a wait is the server answering again, with that error.
                self._server_gave_up = event.server_waited_s is not None
                self._server_waits = []
                if not event.fatal:
                    self._provider_error = event
            case ev.Control() if event.action == "pause" and event.source == "system":
                return self._provider_paused(event)
            case ev.Control() if event.action in ("resume", "step"):
                self._provider_error = None
                self._server_gave_up = False
            case ev.TimeWarning():
                return self._note(
                    "time_warning",
                    event,
                    f"mlra: {format_duration(event.left_s)} left",
                    f"{self._who()} has {format_duration(event.left_s)} left of "
                    f"{format_duration(event.limit_s)}",
                )
            case ev.EvaluationFinished():
                self._evaluation = event
            case ev.RunFinished():
                return self._finished(event)
            case _:
                pass
        return None

    def attempt_notification(self, attempt: str, event: ev.Event) -> Notification | None:
        """What an event of a search's attempt `attempt` (from its own log) tells the
        user: only its waits for the model server, which the run's own are counted
        with, so one outage is told once however many attempts (and the run's own
        agent) wait through it, and the server is back at the first answer any of them
        gets. An attempt whose wait gives up ends as a failed attempt; the outage is
        told over only when the server answers again, or the run itself gives up."""
        match event:
            case ev.ModelRetry() if event.cause is not None:
                self._server_waits.append(event)
                if len(self._server_waits) == 1:
                    return self._server_wait(event, attempt)
            case ev.ModelCall() if self._server_waits:
                return self._server_back(event, attempt)
            case _:
                pass
        return None

    def _who(self, attempt: str | None = None) -> str:
        run = f"run {self.run_id}" + (f" ({self.task})" if self.task else "")
        return f"{run}, attempt {attempt}" if attempt else run

    def _approval(self, event: ev.ApprovalRequested) -> Notification:
        args = json.dumps(event.arguments, ensure_ascii=False) if event.arguments else ""
        why = f" ({event.reason})" if event.reason else ""
        return self._note(
            "approval",
            event,
            "mlra: a call waits for your approval",
            f"{self._who()}: {event.tool} {args}{why}",
            call_id=event.call_id,
            tool=event.tool,
        )

    def _best_validation(self, event: ev.Experiment) -> Notification | None:
        validation = self._validations.get(event.validation_seq)
        metric = validation.metric if validation is not None else self._metric
        self._metric = metric or self._metric
        was = self._best
        self._best = event.score
        before = f" (best before: {_score(was)})" if was is not None else ""
        return self._note(
            "best_validation",
            event,
            f"mlra: new best validation {_score(event.score)}",
            f"{self._who()}: validation {metric} = {_score(event.score)}{before}, "
            f"experiment {event.number}",
            metric=metric or None,
            score=event.score,
            normalized=event.normalized,
        )

    def _best_attempt(self, event: ev.AttemptFinished) -> Notification | None:
        score = event.score
        assert score is not None
        if self._best is not None:
            better = score > self._best if event.higher_is_better else score < self._best
            if not better:
                return None
        was, self._best = self._best, score
        before = f" (best before: {_score(was)})" if was is not None else ""
        return self._note(
            "best_validation",
            event,
            f"mlra: new best validation {_score(score)}",
            f"{self._who()}: attempt {event.attempt} validated {event.metric} = "
            f"{_score(score)}{before}",
            metric=event.metric or None,
            score=score,
            normalized=event.normalized,
        )

    def _server_wait(self, event: ev.ModelRetry, attempt: str | None = None) -> Notification:
        what = {
            "connection_lost": "the connection was lost mid-answer",
            "not_answering": "the server is not answering",
            "loading_model": "the server is still loading its model",
            "not_ready": f"the server answered HTTP {event.status}, not ready",
        }[event.cause or "not_answering"]
        limit = event.wait_limit_s
        up_to = f" up to {format_duration(limit)}" if limit is not None else ""
        return self._note(
            "server_wait",
            event,
            "mlra: the model server went away; the run waits for it",
            f"{self._who(attempt)}: {event.model}: {what}; waiting{up_to} for it to come "
            f"back, the {'attempt' if attempt else 'run'}'s clock paused",
            attempt=attempt,
        )

    def _server_back(self, event: ev.ModelCall, attempt: str | None = None) -> Notification:
        waits, self._server_waits = self._server_waits, []
        tries = len(waits)
        return self._note(
            "server_back",
            event,
            "mlra: the model server is back; the run goes on",
            f"{self._who(attempt)}: {event.model} answered again after "
            f"{format_duration(event.ts - waits[0].ts)} of waiting "
            f"({tries} {'try' if tries == 1 else 'tries'})",
            attempt=attempt,
        )

    def _provider_paused(self, event: ev.Control) -> Notification | None:
        error = self._provider_error
        if error is None:
            return None
        what = (
            "the model server did not come back"
            if self._server_gave_up
            else "the model provider failed"
        )
        return self._note(
            "provider_paused",
            event,
            f"mlra: {what}; the run is paused",
            f"{self._who()}: {_naming_model(error)} — resume to retry, or stop",
        )

    def _finished(self, event: ev.RunFinished) -> Notification:
        grading = self._evaluation
        fields: dict[str, object] = {"status": event.status, "reason": event.reason}
        if grading is not None and grading.ok and grading.score is not None:
            score = f"{grading.metric} = {_score(grading.score)}"
            if grading.normalized is not None:
                score += f" (normalized {format_normalized(grading.normalized)})"
            if grading.success is not None:
                score += " · success" if grading.success else " · not a success"
            fields |= {
                "metric": grading.metric,
                "score": grading.score,
                "normalized": grading.normalized,
                "success": grading.success,
            }
        elif grading is not None:
            score = f"no score ({grading.error or 'the grading failed'})"
        else:
            score = f"no score ({event.message or event.reason})"
        title = f"mlra: run {event.status}" + (
            f", {fields['metric']} = {_score(grading.score)}"
            if "metric" in fields and grading
            else ""
        )
        if self._server_gave_up and event.reason == "provider_error":
            title += ": the model server did not come back"
        return self._note(
            "finished",
            event,
            title,
            f"{self._who()} {event.status} ({event.reason}) · {score}",
            **fields,
        )
