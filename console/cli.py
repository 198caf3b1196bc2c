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
from typing import Any, NoReturn

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"mlra: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(EXIT_USAGE)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text.lstrip("$"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _duration(text: str) -> float:
    from mlra.agent.clock import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _gpus(text: str) -> str:
    value = text.strip()
    ids = [g.strip() for g in value.split(",")]
    if value.lower() in ("all", "none") or (value and all(ids)):
        return value.lower() if value.lower() in ("all", "none") else ",".join(ids)
    raise argparse.ArgumentTypeError(f"{text!r}: use all, none or GPU ids such as 0,2")


def _memory_mb(text: str) -> int:
    """Sizes as Docker writes them (512m, 16g, 16GB); a plain number is in MB."""
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
    raw = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = raw[-1:] if raw[-1:] in units else "m"
    try:
        value = float(raw[:-1] if raw[-1:] in units else raw) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 512m, 16g)") from None
    if value < 6:
        raise argparse.ArgumentTypeError(f"{text!r} is too small for a container (at least 6m)")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mlra",
        description="A terminal console for ML research agents: start an LLM agent on an ML "
        "research task, watch and steer it, and get an honest score.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

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
    run.add_argument("--no-tui", action="store_true", help="no console: print a live transcript")
    run.add_argument(
        "--json", action="store_true", help="print the events as JSON lines (implies --no-tui)"
    )
    run.add_argument("-v", "--verbose", action="store_true", help="headless: stream command output")
    run.add_argument(
        "--time-limit",
        type=_duration,
        metavar="T",
        help="override the task's limit (90s, 20m, 1h30m)",
    )
    run.add_argument(
        "--max-steps", type=_positive_int, metavar="N", help="end after N worker steps"
    )
    run.add_argument(
        "--max-cost",
        type=_positive_float,
        metavar="USD",
        help="end when the model cost reaches USD",
    )
    run.add_argument(
        "--max-tokens", type=_positive_int, metavar="N", help="end after N model tokens"
    )
    run.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="where run folders go (default ./runs)"
    )
    run.add_argument("--run-id", help="name the run folder yourself")
    run.add_argument(
        "--seed", type=int, metavar="N", help="which repetition this run is (recorded in the log)"
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
        "--gpus", type=_gpus, metavar="all|none|IDS", help="GPUs for the sandbox (ids: 0,2)"
    )
    run.add_argument(
        "--memory", type=_memory_mb, metavar="SIZE", help="docker sandbox memory limit (16g)"
    )
    run.add_argument(
        "--cpus", type=_positive_float, metavar="N", help="docker sandbox CPU limit (e.g. 8)"
    )
    run.add_argument(
        "--observation-limit",
        type=_positive_int,
        metavar="CHARS",
        default=10_000,
        help="characters of tool output the model sees (default 10000)",
    )
    run.add_argument(
        "--command-timeout",
        type=_duration,
        metavar="T",
        default=600.0,
        help="default time-out of one command (default 10m)",
    )
    run.add_argument(
        "--break",
        dest="breaks",
        action="append",
        default=[],
        metavar="RULE",
        help="console: break before tool calls: '*', a tool name, or 'tool:pattern'",
    )
    run.add_argument(
        "--paused",
        action="store_true",
        help="console: start paused, to step through the run from its first action",
    )
    run.set_defaults(func=cmd_run)

    tasks = sub.add_parser("tasks", help="list the tasks, or show one", description="List tasks.")
    tasks.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    tasks.add_argument("name", nargs="?", help="the task to show")
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
        "--tag", default="mlra:latest", help="the image's name (default mlra:latest)"
    )
    image.add_argument("--file", type=Path, help="another Dockerfile (its folder is the context)")
    image.set_defaults(func=cmd_image)

    from mlra.console.resume_cli import add_resume_commands

    add_resume_commands(sub)
    from mlra.console.runs_cli import add_replay_commands  # `mlra replay`, `mlra runs`

    add_replay_commands(sub)
    from mlra.batch.cli import add_batch_commands  # argparse only at import: start-up stays fast

    add_batch_commands(sub)
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
        return int(args.func(args))
    except UsageError as exc:
        sys.stderr.write(f"mlra: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("mlra: interrupted\n")
        return 130
    except BrokenPipeError:
        # `mlra tasks show X | head`: the reader has what it wanted; no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


# --- mlra run -------------------------------------------------------------------------


def _load_task(name: str) -> Any:
    from mlra.tasks.spec import TaskError, find_task

    try:
        return find_task(name)
    except TaskError as exc:
        raise UsageError(str(exc)) from None


def _resolve_model(args: argparse.Namespace) -> tuple[str, Any]:
    """The model spec and its provider (None for the baseline agent)."""
    from mlra.agent.providers import default_model_spec, resolve_model
    from mlra.agent.providers.base import ConfigError

    try:
        spec = args.model or default_model_spec(os.environ)
        if spec.strip() == "baseline":
            return "baseline", None
        return spec, resolve_model(spec, base_url=args.base_url, env=os.environ)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def check_isolation(isolation: str, model: str) -> None:
    """Refuse, before anything is created, a run whose agent would go unconfined.

    Only the user's explicit `--isolation none` lets an LLM agent run unconfined;
    the baseline agent's fixed recipe may, with a warning, since it is the task's own.
    """
    if isolation == "none":
        return
    from mlra.tools.sandbox.bwrap import isolation_problem
    from mlra.tools.sandbox.local import INSTALL_HINT

    problem = isolation_problem()
    if problem is None:
        return
    if isolation == "bwrap" or model != "baseline":
        raise UsageError(
            f"no isolation for the agent's commands ({problem}): {INSTALL_HINT}, "
            "or pass --isolation none to run the agent unconfined"
        )
    print(
        f"mlra: warning: {problem}; the baseline agent runs unconfined and its score "
        "is marked unisolated",
        file=sys.stderr,
    )


def check_run_id(run_id: str | None) -> None:
    """A run id names a folder inside the runs folder, never a path out of it."""
    if run_id is None:
        return
    from mlra.agent.controller import run_id_problem

    problem = run_id_problem(run_id)
    if problem is not None:
        raise UsageError(f"--run-id: {problem}; it names a folder inside --runs-dir")


def cmd_run(args: argparse.Namespace) -> int:
    from mlra.agent.config import RunConfig

    check_run_id(args.run_id)
    task = _load_task(args.task)
    model, provider = _resolve_model(args)
    if args.sandbox == "local":
        check_isolation(args.isolation, model)
    if args.sandbox == "docker":
        _check_docker(args, task)
    if args.run_id and (args.runs_dir / args.run_id).exists():
        raise UsageError(f"run folder {args.runs_dir / args.run_id} already exists")
    use_tui = not (args.no_tui or args.json) and sys.stdout.isatty() and sys.stdin.isatty()
    if (args.breaks or args.paused) and not use_tui:
        flag = "--break" if args.breaks else "--paused"
        raise UsageError(
            f"{flag} needs the console (run on a terminal, without --no-tui or --json)"
        )
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
        isolation=args.isolation,
        sandbox=args.sandbox,
        image=args.image,
        gpus=args.gpus,
        memory_mb=args.memory,
        cpus=args.cpus,
        on_provider_failure="pause" if use_tui else "end",
        breakpoints=args.breaks,
        start_paused=args.paused,
        seed=args.seed,
    )
    if use_tui:
        app_runner = _tui_runner()
        if app_runner is not None:
            return app_runner(config, task, provider)
    return _run_headless(config, task, provider, json_lines=args.json, verbose=args.verbose)


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


