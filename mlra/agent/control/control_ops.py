"""What a control request does to a live run, and the status `mlra ctl` answers.

Apart from the endpoint (agent/control/control_server.py: the socket, its connections, who
holds the controls, watching) because this is the part that touches the run: every op
goes through the controller's own `Steering` methods, so it is recorded as the same
`control` event a console key makes, and a request that does not apply now is refused
with one line saying why.
"""

from __future__ import annotations

import os

from mlra import events as ev
from mlra.agent.control.steering import Steering
from mlra.agent.loop.controls import Breakpoint, rule_problem
from mlra.control_socket import CtlRequest, PendingCall, RunStatus


class Refused(Exception):
    """A request that does not apply now: its message is the one-line answer."""


def act(run: Steering, req: CtlRequest) -> str:
    """Do what a request asks of the run, through the same `Steering` methods a console
    key uses; the one-line answer, or `Refused` with why not."""
    controls = run.controls
    op = req.op
    if run.state.evaluating and op not in ("status", "quit", "watch", "hold", "release"):
        # The agent has stopped and the evaluator runs to its end: as the console's keys
        # are, a control would be recorded and change nothing.
        raise Refused(
            f"refused: the run is being graded: {op} does not apply "
            f"(mlra ctl {run.run_id} quit ends it ungraded)"
        )
    if op == "pause":
        if controls.paused:
            raise Refused("refused: the run is paused already")
        run.pause()
        return "paused"
    if op == "resume":
        if not controls.paused:
            raise Refused("refused: the run is not paused")
        run.resume()
        return "resumed"
    if op == "step":
        return _step(run)
    if op in ("approve", "reject", "edit"):
        call_id = _waiting_call(run, req.call_id)
        if op == "approve":
            done = run.approve(call_id)
        elif op == "reject":
            done = run.reject(call_id, req.text or "")
        else:
            if req.arguments is None:
                raise Refused("refused: edit needs the call's new arguments")
            try:
                done = run.edit(call_id, req.arguments)
            except ValueError as exc:
                raise Refused(f"refused: {exc}; the call still waits") from None
        if not done:
            raise Refused(f"refused: call {call_id} no longer waits")
        return {"approve": "approved", "reject": "rejected", "edit": "edited"}[op] + (f" {call_id}")
    if op == "inject":
        target = req.target or "worker"
        if not (req.text or "").strip():
            raise Refused("refused: inject needs a message")
        if target.startswith("attempt:"):  # a search's attempt: its own worker
            return _message_attempt(run, target.removeprefix("attempt:"), req)
        if target not in ("worker", "supervisor"):
            raise Refused(f"refused: inject goes to worker or supervisor, not {target!r}")
        if (refusal := run.state.message_refusal(target)) is not None:
            raise Refused(f"refused: {refusal}")
        run.inject(target, req.text or "")
        return f"message for the {target} queued (it reads it at its next step)"
    if op == "breakpoints":
        rules = [r for r in (req.rules or []) if r.strip()]
        for rule in rules:
            if (problem := rule_problem(rule)) is not None:
                raise Refused(f"refused: breakpoint {rule!r}: {problem}")
        try:
            run.set_breakpoints([Breakpoint.parse(r) for r in rules])
        except ValueError as exc:
            raise Refused(f"refused: {exc}; the breakpoints are unchanged") from None
        return "breakpoints: " + (", ".join(rules) or "none")
    if op in ("stop", "quit"):
        run.request_stop(evaluate=op == "stop")
        return "stopping; the run is graded" if op == "stop" else "quitting without grading"
    if op == "stop_job":
        if not req.target or not run.stop_job(req.target):
            raise Refused(f"refused: no job {req.target!r} is running")
        return f"stopping job {req.target}"
    if op == "attempt_stop":
        if not req.target or not run.stop_attempt(req.target):
            if run.attempts.closing:
                raise Refused("refused: the run is ending; its end stops every attempt")
            raise Refused(f"refused: no attempt {req.target!r} is running")
        return f"stopping attempt {req.target}"
    if op == "promote":
        if not req.target or not run.promote_attempt(req.target):
            raise Refused(f"refused: attempt {req.target!r} cannot be submitted now")
        return f"submitting attempt {req.target}; the run ends and grades it"
    raise Refused(f"refused: unknown op {op!r}")  # pragma: no cover (the model forbids)


