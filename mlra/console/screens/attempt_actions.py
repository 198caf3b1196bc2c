"""What the Attempts pane's keys do: open an attempt, diff two, and, in a live run, stop,
promote (submit) or message one.

Steering goes through the run controller (agent/control/steering.py), which records each act
as a `control` event naming the attempt; a refusal (the attempt has ended, was never
validated, its copy is gone) is said in a toast, in the manager's own words, and
nothing is recorded. A promotion and a stop are asked before they are done: a
promotion ends the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from textual.app import App

from mlra.agent.loop.attempts import AttemptRefused
from mlra.agent.record.attempt_tree import AttemptNode
from mlra.agent.record.run_result import RunResult
from mlra.console.panes.attempts import attempt_lines
from mlra.console.panes.host import PaneHost
from mlra.console.screens.attempt_screens import (
    AttemptScreen,
    PickAttemptScreen,
    scores_side_by_side,
)
from mlra.console.screens.live_run import LiveRun
from mlra.console.screens.screens import ConfirmScreen, DiffScreen, PromptScreen
from mlra.console.text.attempt_files import (
    attempt_events,
    attempt_folder,
    validation_metrics,
    workspaces_diff,
)
from mlra.terminal_text import printable_line


class AttemptHost(PaneHost, Protocol):
    """What of the console app the Attempts pane's keys use (the app itself: a protocol
    rather than the app's class keeps this module below console/apps/app.py): what its
    panes read, the live run to steer, and how the run ended."""

    @property
    def controller(self) -> LiveRun | None: ...

    result: RunResult | None

    def _elapsed(self) -> float: ...

    def _steer(self, act: Callable[[LiveRun], object]) -> None: ...


def act_on_attempt(app: App[Any], host: AttemptHost, action: str, attempt: str) -> None:
    """Do what the pane's key asked on `attempt`; `app` and `host` are the console app."""
    node = host.state.attempts.get(attempt)
    if node is None:
        return
    keys = AttemptKeys(app, host)
    match action:
        case "open":
            keys.open(node)
        case "diff":
            keys.pick_and_diff(node)
        case "stop":
            keys.stop(node)
        case "promote":
            keys.promote(node)
        case "message":
            keys.message(node)
        case _:
            pass


class AttemptKeys:
    def __init__(self, app: App[Any], host: AttemptHost) -> None:
        self.app = app
        self.host = host

    def now(self) -> float:
        return self.host._elapsed()

    def warn(self, text: str) -> None:
        self.app.notify(printable_line(text), severity="warning", timeout=5, markup=False)

    def live(self, what: str) -> LiveRun | None:
        """The run to steer, or None (and why, said) for a recorded or ended run."""
        host = self.host
        if host.controller is None:
            self.warn(f"a recorded run: nothing to {what}")
            return None
        if host.state.finished is not None or host.result is not None:
            self.warn(f"the run has ended: nothing to {what}")
            return None
        return host.controller

    # --- reading -------------------------------------------------------------------

    def open(self, node: AttemptNode) -> None:
        host = self.host
        self.app.push_screen(AttemptScreen(host.state.attempts, node, host.run_dir, self.now))

    def pick_and_diff(self, node: AttemptNode) -> None:
        tree = self.host.state.attempts
        if self.host.run_dir is None:
            self.warn("this run's folder is not known here: the attempts' files cannot be read")
            return
        width = min(86, max(40, self.app.size.width - 8))
        lines = attempt_lines(tree, self.now(), width)
        choices = [(attempt, line) for attempt, line in lines if attempt != node.id]
        if not choices:
            self.warn("there is no other attempt to diff with")
            return

        def chosen(other: str | None) -> None:
            second = tree.get(other) if other else None
            if second is not None:
                self.app.run_worker(
                    self.show_diff(node, second), group="attempt-diff", exit_on_error=False
                )

        self.app.push_screen(PickAttemptScreen(f"Diff {node.id} with…", choices), chosen)

    async def show_diff(self, a: AttemptNode, b: AttemptNode) -> None:
        """The two attempts' scores side by side, above the diff of their workspaces
        (from the first to the second)."""
        tree, now, run_dir = self.host.state.attempts, self.now(), self.host.run_dir
        folder_a, folder_b = attempt_folder(run_dir, a), attempt_folder(run_dir, b)
        if folder_a is None or folder_b is None:
            self.warn("an attempt's folder lies outside the run's: not read")
            return
        events_a, _ = await asyncio.to_thread(attempt_events, folder_a)
        events_b, _ = await asyncio.to_thread(attempt_events, folder_b)
        diff = await asyncio.to_thread(
            workspaces_diff, folder_a / "workspace", folder_b / "workspace", a.id, b.id
        )
        metrics = (
            validation_metrics(events_a, a.finished),
            validation_metrics(events_b, b.finished),
        )
        header = scores_side_by_side(tree, a, b, now, metrics)
        self.app.push_screen(
            DiffScreen(f"{a.id} → {b.id}: their workspaces", diff, header, key="D")
        )

    # --- steering ------------------------------------------------------------------

    def stop(self, node: AttemptNode) -> None:
        if self.live("stop") is None:
            return
        if node.finished is not None:
            self.warn(f"attempt {node.id} has ended ({node.status}): nothing to stop")
            return
        attempt = node.id

        def act(run: LiveRun) -> None:
            if not run.stop_attempt(attempt):
                self.warn(f"attempt {attempt} is not running, or the run is ending")

        def done(yes: bool | None) -> None:
            if yes:
                self.host._steer(act)

        self.app.push_screen(
            ConfirmScreen(
                f"Stop attempt {attempt}?",
                "Its commands are killed; it ends stopped, keeping any score it had "
                "validated. The supervisor sees it stopped by the user.",
            ),
            done,
        )

    def promote(self, node: AttemptNode) -> None:
        run = self.live("promote")
        if run is None:
            return
        attempt = node.id
        try:
            finished = run.attempts.submittable(attempt)
        except AttemptRefused as exc:
            self.warn(f"cannot promote {attempt}: {exc}")
            return
        score = self.host.state.attempts.score_text(node)
        metric = f", {finished.metric}" if finished.metric else ""

        def act(run: LiveRun) -> None:
            if run.promote_attempt(attempt):
                return
            try:
                run.attempts.submittable(attempt)
                why = "the run is ending already"
            except AttemptRefused as exc:
                why = str(exc)
            self.warn(f"cannot promote {attempt}: {why}")

        def done(yes: bool | None) -> None:
            if yes:
                self.host._steer(act)

        self.app.push_screen(
            ConfirmScreen(
                f"Submit attempt {attempt} and end the run?",
                f"Its validated copy ({score}{metric}) is graded on the task's test split; "
                "running attempts are stopped. The supervisor is not asked.",
            ),
            done,
        )

    def message(self, node: AttemptNode) -> None:
        run = self.live("message")
        if run is None:
            return
        attempt = node.id
        if node.finished is not None:
            self.warn(f"attempt {attempt} has ended ({node.status}): it reads no more messages")
            return
        if run.attempts.child(attempt) is None:
            self.warn(f"attempt {attempt} is not running here yet")
            return

        def send(run: LiveRun, text: str) -> None:
            child = run.attempts.child(attempt)
            if child is None:
                self.warn(f"attempt {attempt} has ended: the message was not sent")
                return
            child.inject("worker", text)

        def done(text: str | None) -> None:
            if text:
                self.host._steer(lambda run: send(run, text))

        self.app.push_screen(
            PromptScreen(
                f"Message to attempt {attempt}'s worker", "it reads this before its next step"
            ),
            done,
        )
