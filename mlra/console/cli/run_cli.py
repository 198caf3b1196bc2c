"""`mlra run`: the run's settings gathered from its flags (run_args.py) once their checks
(run_checks.py) pass, and the run started in the console or headless.

Apart from console/cli/cli.py (which keeps `main` and the list of commands); like the
rest of the CLI, only argparse and the flag helpers are imported before the command
runs, and bad input gets one line and exit status 2 before any run folder is made.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from mlra.console.cli.agent_args import agent_settings
from mlra.console.cli.fetch_args import TOOL_CHOICES, fetch_settings
from mlra.console.cli.run_args import add_run_args
from mlra.console.cli.run_checks import (
    check_breaks,
    check_demo,
    check_window,
    checked_backend,
    host_gpu_notices,
    prepared_task,
    recorded_limits,
    resolved_model,
)
from mlra.console.cli.tasks_cli import load_task_named
from mlra.console.text.args import UsageError, check_disk_fits, check_run_id, check_writable_dir


def add_run_command(sub: Any) -> None:
    run = sub.add_parser(
        "run", help="run an agent on a task", description="Run an agent on a task."
    )
    add_run_args(run)
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from mlra.agent.setup.config import RunConfig

    check_run_id(args.run_id)
    if args.machine_free_disk is not None and args.machine_shared_by < 2:
        raise UsageError("--machine-free-disk is mlra batch's, with --machine-shared-by 2 or more")
    task = load_task_named(args.task)
    named = args.model or os.environ.get("MLRA_MODEL", "")  # the default is never the baseline
    if args.baseline_validate and named.strip() != "baseline":  # before a server is reached
        raise UsageError("--baseline-validate is for the baseline agent (--model baseline)")
    model, provider = resolved_model(args)
    check_demo(model, task)
    recorded_limits(args, provider)
    search = agent_settings(args, task, model)
    from mlra.tasks.success import direction_conflict

    conflict = direction_conflict(task, args.direction)
    if conflict is not None:
        raise UsageError(conflict)
    gpu_notices = host_gpu_notices(args, task)
    backend = checked_backend(args, task, model)
    if args.run_id and (args.runs_dir / args.run_id).exists():
        raise UsageError(f"run folder {args.runs_dir / args.run_id} already exists")
    use_tui = not (args.no_tui or args.json) and sys.stdout.isatty() and sys.stdin.isatty()
    # --break and --paused hold a headless run too: `mlra ctl` / `mlra attach` release it.
    check_disk_fits(args.disk, args.runs_dir)
    check_writable_dir(args.runs_dir, "--runs-dir")
    from mlra.console.cli.needs_cli import gradable_or_refused, starter_notices

    gradable_or_refused(task, args.ungraded)  # before a prepare that may take hours
    task = prepared_task(task)
    from mlra.console.cli.env_cli import environment_before_run

    environment_before_run(task, args.sandbox, args.image)  # before what runs in it
    config = RunConfig(
        task=task.name,
        model=model,
        base_url=args.base_url,
        runs_dir=args.runs_dir,
        run_id=args.run_id,
        time_limit_s=args.time_limit,
        max_steps=args.max_steps,
        max_cost_usd=args.max_cost,
        max_tokens=args.max_tokens,
        observation_limit=args.observation_limit,
        command_timeout_s=args.command_timeout,
        supervisor_max_turns=args.max_supervisor_turns,
        isolation=args.isolation,
        sandbox=args.sandbox,
        image=args.image,
        gpus=args.gpus,
        memory_mb=args.memory,
        disk_mb=args.disk,
        **({} if args.snapshot_quota is None else {"snapshot_quota_mb": args.snapshot_quota}),
        **({} if args.log_budget is None else {"log_budget_mb": args.log_budget}),
        cpus=args.cpus,
        machine_shared_by=args.machine_shared_by,
        machine_free_mb=args.machine_free_disk,
        on_provider_failure="pause" if use_tui else "end",
        server_wait_s=args.server_wait,
        breakpoints=args.breaks,
        break_runs_jobs=args.break_runs_jobs,
        start_paused=args.paused,
        notify=args.notify,
        seed=args.seed,
        direction=args.direction,
        temperature=args.temperature,
        tool_calls=args.tool_calls,
        baseline_validate=args.baseline_validate,
        **search,
        research_tools=list(TOOL_CHOICES) if args.tools is None else args.tools,
        fetch=fetch_settings(args.allow_hosts),
        # Judged again: the prepared copy's downloads, in the task's environment now built.
        ungraded=gradable_or_refused(task, args.ungraded),
        # The starter runs here (a Docker image has its own packages).
        task_notices=[*(starter_notices(task) if backend.host_python else []), *gpu_notices],
    )
    if provider is not None:  # what the run uses, as the provider settled it
        config.context_window = provider.context_window
        config.context_window_from = provider.context_window_from
        config.max_output_tokens = min(
            args.max_output_tokens or config.max_output_tokens, provider.max_output_tokens
        )
        check_window(config, task, provider, args.max_output_tokens)
    check_breaks(config, model=provider is not None)
    if use_tui:
        app_runner = _tui_runner()
        if app_runner is not None:
            return app_runner(config, task, provider)
    from mlra.console.apps.headless_run import run_headless

    return run_headless(config, task, provider, json_lines=args.json, verbose=args.verbose)


def _tui_runner() -> Any:
    try:
        from mlra.console.apps.app import run_console
    except ImportError:
        return None
    return run_console