def _message_attempt(run: Steering, attempt: str, req: CtlRequest) -> str:
    """A message to a running attempt's worker (the Attempts pane's m), recorded in
    the attempt's own log as the request's client's."""
    child = run.attempts.child(attempt)
    if child is None:
        raise Refused(f"refused: attempt {attempt!r} is not running")
    with child.acting_as(req.client):
        child.inject("worker", req.text or "")
    return f"message for attempt {attempt}'s worker queued"


def _waiting_call(run: Steering, named: str | None) -> str:
    waiting = run.controls.pending_calls()
    if named is not None:
        if named not in waiting:
            raise Refused(
                f"refused: call {named} does not wait for approval"
                + (f" (waiting: {', '.join(waiting)})" if waiting else "")
            )
        return named
    if not waiting:
        raise Refused("refused: no call waits for approval")
    if len(waiting) > 1:
        raise Refused(f"refused: several calls wait ({', '.join(waiting)}): name one with --call")
    return waiting[0]


def _pending(call: ev.ToolCall) -> PendingCall:
    return PendingCall(
        call_id=call.call_id, tool=call.tool, agent=call.agent, arguments=call.arguments or {}
    )


def run_status(run: Steering, holder: str | None, watchers: int) -> RunStatus:
    """What `mlra ctl RUN status` answers: the run's phase, clock, waiting calls, jobs,
    attempts and who holds its controls, from its folded state."""
    state, controls = run.state, run.controls
    waiting = controls.pending_calls()
    pending: list[PendingCall] = []
    for call_id in waiting:
        call = state.running.get(call_id)
        asked = state.pending_approval
        if call is not None:
            pending.append(_pending(call))
        elif asked is not None and asked.call_id == call_id:
            pending.append(
                PendingCall(call_id=call_id, tool=asked.tool, arguments=asked.arguments or {})
            )
        else:
            pending.append(PendingCall(call_id=call_id, tool="?"))
    held = [
        _pending(call)
        for call in state.running.values()
        if controls.paused
        and call.logs_start
        and call.call_id not in state.begun
        and call.call_id not in waiting
    ]
    if state.finished is not None:
        phase = "ended"
    elif state.evaluating:
        phase = "evaluating"
    elif waiting:
        phase = "waiting"
    elif controls.paused:
        phase = "paused"
    else:
        phase = "running" if state.started else "starting"
    best = state.experiments.best
    score = state.evaluation.score if state.evaluation is not None else None
    return RunStatus(
        run_id=run.run_id,
        task=state.task or run.task.name,
        model=state.model or run.config.model,
        pid=os.getpid(),
        state=phase,
        paused=controls.paused,
        elapsed_s=round(run.clock.elapsed(), 3),
        time_limit_s=run.time_limit_s,
        steps=state.steps,
        events=run.log.last_seq if run.log is not None else state.events,
        pending=pending,
        held=held,
        running_jobs=[job.started.job for job in state.running_jobs],
        running_attempts=[a for a, n in state.attempts.nodes.items() if n.finished is None],
        best_validation=best.score if best is not None else None,
        breakpoints=[b.rule for b in controls.breakpoints],
        tools={agent: list(names) for agent, names in (controls.tools or {}).items()},
        hold_at_breaks=controls.hold_at_breaks,
        holder=holder,
        watchers=watchers,
        score=score,
    )


def ending_words(run: Steering) -> str:
    """How the run ended, for a refusal."""
    finished = run.state.finished
    if finished is None:
        return "the run ended"
    words = f"the run ended ({finished.status}"
    if finished.message:
        words += f": {finished.message}"
    return words + ")"


def _step(run: Steering) -> str:
    """A step, as the console's `n` takes it (`Steering.step`: one function for both, so
    a step repeated while a pause is pending records nothing here either), in one line."""
    waiting = run.controls.pending_calls()
    match run.step():
        case "approved":  # the waiting call is the one action: the step approves it
            return f"approved {waiting[0]}: it runs as the one action, then paused"
        case "after_attempts":
            return "each attempt finishes the action in hand and pauses, then the search"
        case "after_action":  # as a debugger's step while running: the next boundary
            return "the action in hand finishes, then paused"
        case "pausing_already":
            return "already pausing after the action in hand: nothing more recorded"
        case "attempt":
            return "one action of the next running attempt, then paused"
        case "none":
            return "the run is stopping: nothing to step"
        case _:
            return "one action (one tool call), then paused"