def _run_headless(
    config: Any,
    task: Any,
    provider: Any,
    *,
    json_lines: bool,
    verbose: bool,
    controller: Any = None,
) -> int:
    import asyncio
    import json
    import signal

    from mlra.agent.controller import RunController
    from mlra.agent.run import agent_for
    from mlra.console.headless import JsonDisplay, TranscriptDisplay

    display = JsonDisplay() if json_lines else TranscriptDisplay(verbose=verbose)
    if controller is None:
        controller = RunController(config, task, provider)
        controller.subscribe(display.on_event)
        controller.prepare()
    else:  # resumed or forked: the log is open; only what happens from now is shown
        controller.subscribe(display.on_event)

    async def go() -> Any:
        loop = asyncio.get_running_loop()
        hits = 0

        def on_interrupt() -> None:
            nonlocal hits
            hits += 1
            if hits == 1:
                sys.stderr.write(
                    "\nmlra: stopping; evaluating what the workspace holds "
                    "(Ctrl-C again to quit without evaluating)\n"
                )
                controller.request_stop(evaluate=True)
            else:
                controller.abort()

        def on_terminate() -> None:
            controller.abort()

        loop.add_signal_handler(signal.SIGINT, on_interrupt)
        loop.add_signal_handler(signal.SIGTERM, on_terminate)
        try:
            return await controller.run(agent_for)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
            if provider is not None:
                await provider.aclose()

    result = asyncio.run(go())
    display.close()
    if json_lines:
        print(json.dumps({"run_dir": str(controller.run_dir), **result.model_dump()}), flush=True)
    else:
        print(final_line(controller.run_dir, result), flush=True)
    return exit_status(result)


def final_line(run_dir: Path, result: Any) -> str:
    """The last line a headless run prints; a score earned without isolation says so,
    since the agent could have reached what the grader reads."""
    try:
        shown = os.path.relpath(run_dir)
    except ValueError:
        shown = str(run_dir)
    isolation = getattr(result, "isolation", None)
    if result.score is not None:
        score = f"score {result.metric} = {result.score:.4g}"
        if result.normalized_score is not None:
            score += f" (normalized {result.normalized_score:+.3f})"
        if isolation == "none":
            score += " · unisolated (sandbox isolation none)"
        elif isolation:
            score += f" · isolation {isolation}"
    else:
        score = f"no score ({result.evaluation_error or result.message or result.reason})"
    return f"run {result.status} ({result.reason}) · {score} · run dir {shown}"


