"""`mlra ctl RUN ACTION`: steer a live run from outside its terminal.

The one-off commands of the run folder's owner: each is one request to the run's
control socket (agent/control/control_server.py, wire in mlra/control_socket.py), acted on
through the same controls as the console's keys and recorded as the same `control`
events (their `source` "ctl"). An explicit command always acts, whoever holds an
attached console's controls.

Exit status: 0 done (`status` of a run that is not running says how it ended); 1
refused (it does not apply now: nothing waits for approval, the run is paused
already, it ended: the line says how it ended); 2 bad input (a flag, an action's
argument, no such run). `--json` prints the reply as one JSON
object (`CtlReply`, with `status` for `status`) whatever the outcome.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar, overload

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, LogDamage, iter_events, log_is_live
from mlra.agent.record.run_result import RunResult
from mlra.console.text.args import Parser, UsageError, run_folder
from mlra.control_socket import CtlReply, CtlRequest, NotLive, request
from mlra.durations import format_duration
from mlra.terminal_text import printable_line

ACTIONS = {
    "status": "how the run stands (state, clock, steps, the call waiting, jobs, best validation)",
    "pause": "pause the agent, its commands and its jobs (the clock stops)",
    "resume": "resume a paused run",
    "step": "let one agent action (one tool call) through, then pause again (while "
    "running: the action in hand finishes, then the run pauses)",
    "approve": "run the call waiting at a breakpoint (--call ID when several wait)",
    "reject": "refuse the call waiting at a breakpoint; MESSAGE tells the agent why",
    "edit": "run the waiting call with other arguments: JSON (an object)",
    "inject": "a message for the worker (--to supervisor for the supervisor)",
    "breakpoints": "replace the breakpoints: RULE... ('*', a tool, 'tool:pattern'; none clears)",
    "stop": "stop the run now and grade what it has",
    "quit": "stop the run now without grading",
    "stop-job": "stop one of the run's background jobs: JOB",
    "stop-attempt": "stop one of a search's attempts: ATTEMPT",
    "promote": "submit a search's attempt: ATTEMPT (the run ends and grades it)",
}
_N = TypeVar("_N")

_OPS = {"stop-job": "stop_job", "stop-attempt": "attempt_stop"}
_NO_ARGUMENT = {"status", "pause", "resume", "step", "approve", "stop", "quit"}


class _MixedParser(Parser):
    """Options anywhere among the action's words (`reject --call ID why not`): argparse
    alone stops taking positionals once an option has come between them."""

    _mixing = False

    @overload
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: None = None
    ) -> tuple[argparse.Namespace, list[str]]: ...
    @overload
    def parse_known_args(
        self, args: Iterable[str] | None, namespace: _N
    ) -> tuple[_N, list[str]]: ...
    @overload
    def parse_known_args(self, *, namespace: _N) -> tuple[_N, list[str]]: ...
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        if self._mixing:  # parse_known_intermixed_args calls back here
            return super().parse_known_args(args, namespace)
        self._mixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._mixing = False


def add_ctl_command(sub: Any) -> None:
    ctl = sub.add_parser(
        "ctl",
        description="Send a live run (headless, in a console, in a batch) one of the "
        "console's controls through its control socket (control.sock in the run folder, "
        "reachable by its owner only), recorded as the same control event. Refused in one "
        "line, exit status 1, where it does not apply (nothing waits for approval, the run "
        "ended). Actions: " + "; ".join(f"{name}: {what}" for name, what in ACTIONS.items()),
    )
    ctl.add_argument("run", metavar="RUN", help="a run folder, or a run id under --runs-dir")
    ctl.add_argument("action", metavar="ACTION", choices=list(ACTIONS), help=", ".join(ACTIONS))
    ctl.add_argument(
        "words", nargs="*", metavar="ARG", help="the action's argument (a message, JSON, rules)"
    )
    ctl.add_argument(
        "--call", metavar="ID", help="approve/reject/edit: the call (when several wait)"
    )
    ctl.add_argument(
        "--to",
        choices=("worker", "supervisor"),
        default="worker",
        help="inject: who reads the message (default worker)",
    )
    ctl.add_argument("--json", action="store_true", help="print the reply as JSON")
    ctl.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="the runs folder (default ./runs)"
    )
    ctl.set_defaults(func=cmd_ctl)
    ctl.__class__ = _MixedParser


def _request(args: argparse.Namespace) -> Any:
    """The action as a request; bad arguments are a UsageError (exit 2)."""

    action: str = args.action
    words: list[str] = args.words
    text = " ".join(words)
    if action in _NO_ARGUMENT and words:
        hint = " (a message goes with `inject`)" if action == "approve" else ""
        raise UsageError(f"ctl {action} takes no argument, got {text!r}{hint}")
    if args.call is not None and action not in ("approve", "reject", "edit"):
        raise UsageError("--call goes with approve, reject or edit")
    fields: dict[str, Any] = {"op": _OPS.get(action, action), "client": "ctl"}
    if action in ("approve", "reject", "edit"):
        fields["call_id"] = args.call
    if action == "reject":
        fields["text"] = text
    elif action == "inject":
        if not text.strip():
            raise UsageError("ctl inject needs a MESSAGE")
        fields.update(text=text, target=args.to)
    elif action == "edit":
        try:
            arguments = json.loads(text)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            raise UsageError("ctl edit needs the call's new arguments as a JSON object")
        fields["arguments"] = arguments
    elif action == "breakpoints":
        fields["rules"] = [w for w in words if w.strip()]
    elif action in ("stop-job", "stop-attempt", "promote"):
        if len(words) != 1:
            what = "JOB" if action == "stop-job" else "ATTEMPT"
            raise UsageError(f"ctl {action} needs one {what}")
        fields["target"] = words[0]
    return CtlRequest(**fields)


def cmd_ctl(args: argparse.Namespace) -> int:
    run_dir = run_folder(args.run, args.runs_dir)
    req = _request(args)
    try:
        reply = request(run_dir, req, timeout=15.0)
    except NotLive:
        # Asked how it stands, a run that ended has an answer: how it ended. Refused is
        # for actions that no longer apply.
        why = not_live(run_dir, args.run)
        reply = (
            CtlReply(ok=True, message=why, ended=True)  # --json: no live status to give
            if req.op == "status"
            else CtlReply(ok=False, message=f"refused: {why}")
        )
    except PermissionError as exc:
        reply = CtlReply(ok=False, message=f"refused: {exc}")
    except (OSError, ValueError) as exc:
        reply = CtlReply(ok=False, message=f"refused: {args.run} does not answer: {exc}")
    if args.json:
        print(reply.model_dump_json(exclude_none=True))
    elif not reply.ok:
        sys.stderr.write(printable_line(reply.message) + "\n")
    elif reply.status is not None:
        for line in status_lines(reply.status):
            print(printable_line(line))
    else:
        print(printable_line(reply.message))
    return 0 if reply.ok else 1


def not_live(run_dir: Path, shown: str) -> str:
    """Why the run does not answer, and how it ended where it did."""

    ended = _how_it_ended(run_dir)
    if ended is not None:
        return f"{shown} has ended ({ended})"
    if log_is_live(run_dir / EVENTS_FILE):
        return f"{shown} is running but serves no control socket (its log says why)"
    return f"{shown} is not running (stopped without an end): mlra resume {shown} goes on with it"


def _how_it_ended(run_dir: Path) -> str | None:
    """From result.json, else the log's run_finished (the socket goes after the result is
    written, so a race leaves the log only to a run killed at its very end)."""

    try:
        result = RunResult.model_validate_json((run_dir / "result.json").read_bytes())
    except (OSError, ValueError):
        result = None
    if result is not None:
        words = f"{result.status}, {ev.reason_as_read(result.reason, attempt=_attempt(run_dir))}"
        if result.score is not None:
            words += f"; score {result.score:.4g}"
        elif result.evaluation_error:
            words += "; no score"
        return words
    finished: ev.RunFinished | None = None
    try:
        for event in iter_events(run_dir / EVENTS_FILE):
            if isinstance(event, ev.RunFinished):
                finished = event
    except (OSError, LogDamage):
        return None
    if finished is None:
        return None
    return f"{finished.status}, {ev.reason_as_read(finished.reason, attempt=_attempt(run_dir))}"


def _attempt(run_dir: Path) -> bool:
    """Whether the run is a search's attempt, from its log's first line (`run_started`):
    its ending, "submitted" in a log from before "attempt_ended", reads so (ev.as_read)."""
    try:
        with open(run_dir / EVENTS_FILE, "rb") as f:
            started = ev.parse_event(f.readline())
    except (OSError, ValueError):
        return False
    return isinstance(started, ev.RunStarted) and started.is_attempt


def status_lines(status: Any) -> list[str]:
    """A few lines: what the run is doing, its clock and steps, what waits, the rest."""

    clock = format_duration(status.elapsed_s)
    if status.time_limit_s:
        clock += f" of {format_duration(status.time_limit_s)}"
    lines = [
        f"{status.run_id} · {status.task} · {status.model or '-'} · pid {status.pid}",
        f"{status.state}{', paused' if status.state == 'waiting' and status.paused else ''}"
        f" · {clock} · step {status.steps} · {status.events} events",
    ]

    def said(call: Any) -> str:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        if len(arguments) > 200:
            arguments = arguments[:199] + "…"
        return f"{call.call_id} ({call.agent}) {call.tool} {arguments}"

    lines += [f"waiting: {said(call)}" for call in status.pending]
    lines += [
        f"next: {said(call)} (held by the pause before it began: step or resume runs it)"
        for call in status.held
    ]
    if status.running_jobs:
        lines.append("jobs: " + ", ".join(status.running_jobs))
    if status.running_attempts:
        lines.append("attempts running: " + ", ".join(status.running_attempts))
    best = f"{status.best_validation:.4g}" if status.best_validation is not None else "-"
    rest = [f"best validation {best}"]
    if status.score is not None:
        rest.append(f"score {status.score:.4g}")
    rest.append("breakpoints " + (", ".join(status.breakpoints) or "none"))
    rest.append(f"controls held by {status.holder or 'nobody'}")
    rest.append(f"{status.watchers} watching")
    lines.append(" · ".join(rest))
    return lines
