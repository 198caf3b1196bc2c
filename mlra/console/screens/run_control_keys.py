"""The live console's keys that steer the run: pause, step, approve, edit, reject, tell,
breakpoints, stop and quit, and when each applies.

Every one of them goes to the run controller, which records it as a `Control` event; the
console only asks (a dialog where an answer is needed) and greys out what does not apply
now. Apart from the app's panes and layout (console/apps/app.py) because this is the app's
controller-facing half: what a key does to the run, not how the run is drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App

from mlra import events as ev
from mlra.agent.loop.controls import Breakpoint, rule_problem
from mlra.agent.record.run_result import RunResult
from mlra.agent.record.state import RunState
from mlra.console.panes.footer import ChoosesFooterKeys
from mlra.console.screens.live_run import LiveRun
from mlra.console.screens.screens import (
    BreakpointsScreen,
    ConfirmScreen,
    EditArgsScreen,
    PromptScreen,
    StopJobScreen,
)

STEP_TOASTS = {
    "after_action": "Pausing after the action in hand (Space pauses now).",
    "after_attempts": "Each attempt's action in hand finishes, then the search pauses "
    "(Space pauses now).",
    "pausing_already": "Already pausing after the action in hand (Space pauses now).",
    "none": "The run is stopping: nothing to step.",
}
"""What `n` says, by what the run's step did (agent/control/steering.py `StepOutcome`);
nothing where the transcript's line says it (one action taken, a call approved)."""