def exit_status(result: Any) -> int:
    return EXIT_OK if result.status == "finished" and result.score is not None else EXIT_FAILED


# --- mlra tasks -----------------------------------------------------------------------


def cmd_tasks(args: argparse.Namespace) -> int:
    from mlra.tasks.readiness import blockers, needs
    from mlra.tasks.spec import TaskError, builtin_task_dirs, load_task

    if args.action == "show":
        if not args.name:
            raise UsageError("tasks show: name a task (see `mlra tasks`)")
        task = _load_task(args.name)
        print(task.render_prompt())
        m = task.metric
        print(
            f"metric:     {m.name} ({'higher' if m.higher_is_better else 'lower'} is better); "
            f"baseline {m.baseline}, top reference {m.top}"
        )
        print(f"evaluator:  {task.evaluator.kind} on {task.evaluator.artifact}")
        rules = task.constraints.model_dump(exclude_defaults=True)
        if rules:
            print("rules:      " + "; ".join(f"{k} = {v}" for k, v in rules.items()))
        print(
            f"needs:      {needs(task)}"
            + (f"; data: {task.resources.data}" if task.resources.data else "")
        )
        problems = blockers(task)
        print(
            "this machine: "
            + ("ready" if not problems else "cannot run it now: " + "; ".join(problems))
        )
        return EXIT_OK
    for folder in builtin_task_dirs():
        try:
            task = load_task(folder)
        except TaskError as exc:
            print(f"{folder.name:<24} BROKEN: {exc}")
            continue
        problems = blockers(task)
        status = "ready" if not problems else "cannot run here now: " + "; ".join(problems)
        print(f"{task.name:<24} {task.title}")
        print(f"{'':<24} needs {needs(task)} · {status}")
    return EXIT_OK


# --- mlra image -----------------------------------------------------------------------


def cmd_image(args: argparse.Namespace) -> int:
    from mlra.tools.sandbox.image import ImageBuildError, ImageBuildFailed, build_image

    try:
        build_image(args.tag, dockerfile=args.file, echo=lambda line: print(line, flush=True))
    except ImageBuildFailed as exc:
        sys.stderr.write(f"mlra: {exc}\n")
        return EXIT_FAILED
    except ImageBuildError as exc:
        raise UsageError(str(exc)) from None
    print(f"built {args.tag}")
    return EXIT_OK


# --- mlra eval ------------------------------------------------------------------------


def cmd_eval(args: argparse.Namespace) -> int:
    """Grade a run's submission again; the new evaluation is appended to the run's log.

    What was frozen at submission is what is graded, checked against its recorded
    digest; the workspace (changed since, perhaps) only when asked with --path, or
    for a run that has no frozen copy, and the output says which.
    """
    import asyncio

    from mlra.agent import events as ev
    from mlra.agent.eventlog import EVENTS_FILE, EventLog, LogDamage, RunInUse, read_events
    from mlra.agent.state import fold, write_result
    from mlra.tasks.grading import grade, grade_artifact
    from mlra.tasks.spec import TaskError, find_task, load_task
    from mlra.tasks.submission import artifact_digest, describe_error

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
    submission = state.submission
    submitted = args.path or (submission.path if submission else None)
    label = submitted or task.evaluator.artifact
    frozen = None
    if args.path is None and submission is not None and submission.frozen:
        frozen = run_dir / submission.frozen
        if not os.path.lexists(frozen):
            print(f"note: the frozen copy {submission.frozen} is missing; grading the workspace")
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
    try:
        log = EventLog(log_path, start_seq=events[-1].seq if events else 0)
    except RunInUse as exc:
        raise UsageError(f"{exc}; wait for the run to end") from None
    log.subscribe(state.apply)

    def stamp(event: ev.Event) -> None:
        event.t = state.elapsed_s
        log.append(event)

    out_dir = run_dir / "evaluation"
    if frozen is not None:
        assert submission is not None
        print(f"grading the frozen submission {submission.frozen} (sha256 {submission.sha256})")
        grading = grade_artifact(
            task,
            label,
            frozen,
            out_dir,
            graded=submission.frozen,
            sha256=submission.sha256,
            on_start=stamp,
            isolation=args.isolation,
        )
    else:
        print(f"grading the workspace as it is now: {label}")
        grading = grade(
            task,
            run_dir / "workspace",
            submitted,
            out_dir,
            workdir=state.sandbox.workdir if state.sandbox is not None else None,
            on_start=stamp,
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

    print(f"{task.name} · {label} · {score_line(finished)}")
    if finished.isolation == "none":
        print("note: the evaluator ran unconfined (no isolation could be had)")
    if state.finished is None:
        print("note: the run has not finished (no run_finished event); result.json is not written")
    return EXIT_OK if finished.ok else EXIT_FAILED
