"""`mlra resume` and `mlra fork`: a run goes on from its log (see agent/run/resume.py).

Kept apart from console/cli/cli.py so the commands' flags and their checks read
together. Imported only when one of them is named (console/cli/cli.py's table), it
imports all but the Textual console (which `--no-tui` never needs) at its top; bad input
gets one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.providers import ModelSettings, resolve_model
from mlra.agent.providers.base import ConfigError
from mlra.agent.run.controller import new_run_id
from mlra.agent.run.resume import ResumeError, fork_run, load_run, resume_controller
from mlra.console.apps.headless_run import run_headless
from mlra.console.cli.model_server import limits_or_refused
from mlra.console.cli.notify_args import add_notify_arg
from mlra.console.text.args import (
    UsageError,
    add_budget_args,
    check_run_id,
    check_writable_dir,
    gpus,
    positive_int,
    run_path,
)
from mlra.tasks.spec import TaskError, find_task
from mlra.terminal_text import printable_line


def _common(p: argparse.ArgumentParser) -> None:
    """The flags resume and fork share."""
    p.add_argument("--no-tui", action="store_true", help="no console: print a live transcript")
    p.add_argument("--json", action="store_true", help="print the new events as JSON lines")
    p.add_argument("-v", "--verbose", action="store_true", help="headless: stream command output")
    p.add_argument("--base-url", help="an OpenAI-compatible server or API proxy")
    p.add_argument(
        "--gpus", type=gpus, metavar="all|none|IDS", help="GPUs from here on (default: the run's)"
    )
    add_budget_args(  # new totals
        p, whose="the run", default="the recorded run's", log_default="the recorded run's"
    )
    add_notify_arg(p)
    p.add_argument(
        "--break",
        dest="breaks",
        action="append",
        metavar="RULE",
        help="from where the run goes live, break before these tool calls instead of the "
        "run's own breakpoints: '*', a tool name, or 'tool:pattern'",
    )
    p.add_argument(
        "--paused",
        action="store_true",
        help="pause where the run goes live, to step through it from there (n, or "
        "`mlra ctl RUN step` headless)",
    )


def add_resume_command(sub: Any) -> None:
    resume = sub.add_parser(
        "resume",
        description="Continue a run in its own folder: same plan, histories and workspace; "
        "the clock counts the time already spent.",
    )
    resume.add_argument("run_dir", metavar="RUN_DIR")
    resume.add_argument("--model", help="go on with another model (default: the run's own)")
    _common(resume)
    resume.set_defaults(func=cmd_resume)


def add_fork_command(sub: Any) -> None:
    fork = sub.add_parser(
        "fork",
        description="Start a new run from the state before agent step STEP of a recorded run: "
        "its workspace as it was, its histories up to there.",
    )
    fork.add_argument("run_dir", metavar="RUN_DIR")
    fork.add_argument("--at", type=positive_int, required=True, metavar="STEP")
    fork.add_argument("--model", help="the model from there on (default: the run's own)")
    fork.add_argument(
        "--edit-action",
        metavar="JSON",
        help='replace the action taken at STEP: {"tool": "bash", "arguments": {...}} '
        "or the arguments alone",
    )
    fork.add_argument("--message", metavar="TEXT", help="a message to the worker at the fork")
    fork.add_argument(
        "--runs-dir", type=Path, help="where the new run goes (default: beside the source)"
    )
    fork.add_argument("--run-id", help="name the new run's folder")
    _common(fork)
    fork.set_defaults(func=cmd_fork)


def _provider(model: str, base_url: str | None, config: Any) -> Any:
    """The model a resumed or forked run goes on with, set as the run was: the
    temperature, seed, output budget and tool-call mode it recorded, and its context
    window where the user set it (a window learnt from a server is learnt again, by
    `limits_or_refused` once the run is known to go on, before anything is written)."""

    if model == "baseline":
        return None
    settings = ModelSettings(
        context_window=config.context_window if config.context_window_from == "setting" else None,
        max_output_tokens=config.max_output_tokens,
        temperature=config.temperature,
        seed=config.seed,
        tool_calls=config.tool_calls,
    )
    try:
        return resolve_model(model, base_url=base_url, env=os.environ, settings=settings)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _same_kind_of_agent(recorded: str, model: str, verb: str) -> None:
    """The baseline agent (a recipe, no model) and an LLM agent write different logs,
    so neither can take up the other's: the catch-up stopped at the first event with an
    internal error, and a resume had already written that error into the run's own log.
    Refused here in one line, before anything is written."""

    if (recorded == "baseline") == (model == "baseline"):
        return
    if model == "baseline":
        raise UsageError(
            f"--model baseline: the run was made by a model ({recorded}), and the baseline "
            f"agent runs the task's recipe, not a model's log: it cannot {verb} it "
            "(`mlra run TASK --model baseline` runs the recipe afresh)"
        )
    raise UsageError(
        f"--model {model}: the run was made by the baseline agent (the task's recipe), "
        f"whose log no model's agent can take up: it cannot {verb} it "
        f"(`mlra run TASK --model {model}` starts a run with that model)"
    )


def _demo_knows(model: str, task: Any) -> None:
    """`--model demo` (switched to or kept) on a task it has no recipe for, refused as
    `mlra run` refuses it (console/cli/run_checks.py `check_demo`): it went on, read the
    files, asked for a `submission` nothing wrote and ended with nothing submitted. The
    advice is a real model or a new baseline run: a demo run's fork or resume with
    `--model baseline` is refused (`_same_kind_of_agent`)."""
    from mlra.console.cli.run_checks import check_demo

    try:
        named = find_task(task.name).root.resolve() == task.root.resolve()
    except TaskError:
        named = False
    check_demo(model, task, new_run=task.name if named else shlex.quote(str(task.root)))


def _task_of(run: Any) -> Any:
    for name in (run.started.task_dir, run.started.task):
        if not name:
            continue
        try:
            return find_task(name)
        except TaskError:
            continue
    raise UsageError(f"the run's task {run.started.task!r} is not available here")


def _load(run_dir: Path) -> Any:
    try:
        return load_run(run_dir)
    except ResumeError as exc:
        raise UsageError(str(exc)) from None


def _overrides(args: argparse.Namespace, use_tui: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"on_provider_failure": "pause" if use_tui else "end"}
    if args.notify:  # never recorded: given again on each resume
        out["notify"] = args.notify
    if args.paused:
        out["start_paused"] = True
    for flag, key in (
        ("time_limit", "time_limit_s"),
        ("max_steps", "max_steps"),
        ("max_cost", "max_cost_usd"),
        ("max_tokens", "max_tokens"),
        ("log_budget", "log_budget_mb"),
        ("base_url", "base_url"),
        ("gpus", "gpus"),
    ):
        if getattr(args, flag) is not None:
            out[key] = getattr(args, flag)
    return out


def _go(controller: Any, recorded: list[Any], args: argparse.Namespace, use_tui: bool) -> int:
    if use_tui:
        try:
            # lazy: Textual, which --no-tui never needs
            from mlra.console.apps.app import continue_in_console
        except ImportError:
            use_tui = False
        else:
            return continue_in_console(controller, recorded)
    return run_headless(
        controller.config,
        controller.task,
        controller.provider,
        json_lines=args.json,
        verbose=args.verbose,
        controller=controller,
        recorded=recorded,
    )


def _action_check(config: Any) -> Any:
    """What is wrong with a fork's `--edit-action`: a tool the worker (whose step a fork
    is at; of a baseline run, the baseline) does not have, said with its tools, or
    arguments the tool would refuse, as the console's edit at a breakpoint says them
    (agent/agents/tool_lists.py)."""
    from mlra.agent.agents.tool_lists import run_tools
    from mlra.agent.loop.controls import Breakpoint, breakpoint_problem
    from mlra.tools.registry import validated

    baseline = config.model == "baseline"
    agent = "baseline" if baseline else "worker"
    worker = {tool.name: tool for tool in run_tools(config, model=not baseline).get(agent, [])}

    def check(name: str, arguments: dict[str, Any]) -> str | None:
        if not worker:  # a search's steps: its attempts' workers act
            return None
        tool = worker.get(name)
        if tool is None:
            problem = breakpoint_problem(Breakpoint(tool=name), {"worker": tuple(worker)})
            return problem or f"the worker has no tool {name!r}"
        return validated(tool, arguments)[1]

    return check


def _checked_breaks(args: argparse.Namespace, config: Any, provider: Any) -> list[Any] | None:
    """`--break`'s rules, refused in one line where one would never fire (before
    anything is written), for `_break_from_live`."""
    if args.breaks is None:
        return None
    from mlra.agent.loop.controls import Breakpoint
    from mlra.console.cli.run_checks import check_breaks

    check_breaks(config.model_copy(update={"breakpoints": args.breaks}), model=provider is not None)
    return [Breakpoint.parse(rule) for rule in args.breaks]


def _break_from_live(controller: Any, breaks: list[Any] | None) -> None:
    """The new breakpoints set where the run goes live, recorded there as the user's
    `breakpoints` control: the catch-up runs under the rules the log holds, so it
    takes its recorded decisions as they were made."""
    if breaks is not None:
        controller.catchup.when_live(lambda: controller.set_breakpoints(breaks))


def _use_tui(args: argparse.Namespace) -> bool:
    return not (args.no_tui or args.json) and sys.stdout.isatty() and sys.stdin.isatty()


def cmd_resume(args: argparse.Namespace) -> int:
    run = _load(run_path(args.run_dir))
    task = _task_of(run)
    model = args.model or run.config.model
    _same_kind_of_agent(run.config.model, model, "resume")
    _demo_knows(model, task)
    use_tui = _use_tui(args)
    overrides = _overrides(args, use_tui) | {"model": model}
    provider = _provider(model, args.base_url or run.config.base_url, run.config)
    breaks = _checked_breaks(args, run.config, provider)
    try:
        # A run that cannot go on is said first, whatever its server; the server is
        # asked before the log is reopened (a torn line dropped).
        controller = resume_controller(
            run, task, provider, overrides=overrides, ready=lambda: limits_or_refused(provider)
        )
    except ResumeError as exc:
        raise UsageError(str(exc)) from None
    _break_from_live(controller, breaks)
    if not args.json:
        print(
            f"resuming {run.run_dir.name} after {len(run.events)} events "
            f"({run.elapsed_s:.0f} s of {controller.time_limit_s:.0f} s used)"
            + ("; dropped a half-written last line" if run.torn else ""),
            flush=True,
        )
    return _go(controller, run.events, args, use_tui)


def cmd_fork(args: argparse.Namespace) -> int:
    check_run_id(args.run_id)
    source = _load(run_path(args.run_dir))
    task = _task_of(source)
    model = args.model or source.config.model
    _same_kind_of_agent(source.config.model, model, "fork")
    _demo_knows(model, task)
    edit = None
    if args.edit_action is not None:
        try:
            edit = json.loads(args.edit_action)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--edit-action is not JSON: {exc.msg}") from None
        if not isinstance(edit, dict):
            raise UsageError("--edit-action must be a JSON object")
    use_tui = _use_tui(args)
    provider = _provider(model, args.base_url or source.config.base_url, source.config)
    breaks = _checked_breaks(args, source.config, provider)
    runs_dir = args.runs_dir or source.run_dir.parent
    run_id = args.run_id or new_run_id(task.name)
    if (runs_dir / run_id).exists():
        raise UsageError(f"run folder {runs_dir / run_id} already exists")
    check_writable_dir(runs_dir, "--runs-dir")
    overrides = _overrides(args, use_tui) | {"model": model}
    try:
        forked = fork_run(
            source,
            task,
            at_step=args.at,
            run_dir=runs_dir / run_id,
            model=model,
            edit_action=edit,
            message=args.message,
            # A server nothing answers at: refused once the fork is possible, before its
            # folder is made.
            ready=lambda: limits_or_refused(provider),
            settings=overrides,
            check_action=_action_check(source.config),
        )
        controller = resume_controller(forked, task, provider, overrides=overrides)
    except ResumeError as exc:
        raise UsageError(str(exc)) from None
    _break_from_live(controller, breaks)

    fork_event = next(e for e in reversed(forked.events) if isinstance(e, ev.RunForked))
    if not args.json:
        missing = fork_event.missing_files

        print(
            printable_line(  # the workspace's file names: shown, not obeyed
                f"forked {source.run_dir.name} at step {args.at} into {run_id}"
                + (
                    f"; not restored (recorded by hash only): {', '.join(missing)}"
                    if missing
                    else ""
                )
            ),
            flush=True,
        )
        for gap in fork_event.not_recorded:  # mlra's own counts and reasons
            print(f"  not restored, as it was never recorded: {gap}", flush=True)
        if lost := _lost_at_fork(forked.events, fork_event):
            print(
                f"  {'attempt' if len(lost) == 1 else 'attempts'} {', '.join(lost)} "
                f"{'was' if len(lost) == 1 else 'were'} running at step {args.at}: lost in "
                f"the fork (what {'it' if len(lost) == 1 else 'they'} did after belongs to "
                f"{source.run_dir.name})",
                flush=True,
            )
    return _go(controller, forked.events, args, use_tui)


def _lost_at_fork(events: list[ev.Event], fork_event: ev.RunForked) -> list[str]:
    """The search's attempts the fork records lost: they were running at its step (their
    `attempt_finished` come just before `run_forked`)."""
    at = next(i for i, e in enumerate(events) if e is fork_event)
    lost: list[str] = []
    for event in reversed(events[:at]):
        if not (isinstance(event, ev.AttemptFinished) and event.status == "lost"):
            break
        lost.insert(0, printable_line(event.attempt))
    return lost