class RunControlKeys(ChoosesFooterKeys, App[int]):
    """The steering actions of the console (a mixin of `MlraApp`, which sets these)."""

    controller: LiveRun | None
    state: RunState
    result: RunResult | None
    run_dir: Path | None
    _quit_when_done: bool

    def exit_code(self) -> int:
        result = self.result
        return 0 if result and result.status == "finished" and result.score is not None else 1

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Grey out what does not apply now (the footer and the palette follow)."""
        live = self.controller is not None and self.state.finished is None
        if action in ("pause", "resume", "step", "breakpoints", "inject", "stop"):
            if not live:
                return False  # a finished or recorded run has nothing to steer
            if self.state.phase == "evaluating":
                # The agent has stopped and the evaluator runs to its end: nothing to
                # pause, step, tell or stop. Space still says so (see in_footer).
                return action == "pause"
            if action in ("pause", "resume"):
                # One key, two bindings: the footer shows the one that applies now.
                paused = self.controller is not None and self.controller.controls.paused
                return paused == (action == "resume")
            return True
        if action == "stop_job":
            # Offered while the run is live, jobs or not: with none running, `j` says so
            # (action_stop_job) rather than doing nothing at all.
            return live
        if action in ("tag", "comment", "rate"):
            return self.run_dir is not None  # a note lives in the run folder
        if action in ("approve", "edit", "reject"):
            # Hidden, not greyed: they only make sense while a call waits.
            return live and self.state.pending_approval is not None
        return True

    def offers(self, action: str) -> bool:
        """Whether this console offers a key at all, in the footer, help and palette (an
        attached console that only watches offers none of the steering keys). A message
        nobody would read is not offered: a baseline run's footer offered "i Msg worker",
        which only said the baseline reads no messages (pressed anyway, it still says so)."""
        if action.startswith("inject('"):
            return self.state.message_refusal(action[len("inject('") : -2]) is None
        return True

    def in_footer(self, action: str) -> bool:
        """Whether the footer offers an enabled key: Space answers during an evaluation
        (that it cannot be paused) without being offered as a Pause."""
        if not self.offers(action):
            return False
        return not (action == "pause" and self.state.phase == "evaluating")

    def action_pause(self) -> None:
        if self.state.phase == "evaluating":
            # The agent has stopped; the evaluator runs to its end and has no pause.
            self.notify(
                "Evaluation cannot be paused: it runs to its end. q leaves once it is graded.",
                severity="warning",
                timeout=5,
            )
            return
        if self.controller is not None and not self.controller.controls.paused:
            self.controller.pause()

    def action_resume(self) -> None:
        if self.controller is not None and self.controller.controls.paused:
            self.controller.resume()

    def action_step(self) -> None:
        """`n`: paused, one action; at an approval, the waiting call as that action (it
        paused, then stepped, and nothing moved). Running, as a debugger's step: the
        action in hand finishes, then the run pauses (it paused at once, suspending the
        command mid-way); the step's line in the transcript says so, and so does a toast.
        A search running freely: each attempt's action in hand finishes, then the search
        pauses (it paused at once). A repeated `n` while a pause is pending records
        nothing more: the run's `step` decides that, for `mlra ctl RUN step` too, and the
        toast says what it did (it said a pause was coming where the step did nothing)."""
        assert self.controller is not None
        toast = STEP_TOASTS.get(self.controller.step())  # as `mlra ctl RUN step` words it
        if toast is not None:
            self.notify(toast, timeout=4, markup=False)

    def _pending(self) -> ev.ApprovalRequested | None:
        return self.state.pending_approval

    def _run_over(self) -> bool:
        return self.controller is None or self.result is not None or self.state.finished is not None

    def _steer(self, act: Callable[[LiveRun], object]) -> None:
        """Send a dialog's answer to the run, unless the run ended while the dialog
        was open: then its log is closed, and the answer has nowhere to go."""
        if (
            self.controller is None
            or self.controller.state.finished is not None
            or self._run_over()
        ):
            self.notify("The run has ended: that answer came too late.", severity="warning")
            return
        try:
            act(self.controller)
        except RuntimeError:  # ended between the check and the call: the log is closed
            self.notify("The run has ended: that answer came too late.", severity="warning")
        except ValueError as exc:  # an edit the tool would refuse: the call still waits
            self.notify(str(exc), severity="error", markup=False)

    def action_approve(self) -> None:
        pending = self._pending()
        if self.controller is not None and pending is not None:
            self.controller.approve(pending.call_id)

    def action_edit(self) -> None:
        pending = self._pending()
        if self.controller is None or pending is None:
            return

        def done(arguments: dict[str, Any] | None) -> None:
            if arguments is not None:
                self._steer(lambda c: c.edit(pending.call_id, arguments))

        controls = self.controller.controls

        def problem(arguments: dict[str, Any]) -> str | None:
            return controls.edit_problem(pending.call_id, arguments)

        self.push_screen(EditArgsScreen(pending.tool, pending.arguments, problem), done)

    def action_reject(self) -> None:
        pending = self._pending()
        if self.controller is None or pending is None:
            return

        def done(message: str | None) -> None:
            if message is not None:
                self._steer(lambda c: c.reject(pending.call_id, message))

        self.push_screen(
            PromptScreen(
                f"Reject {pending.tool}: why? (the worker reads this)",
                "e.g. do not delete the data",
                allow_empty=True,
            ),
            done,
        )

    def action_inject(self, target: str) -> None:
        if self.controller is None:
            return
        refusal = self.controller.state.message_refusal(target)
        if refusal is not None:
            self.notify(refusal[0].upper() + refusal[1:] + ".", severity="warning")
            return

        def done(text: str | None) -> None:
            if text:
                self._steer(lambda c: c.inject(target, text))

        self.push_screen(
            PromptScreen(f"Message to the {target}", "it reads this before its next step"), done
        )

    def action_breakpoints(self) -> None:
        if self.controller is None:
            return
        rules = [_rule(b) for b in self.controller.controls.breakpoints]

        def done(new_rules: list[str] | None) -> None:
            if new_rules is not None:
                rules = [Breakpoint.parse(r) for r in new_rules]
                self._steer(lambda c: c.set_breakpoints(rules))

        controls = self.controller.controls

        def problem(rule: str) -> str | None:
            return rule_problem(rule) or controls.breakpoint_problem(Breakpoint.parse(rule))

        self.push_screen(BreakpointsScreen(rules, problem), done)

    def action_stop(self) -> None:
        if self.controller is None:
            return

        def done(yes: bool | None) -> None:
            if yes:
                self._steer(lambda c: c.request_stop(evaluate=True))

        self.push_screen(
            ConfirmScreen(
                "Stop the agent and evaluate now?",
                "Running commands are killed; the workspace is evaluated as it is.",
            ),
            done,
        )

    def action_stop_job(self) -> None:
        if self.controller is None:
            return
        running = self.controller.jobs.running_ids()
        if not running:
            self.notify("No background job is running.", timeout=4)
            return

        def done(job: str | None) -> None:
            if job is not None:
                self._steer(lambda c: c.stop_job(job))

        self.push_screen(StopJobScreen(running), done)

    def _leave_once_closed(self) -> None:
        """Leave now if the run is closed, else as soon as it is. A run that has ended
        still writes its result and carries its workspace back off its volume; leaving
        then would cancel that half-way and leave the workspace where `mlra` finds it
        only on its next start."""
        closing = any(w.group == "run" and not w.is_finished for w in self.workers)
        if self.controller is None or self.result is not None or not closing:
            self.exit(self.exit_code())
            return
        self._quit_when_done = True
        self.notify("the run has ended; leaving once its result and workspace are kept", timeout=5)

    async def action_quit(self) -> None:
        if self._run_over():
            self._leave_once_closed()
            return
        if self.state.phase == "evaluating":
            self._quit_once_graded()
            return

        def done(yes: bool | None) -> None:
            if not yes:
                return
            if self._run_over():
                self._leave_once_closed()  # it ended while the question was open
                return
            self._quit_when_done = True
            self._steer(lambda c: c.request_stop(evaluate=False))

        self.push_screen(
            ConfirmScreen(
                "Quit?",
                "The run is stopped without evaluation and marked stopped; its log and workspace "
                "are kept, and mlra resume goes on with it later.",
            ),
            done,
        )

    def _quit_once_graded(self) -> None:
        """The agent has submitted and the grader runs in this process: quitting cannot
        stop the run unevaluated, as the plain question says (a quit then was logged,
        the grading went on and the run ended finished, with its score). Leaving once
        the grade is in keeps the score the run was for. No detach: the run and its
        grader are this app's worker, on its event loop, so leaving ends the process
        (forking it mid-grading, with the grader's sandbox and threads, is not safe); a
        headless run is the one a console leaves (`mlra attach`, q), and the question
        says so."""

        def done(yes: bool | None) -> None:
            if not yes:
                return
            if self._run_over():
                self._leave_once_closed()
                return
            self._quit_when_done = True
            self.notify("leaving once the grade is in", timeout=5)

        self.push_screen(
            ConfirmScreen(
                "Quit once graded?",
                "The submission is being graded here: the console leaves once its grade is "
                "in, and the run ends with its score. This console's process is the run's, "
                "so it cannot leave the grading behind; a run started headless "
                "(mlra run --no-tui) can be left at any time: mlra attach watches it, q detaches.",
            ),
            done,
        )


def _rule(bp: Breakpoint) -> str:
    if bp.tool is None and bp.pattern is None:
        return "*"
    return f"{bp.tool or ''}:{bp.pattern}" if bp.pattern else (bp.tool or "*")
