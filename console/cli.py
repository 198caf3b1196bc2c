"""The `mlra` command line.

Start-up must stay fast (`mlra --help` under 0.3 s), so this module imports
only argparse at the top; everything else is imported inside the command that
needs it. Bad input of any kind (flags, task files, model names, keys) gets one
readable line on stderr and exit status 2, before any run folder is made.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mlra.console.args import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Parser,
    UsageError,
    add_budget_args,
    check_isolation,
    check_run_id,
    check_writable_dir,
    disk_mb,
    dispatch,
    duration,
    gpus,
    memory_mb,
    positive_float,
    positive_int,
    temperature,
)
from mlra.console.fetch_args import TOOL_CHOICES, add_fetch_args, fetch_settings
from mlra.console.notify_args import add_notify_arg


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mlra",
        description="A terminal console for ML research agents: start an LLM agent on an ML "
        "research task, watch and steer it, and get an honest score.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    run = sub.add_parser(
        "run", help="run an agent on a task", description="Run an agent on a task."
    )
    run.add_argument("task", metavar="TASK", help="a task name (see `mlra tasks`) or a task folder")
    run.add_argument(
        "--model",
        help="anthropic/<model>, openai/<model>, or baseline (no LLM: runs the task's "
        "reference recipe). Default: $MLRA_MODEL, else Anthropic or OpenAI by which key is set",
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
    run.add_argument(
        "--search",
        choices=["none", "greedy", "llm"],
        default="none",
        help="search over attempts, each a worker in a workspace of its own, validated: none "
        "(one line of work, the default), greedy (AIDE's drafts, debug, improve the best; "
        "with --model baseline, the recipe's variants), llm (the supervisor chooses)",
    )
    run.add_argument(
        "--attempts",
        type=_positive_int,
        default=None,
        metavar="N",
        help="with --search: attempts to make at most (default 4)",
    )
    run.add_argument(
        "--attempts-parallel",
        type=_positive_int,
        default=None,
        metavar="K",
        help="with --search: attempts running at once (default 1; the sandbox's memory and "
        "CPUs are shared out between them)",
    )
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
    add_budget_args(run, whose="the run", default="the task's")
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
        choices=["local", "docker"],
        default="local",
        help="where commands run: this machine, or a Docker container (default local)",
    )
    run.add_argument(
        "--image", help="docker sandbox: the image (default: the task's, else mlra:latest)"
    )
    run.add_argument(
        "--gpus", type=gpus, metavar="all|none|IDS", help="GPUs for the sandbox (ids: 0,2)"
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
        "half the free space of the runs folder's disk, at most 200g)",
    )
    run.add_argument(
        "--snapshot-quota",
        type=disk_mb,
        metavar="SIZE",
        help="the most the run's workspace snapshots keep of file contents (2g, or none; "
        "default 1g): past it changed files are recorded by size and hash only",
    )
    run.add_argument(
        "--cpus", type=positive_float, metavar="N", help="docker sandbox CPU limit (e.g. 8)"
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

    tasks = sub.add_parser(
        "tasks",
        help="list the tasks, or show one",
        description="List the tasks (`mlra tasks`), or show one (`mlra tasks NAME`, "
        "or `mlra tasks show NAME`): its prompt, metric, rules and what it needs. NAME may "
        "be an MLAgentBench or MLRC-Bench task folder; `mlra tasks import PATH OUT` writes "
        "one as an mlra task folder; `mlra tasks prepare PATH` prepares one (its prepare.py, "
        "once), checks the copy holds data, and says what its code imports and downloads "
        "that this machine lacks; `mlra tasks clear-baseline PATH [RUN_ID]` forgets the "
        "baseline runs recorded for a folder (all, or one); `mlra tasks env PATH` builds a "
        "task's own Python environment (its declared requirements) where none is cached "
        "and says where it is.",
    )
    tasks.add_argument(
        "action", nargs="?", default="list", metavar="NAME", help="a task to show (default: list)"
    )
    tasks.add_argument("name", nargs="?", help=argparse.SUPPRESS)
    tasks.add_argument("out", nargs="?", help=argparse.SUPPRESS)  # tasks import PATH OUT
    tasks.set_defaults(func=cmd_tasks)

    evaluate = sub.add_parser(
        "eval",
        help="grade a run's submission again",
        description="Grade a run's submission again, host-side: the copy frozen when the run "
        "ended, or with --path a path of the workspace as it is now.",
    )
    evaluate.add_argument(
        "run_dir", metavar="RUN_DIR", type=Path, help="a run folder (runs/<run-id>)"
    )
    evaluate.add_argument(
        "--path",
        help="grade this path of the workspace as it is now, instead of the frozen submission",
    )
    evaluate.add_argument(
        "--isolation",
        choices=["auto", "bwrap", "none"],
        default="auto",
        help="the evaluator's sandbox (default: bubblewrap when it works, else unconfined)",
    )
    evaluate.set_defaults(func=cmd_eval)

    image = sub.add_parser(
        "image",
        help="the Docker image for real runs",
        description="The Docker image for real runs.",
    )
    image.add_argument("action", choices=["build"], help="build docker/Dockerfile")
    image.add_argument(
        "--tag",
        help="the image's name (default mlra:latest; with --task, mlra-task-NAME:latest)",
    )
    image.add_argument("--file", type=Path, help="another Dockerfile (its folder is the context)")
    image.add_argument(
        "--task",
        metavar="PATH",
        help="an MLAgentBench or MLRC-Bench task folder: its requirements installed on --base",
    )
    image.add_argument(
        "--base", default="mlra:latest", help="with --task: the image to start from (mlra:latest)"
    )
    image.set_defaults(func=cmd_image)

    from mlra.console.resume_cli import add_resume_commands

    add_resume_commands(sub)
    from mlra.console.attach_cli import add_attach_command  # `mlra attach`

    add_attach_command(sub)
    from mlra.console.runs_cli import add_replay_commands  # `mlra replay`, `mlra runs`

    add_replay_commands(sub)
    from mlra.console.ctl_cli import add_ctl_command  # `mlra ctl`

    add_ctl_command(sub)
    from mlra.console.batch_cli import (
        add_batch_commands,  # argparse only at import: start-up stays fast
    )

    add_batch_commands(sub)
    from mlra.console.annotate_cli import add_annotate_command  # `mlra annotate`

    add_annotate_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from mlra import __version__

        print(f"mlra {__version__}")
        return EXIT_OK
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return dispatch(args)
    except KeyboardInterrupt:
        sys.stderr.write("mlra: interrupted\n")
        return 130
    except BrokenPipeError:
        # `mlra tasks show X | head`: the reader has what it wanted; no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


# --- mlra run -------------------------------------------------------------------------


def _reference(score: float | None) -> str:
    return "unknown" if score is None else f"{score:g}"


def _load_task(name: str) -> Any:
    from mlra.tasks.spec import TaskError, find_task

    try:
        return find_task(name)
    except TaskError as exc:
        raise UsageError(str(exc)) from None


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
    import asyncio

    from mlra.agent.providers import ModelSettings, default_model_spec, resolve_model
    from mlra.agent.providers.base import ConfigError

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
    asyncio.run(provider.discover_limits())
    return spec, provider


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _search_settings(args: argparse.Namespace, task: Any, model: str) -> dict[str, Any]:
    """`--search`, `--attempts`, `--attempts-parallel` as the run's config, or one line
    saying why they cannot go together."""
    if args.search == "none":
        if args.attempts is not None or args.attempts_parallel is not None:
            raise UsageError("--attempts and --attempts-parallel go with --search greedy or llm")
        return {}
    if args.search == "llm" and model == "baseline":
        raise UsageError(
            "--search llm needs a model to choose the attempts; with --model baseline use "
            "--search greedy (the recipe's variants)"
        )
    if args.search == "greedy" and model == "baseline" and not task.baseline.variants:
        raise UsageError(
            f"task {task.name} declares no recipe variants ([baseline] variants in its "
            "task.toml), so --model baseline has nothing to search over"
        )
    settings: dict[str, Any] = {"search": args.search}
    if args.attempts is not None:
        settings["attempts"] = args.attempts
    if args.attempts_parallel is not None:
        settings["attempts_parallel"] = args.attempts_parallel
    return settings


def cmd_run(args: argparse.Namespace) -> int:
    from mlra.agent.config import RunConfig

    check_run_id(args.run_id)
    task = _load_task(args.task)
    model, provider = _resolve_model(args)
    if args.baseline_validate and model != "baseline":
        raise UsageError("--baseline-validate is for the baseline agent (--model baseline)")
    search = _search_settings(args, task, model)
    from mlra.tasks.success import direction_conflict

    conflict = direction_conflict(task, args.direction)
    if conflict is not None:
        raise UsageError(conflict)
    if args.sandbox == "local":
        check_isolation(args.isolation, model)
    if args.sandbox == "docker":
        _check_docker(args, task)
    if args.run_id and (args.runs_dir / args.run_id).exists():
        raise UsageError(f"run folder {args.runs_dir / args.run_id} already exists")
    use_tui = not (args.no_tui or args.json) and sys.stdout.isatty() and sys.stdin.isatty()
    # --break and --paused hold a headless run too: `mlra ctl` / `mlra attach` release it.
    _recorded_limits(args, provider)
    check_writable_dir(args.runs_dir, "--runs-dir")
    from mlra.console.needs_cli import gradable_or_refused, starter_notices

    gradable_or_refused(task, args.ungraded)  # before a prepare that may take hours
    task = _prepared(task)
    from mlra.console.env_cli import environment_before_run

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
        cpus=args.cpus,
        on_provider_failure="pause" if use_tui else "end",
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
        task_notices=starter_notices(task) if args.sandbox == "local" else [],
    )
    if provider is not None:  # what the run uses, as the provider settled it
        config.context_window = provider.context_window
        config.context_window_from = provider.context_window_from
        config.max_output_tokens = min(
            args.max_output_tokens or config.max_output_tokens, provider.max_output_tokens
        )
        _check_window(config, task, provider, args.max_output_tokens)
    if use_tui:
        app_runner = _tui_runner()
        if app_runner is not None:
            return app_runner(config, task, provider)
    from mlra.console.headless_run import run_headless

    return run_headless(config, task, provider, json_lines=args.json, verbose=args.verbose)


def _check_window(config: Any, task: Any, provider: Any, output_set: int | None) -> None:
    """A window too small for the agents' own first requests, refused before the run
    starts (agent/window_floor.py); a replay sends nothing, so any window does."""
    from mlra.agent.providers.replay import ReplayProvider
    from mlra.agent.window_floor import window_problem

    if isinstance(provider, ReplayProvider) or config.context_window is None:
        return
    problem = window_problem(
        config, task, config.context_window, config.max_output_tokens, output_set
    )
    if problem is not None:
        raise UsageError(problem)


def _recorded_limits(args: argparse.Namespace, provider: Any) -> None:
    """`--model replay:RUN` runs under the recorded run's limits where no flag says
    otherwise: the prompts state the limits, so other limits would read as a divergence
    at the first model call, and the recording's deadline would not be the replay's."""
    from mlra.agent.providers.replay import ReplayProvider

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


def _check_docker(args: argparse.Namespace, task: Any) -> None:
    from mlra.tools.sandbox.docker_sandbox import DEFAULT_IMAGE, DockerUnavailable, preflight

    gpus = args.gpus or ("all" if task.resources.gpus > 0 else "none")
    try:
        preflight(args.image or task.sandbox.image or DEFAULT_IMAGE, gpus)
    except DockerUnavailable as exc:
        raise UsageError(f"--sandbox docker: {exc}") from None


def _tui_runner() -> Any:
    try:
        from mlra.console.app import run_console
    except ImportError:
        return None
    return run_console


# --- mlra tasks -----------------------------------------------------------------------


def cmd_tasks(args: argparse.Namespace) -> int:
    from mlra.tasks.challenge import rule_lines
    from mlra.tasks.readiness import blockers, needs
    from mlra.tasks.spec import TaskError, builtin_task_dirs, load_task
    from mlra.tasks.success import success_bar
    from mlra.terminal_text import printable, printable_line

    if args.action == "env":
        from mlra.console.env_cli import cmd_tasks_env

        return cmd_tasks_env(args)
    if args.action == "import":
        from mlra.console.foreign_cli import cmd_tasks_import

        return cmd_tasks_import(args)
    if args.action == "clear-baseline":
        from mlra.console.baseline_cli import cmd_tasks_clear_baseline

        return cmd_tasks_clear_baseline(args)
    if args.action == "prepare":
        from mlra.console.needs_cli import cmd_tasks_prepare

        return cmd_tasks_prepare(args)
    if args.out is not None:
        raise UsageError(f"tasks: unexpected {args.out!r}")
    if args.action not in ("list", "show"):  # `mlra tasks NAME` shows NAME
        if args.name is not None:
            raise UsageError(f"tasks: one task at a time (got {args.action!r} and {args.name!r})")
        args.action, args.name = "show", args.action
    elif args.action == "list" and args.name is not None:
        raise UsageError(f"tasks list takes no name (to show one: `mlra tasks {args.name}`)")
    if args.action == "show":
        if not args.name:
            raise UsageError("tasks show: name a task (see `mlra tasks`)")
        from mlra.console.foreign_cli import list_benchmark_folder

        if list_benchmark_folder(Path(args.name)):  # a folder of MLAgentBench tasks, say
            return EXIT_OK
        task = _load_task(args.name)
        print(printable(task.render_prompt()))  # a task file's text: shown, not obeyed
        m = task.metric
        way = "higher" if m.higher_is_better else "lower"
        print(
            f"metric:     {m.name} ({f'{way} is better' if m.direction_known else 'direction unknown'}"
            + (", self-reported" if m.self_reported else "")
            + f"); baseline {_reference(m.baseline)}, top reference {_reference(m.top)}"
        )
        print(
            f"success:    {success_bar(m) or m.success_rule + ' (a reference it needs is unset)'}"
        )
        print(f"evaluator:  {task.evaluator.kind} on {task.evaluator.artifact}")
        if task.files.read_only:
            print("read-only:  " + ", ".join(task.files.read_only))
        rules = task.constraints.model_dump(exclude_defaults=True)
        if rules:
            print("rules:      " + "; ".join(f"{k} = {v}" for k, v in rules.items()))
        for line in rule_lines(task.challenge):
            print(printable(line))
        print(
            f"needs:      {needs(task)}"
            + (f"; data: {task.resources.data}" if task.resources.data else "")
        )
        from mlra.console.foreign_cli import foreign_lines
        from mlra.console.needs_cli import machine_line, needs_lines

        print(machine_line(task, blockers(task)))
        for line in foreign_lines(task) + needs_lines(task):
            print(printable(line))
        return EXIT_OK
    for folder in builtin_task_dirs():
        try:
            task = load_task(folder)
        except TaskError as exc:
            print(printable_line(f"{folder.name:<24} BROKEN: {exc}"))
            continue
        problems = blockers(task)
        status = "ready" if not problems else "cannot run here now: " + "; ".join(problems)
        print(printable_line(f"{task.name:<24} {task.title}"))
        print(f"{'':<24} needs {needs(task)} · {status}")
    return EXIT_OK


# --- mlra image -----------------------------------------------------------------------


def cmd_image(args: argparse.Namespace) -> int:
    import tempfile

    from mlra.terminal_text import printable
    from mlra.tools.sandbox.image import ImageBuildError, ImageBuildFailed, build_image

    with tempfile.TemporaryDirectory(prefix="mlra-image-") as context:
        dockerfile, tag = args.file, args.tag or "mlra:latest"
        if args.task:
            from mlra.console.foreign_cli import task_image_context

            if args.file:
                raise UsageError("image build: --task writes its own Dockerfile; drop --file")
            dockerfile, tag = task_image_context(args.task, Path(context), args.base, args.tag)
        try:
            # A build's output (a task's environment, its packages' scripts): shown only.
            build_image(
                tag, dockerfile=dockerfile, echo=lambda line: print(printable(line), flush=True)
            )
        except ImageBuildFailed as exc:
            sys.stderr.write(f"mlra: {printable(str(exc))}\n")
            return EXIT_FAILED
        except ImageBuildError as exc:
            raise UsageError(str(exc)) from None
    print(f"built {tag}" + (f" (run with --sandbox docker --image {tag})" if args.task else ""))
    return EXIT_OK


# --- mlra eval ------------------------------------------------------------------------


def cmd_eval(args: argparse.Namespace) -> int:
    """Grade a run's submission again; the new evaluation is appended to the run's log.

    What was frozen at submission is what is graded, checked against its recorded
    digest; the workspace (changed since, perhaps) only when asked with --path, or
    for a run that has no frozen copy, and the output says which. It is recorded as
    a re-grade (what, when, by whom), kept beside the run's own result in
    result.json, never in its place: a score the agent did not earn in its run must
    not read as its own.
    """
    import asyncio

    from mlra import events as ev
    from mlra.agent.eventlog import EVENTS_FILE, EventLog, LogDamage, RunInUse, read_events
    from mlra.agent.state import fold, write_result
    from mlra.tasks.evaluators.progress import progress_words
    from mlra.tasks.grading import grade, grade_artifact
    from mlra.tasks.spec import TaskError, find_task, load_task
    from mlra.terminal_text import printable_line
    from mlra.tools.submission import artifact_digest, describe_error

    run_dir: Path = args.run_dir
    log_path = run_dir / EVENTS_FILE
    if not log_path.is_file():
        raise UsageError(f"{run_dir} is not a run folder (no {EVENTS_FILE})")
    try:
        events = read_events(log_path)
    except LogDamage as exc:
        raise UsageError(str(exc)) from None
    state = fold(events)
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    if started is None:
        raise UsageError(f"{log_path} has no run_started event")
    try:
        task = (
            load_task(Path(started.task_dir))
            if started.task_dir and Path(started.task_dir).is_dir()
            else find_task(started.task)
        )
    except TaskError as exc:
        raise UsageError(str(exc)) from None
    from mlra.tasks.success import with_direction

    task = with_direction(task, started.config.get("direction"))  # as the run stated it
    submission = state.submission
    submitted = args.path or (submission.path if submission else None)
    label = submitted or task.evaluator.artifact
    frozen = None
    if args.path is None and submission is not None and submission.frozen:
        frozen = run_dir / submission.frozen
        if not os.path.lexists(frozen):
            print(
                printable_line(
                    f"note: the frozen copy {submission.frozen} is missing; grading the workspace"
                )
            )
            frozen = None
        elif submission.sha256:
            try:
                digest = artifact_digest(frozen)[0]
            except (OSError, ValueError) as exc:
                raise UsageError(
                    f"the frozen copy {submission.frozen} cannot be read, so it is not "
                    f"graded: {describe_error(exc)}"
                ) from None
            if digest != submission.sha256:
                raise UsageError(
                    f"the frozen copy {submission.frozen} no longer matches the sha256 recorded "
                    "at submission; it was changed after the run, so it is not graded "
                    "(grade the workspace with --path)"
                )
    check_writable_dir(run_dir, "eval:")  # the new evaluation is appended to the run's log
    try:
        log = EventLog(log_path, start_seq=events[-1].seq if events else 0)
    except RunInUse as exc:
        raise UsageError(f"{exc}; wait for the run to end") from None
    log.subscribe(state.apply)

    def stamp(event: ev.Event) -> None:
        event.t = state.elapsed_s
        if isinstance(event, ev.EvaluationStarted):
            event.regrade_by = _who()
        log.append(event)

    def progress(event: ev.EvaluationProgress) -> None:
        stamp(event)
        print(f"grading: {progress_words(event)}", flush=True)  # escaped there

    out_dir = run_dir / "evaluation"
    if frozen is not None:
        assert submission is not None
        print(
            printable_line(
                f"grading the frozen submission {submission.frozen} (sha256 {submission.sha256})"
            )
        )
        grading = grade_artifact(
            task,
            label,
            frozen,
            out_dir,
            graded=submission.frozen,
            sha256=submission.sha256,
            on_start=stamp,
            on_progress=progress,
            isolation=args.isolation,
        )
    else:
        print(printable_line(f"grading the workspace as it is now: {label}"))
        grading = grade(
            task,
            run_dir / "workspace",
            submitted,
            out_dir,
            workdir=state.sandbox.workdir if state.sandbox is not None else None,
            on_start=stamp,
            on_progress=progress,
            isolation=args.isolation,
        )
    try:
        _, finished = asyncio.run(grading)
        if state.sandbox is not None:
            finished.agent_isolation = state.sandbox.isolation
        stamp(finished)
    finally:
        log.close()
    if state.finished is not None:
        write_result(state, run_dir)
    from mlra.console.headless import score_line

    print(printable_line(f"{task.name} · {label} · {score_line(finished)}"))
    own = state.evaluation
    print(
        "re-grade recorded beside the run's own result ("
        + (f"its own score: {score_line(own)}" if own is not None else "the run had no grading")
        + ")"
    )
    if finished.isolation == "none":
        print("note: the evaluator ran unconfined (no isolation could be had)")
    if state.finished is None:
        print("note: the run has not finished (no run_finished event); result.json is not written")
    return EXIT_OK if finished.ok else EXIT_FAILED


def _who() -> str:
    """user@host, as a re-grade records who ran it."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"
