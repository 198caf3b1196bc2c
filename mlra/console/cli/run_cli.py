"""`mlra run`: its flags, their checks, and the run started in the console or headless.

Apart from console/cli/cli.py (which keeps `main` and the list of commands) because `run`
alone has some fifty flags and the checks that go with them; like the rest of the CLI,
only argparse and the flag helpers are imported before the command runs, and bad input
gets one line and exit status 2 before any run folder is made.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mlra.console.cli.agent_args import add_agent_args, agent_settings
from mlra.console.cli.fetch_args import TOOL_CHOICES, add_fetch_args, fetch_settings
from mlra.console.cli.notify_args import add_notify_arg
from mlra.console.cli.tasks_cli import load_task_named
from mlra.console.text.args import (
    UsageError,
    add_budget_args,
    check_backend,
    check_disk_fits,
    check_run_id,
    check_writable_dir,
    disk_mb,
    duration,
    gpus,
    memory_mb,
    positive_float,
    positive_int,
    temperature,
)
from mlra.tools.sandbox.backends import BACKENDS, DEFAULT_BACKEND, sandbox_backend


def add_run_command(sub: Any) -> None:
    run = sub.add_parser(
        "run", help="run an agent on a task", description="Run an agent on a task."
    )
    run.add_argument("task", metavar="TASK", help="a task name (see `mlra tasks`) or a task folder")
    run.add_argument(
        "--model",
        help="anthropic/<model>, openai/<model>, baseline (the task's recipe, no LLM) or demo "
        "(scripted: try the console with no key). Default: $MLRA_MODEL, else by which key is set",
    )
    run.add_argument(
        "--base-url", help="an OpenAI-compatible server (vLLM, llama.cpp, Ollama) or API proxy"
    )
    run.add_argument(
        "--baseline-validate",
        action="store_true",
        help="with --model baseline: validate the recipe's artifact (the `validate` tool, on "
        "the task's validation split) before submitting it",
    )
    add_agent_args(run)
    run.add_argument(
        "--ungraded",
        action="store_true",
        help="run a task this machine cannot grade (no evaluator, grading needs the network "
        "or a module not installed); refused otherwise. The run log and result.json say so",
    )
    run.add_argument("--no-tui", action="store_true", help="no console: print a live transcript")
    run.add_argument(
        "--json", action="store_true", help="print the events as JSON lines (implies --no-tui)"
    )
    run.add_argument("-v", "--verbose", action="store_true", help="headless: stream command output")
    add_budget_args(run, whose="the run", default="the task's", log_default="256m")
    run.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="where run folders go (default ./runs)"
    )
    run.add_argument("--run-id", help="name the run folder yourself")
    run.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="which repetition this run is (recorded); sent to models that take a sampling "
        "seed, and to a baseline recipe that takes `{seed}`",
    )
    run.add_argument(
        "--direction",
        choices=("higher", "lower"),
        help="which way the task's metric improves, for a folder whose own files do not say "
        "(an evaluator mlra does not recognize): without it the run scores but success is "
        "not judged",
    )
    run.add_argument(
        "--context-window",
        type=positive_int,
        metavar="TOKENS",
        help="the model's context window (default: what the server says, else the model's known one)",
    )
    run.add_argument(
        "--max-output-tokens",
        type=positive_int,
        metavar="TOKENS",
        help="the most tokens one model answer may have (default 8192, or the model's limit)",
    )
    run.add_argument(
        "--temperature", type=temperature, metavar="T", help="sampling temperature, 0 to 2"
    )
    run.add_argument(
        "--tool-calls",
        choices=["native", "text", "auto"],
        default="auto",
        help="tool calls the model writes as text: auto (read them when an answer has no "
        "native call), text (describe the tools in the prompt, read calls from text), "
        "native (never read text)",
    )
    run.add_argument(
        "--isolation",
        choices=["auto", "bwrap", "none"],
        default="auto",
        help="local sandbox isolation: auto (bubblewrap; an LLM agent is refused without it), "
        "bwrap, or none (unconfined: only when you accept an unisolated score)",
    )
    run.add_argument(
        "--sandbox",
        choices=list(BACKENDS),
        default=DEFAULT_BACKEND,
        help="where commands run: this machine, or a Docker container (default local)",
    )
    run.add_argument(
        "--image", help="docker sandbox: the image (default: the task's, else mlra:latest)"
    )
    run.add_argument(
        "--gpus",
        type=gpus,
        metavar="all|none|IDS",
        help="GPUs for the run's commands, validations and grading (ids: 0,2; default for a "
        "task that needs a GPU: those CUDA_VISIBLE_DEVICES names, else all)",
    )
    run.add_argument(
        "--memory",
        type=memory_mb,
        metavar="SIZE",
        help="memory of the sandbox's commands together, /tmp and /dev/shm counted (16g, or "
        "none; default: the task's memory_gb, else this machine's RAM less max(2g, 1/8))",
    )
    run.add_argument(
        "--disk",
        type=disk_mb,
        metavar="SIZE",
        help="the workspace's disk quota (50g, or none; default: the task's disk_gb, else "
        "half the free space of the runs folder's disk beyond its reserve of max(2g, 5%%), "
        "at most 200g); given, also its grader's scratch folder's",
    )
    run.add_argument(
        "--snapshot-quota",
        type=disk_mb,
        metavar="SIZE",
        help="the most disk the run's workspace snapshots take for file contents (2g, or none; "
        "default 1g): past it changed files are recorded by size and hash only",
    )
    run.add_argument(
        "--cpus",
        type=positive_float,
        metavar="N",
        help="CPUs of the run's commands together (e.g. 8; a cgroup quota, or Docker's)",
    )
    run.add_argument(
        "--machine-shared-by",
        type=positive_int,
        default=1,
        metavar="K",
        help="K runs share this machine at once (mlra batch --parallel K sets it): the "
        "run's default memory, CPUs and disk are 1/K of the machine's",
    )
    run.add_argument(
        "--observation-limit",
        type=positive_int,
        metavar="CHARS",
        default=10_000,
        help="characters of tool output the model sees (default 10000)",
    )
    run.add_argument(
        "--max-supervisor-turns",
        type=positive_int,
        metavar="N",
        default=100,
        help="end the run (reason budget) after N supervisor turns (default 100)",
    )
    run.add_argument(
        "--command-timeout",
        type=duration,
        metavar="T",
        default=600.0,
        help="default time-out of one command (default 10m)",
    )
    run.add_argument(
        "--server-wait",
        type=duration,
        metavar="T",
        default=300.0,
        help="how long to wait, clock paused, for a model server that went away (default 5m)",
    )
    add_fetch_args(run)
    add_notify_arg(run)
    run.add_argument(
        "--break",
        dest="breaks",
        action="append",
        default=[],
        metavar="RULE",
        help="break before tool calls: '*', a tool name, or 'tool:pattern' (headless: "
        "`mlra ctl RUN approve` releases a held call)",
    )
    run.add_argument(
        "--break-runs-jobs",
        action="store_true",
        help="while a call waits at a breakpoint, let commands and jobs go on "
        "running (the wait counts on the run clock); by default they are suspended and "
        "the clock stops, as a pause does",
    )
    run.add_argument(
        "--paused",
        action="store_true",
        help="start paused, to step through the run from its first action (headless: "
        "`mlra ctl RUN step|resume`)",
    )
    run.set_defaults(func=cmd_run)


def _prepared(task: Any) -> Any:
    """A foreign task folder (MLAgentBench, MLRC-Bench) read from its prepared copy, its
    prepare.py run first where it never ran; any other task as it is."""
    from mlra.tasks.foreign.loader import is_foreign
    from mlra.tasks.foreign.prepare import prepared
    from mlra.tasks.spec import TaskError
    from mlra.terminal_text import printable

    if not is_foreign(task.root):
        return task
    try:
        # What the task's prepare.py prints: shown, not obeyed.
        return prepared(task, echo=lambda line: print(printable(line), file=sys.stderr, flush=True))
    except TaskError as exc:
        raise UsageError(str(exc)) from None


def _resolve_model(args: argparse.Namespace) -> tuple[str, Any]:
    """The model spec and its provider (None for the baseline agent), with the context
    window learnt from the server where it tells it (before the run records its limits)."""
    from mlra.agent.providers import ModelSettings, default_model_spec, resolve_model
    from mlra.agent.providers.base import ConfigError
    from mlra.console.cli.model_server import limits_or_refused

    settings = ModelSettings(
        context_window=args.context_window,
        max_output_tokens=args.max_output_tokens,
        temperature=args.temperature,
        seed=args.seed,
        tool_calls=args.tool_calls,
    )
    try:
        spec = args.model or default_model_spec(os.environ)
        if spec.strip() == "baseline":
            return "baseline", None
        provider = resolve_model(spec, base_url=args.base_url, env=os.environ, settings=settings)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    # Refused here (exit 75 or 69) before a task's prepare.py or environment is built.
    limits_or_refused(provider)
    return spec, provider


def cmd_run(args: argparse.Namespace) -> int:
    from mlra.agent.setup.config import RunConfig

    check_run_id(args.run_id)
    task = load_task_named(args.task)
    named = args.model or os.environ.get("MLRA_MODEL", "")  # the default is never the baseline
    if args.baseline_validate and named.strip() != "baseline":  # before a server is reached
        raise UsageError("--baseline-validate is for the baseline agent (--model baseline)")
    model, provider = _resolve_model(args)
    _recorded_limits(args, provider)
    search = agent_settings(args, task, model)
    from mlra.tasks.success import direction_conflict

    conflict = direction_conflict(task, args.direction)
    if conflict is not None:
        raise UsageError(conflict)
    gpu_notices = _host_gpus(args, task)
    backend = _checked_backend(args, task, model)
    if args.run_id and (args.runs_dir / args.run_id).exists():
        raise UsageError(f"run folder {args.runs_dir / args.run_id} already exists")
    use_tui = not (args.no_tui or args.json) and sys.stdout.isatty() and sys.stdin.isatty()
    # --break and --paused hold a headless run too: `mlra ctl` / `mlra attach` release it.
    check_disk_fits(args.disk, args.runs_dir)
    check_writable_dir(args.runs_dir, "--runs-dir")
    from mlra.console.cli.needs_cli import gradable_or_refused, starter_notices

    gradable_or_refused(task, args.ungraded)  # before a prepare that may take hours
    task = _prepared(task)
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
        _check_window(config, task, provider, args.max_output_tokens)
    check_breaks(config, model=provider is not None)
    if use_tui:
        app_runner = _tui_runner()
        if app_runner is not None:
            return app_runner(config, task, provider)
    from mlra.console.apps.headless_run import run_headless

    return run_headless(config, task, provider, json_lines=args.json, verbose=args.verbose)


def _check_window(config: Any, task: Any, provider: Any, output_set: int | None) -> None:
    """A window too small for the agents' own first requests, refused before the run
    starts (agent/agents/window_floor.py); a replay sends nothing, so any window does."""
    from mlra.agent.agents.window_floor import window_problem
    from mlra.agent.loop.replay_provider import ReplayProvider

    if isinstance(provider, ReplayProvider) or config.context_window is None:
        return
    problem = window_problem(
        config, task, config.context_window, config.max_output_tokens, output_set
    )
    if problem is not None:
        raise UsageError(problem)


def check_breaks(config: Any, *, model: bool) -> None:
    """A `--break` rule naming a tool none of the run's agents has would never fire:
    refused before the run starts, naming the tools they have (agent/agents/tool_lists.py)."""
    if not config.breakpoints:
        return
    from mlra.agent.agents.tool_lists import run_tool_names
    from mlra.agent.loop.controls import rule_problem

    tools = run_tool_names(config, model=model)
    for rule in config.breakpoints:
        problem = rule_problem(rule, tools)
        if problem is not None:
            raise UsageError(f"--break {rule!r}: {problem}")


def _recorded_limits(args: argparse.Namespace, provider: Any) -> None:
    """`--model replay:RUN` runs under the recorded run's limits where no flag says
    otherwise: the prompts state the limits, so other limits would read as a divergence
    at the first model call, and the recording's deadline would not be the replay's."""
    from mlra.agent.loop.replay_provider import ReplayProvider

    if not isinstance(provider, ReplayProvider) or provider.limits is None:
        return
    limits = provider.limits
    if args.time_limit is None:
        args.time_limit = limits.time_limit_s
    if args.max_steps is None:
        args.max_steps = limits.max_steps
    if args.max_cost is None:
        args.max_cost = limits.max_cost_usd
    if args.max_tokens is None:
        args.max_tokens = limits.max_tokens
    if args.agent is None and provider.agent is not None:
        args.agent = provider.agent


def _host_gpus(args: argparse.Namespace, task: Any) -> list[str]:
    """A task needing GPUs, with no `--gpus`, keeps to those the host's
    CUDA_VISIBLE_DEVICES names (tools/sandbox/gpu_inventory.py), settled here so the run
    records them and a resume keeps them; where they are fewer than the task needs, the
    run's notice at its start says so."""
    from mlra.tools.sandbox.gpu_inventory import host_gpus, shortfall

    if args.gpus is not None or task.resources.gpus <= 0:
        return []
    short = shortfall(task.resources.gpus)
    args.gpus = host_gpus()
    return [short] if short else []


def _checked_backend(args: argparse.Namespace, task: Any, model: str) -> Any:
    """The backend `--sandbox` names, its preflight passed (tools/sandbox/backends.py):
    what must hold before a run folder is made."""
    from mlra.agent.setup.sandboxes import sandbox_request

    backend = sandbox_backend(args.sandbox)
    request = sandbox_request(
        task, model=model, isolation=args.isolation, image=args.image, gpus=args.gpus,
        cpus=args.cpus,
    )  # fmt: skip
    check_backend(backend, request)
    return backend


def _tui_runner() -> Any:
    try:
        from mlra.console.apps.app import run_console
    except ImportError:
        return None
    return run_console
