"""`mlra run`'s flags for who does the work: `--agent` (the supervisor–worker pair or the
worker alone) and `--search` with its `--attempts`, `--attempts-parallel` and
`--attempt-min-time`, and the checks that they go together, each refusal one line (exit
status 2).
"""

from __future__ import annotations

import argparse
from typing import Any

from mlra.console.text.args import UsageError, duration, positive_int


def add_agent_args(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--agent",
        choices=["supervisor", "worker"],
        default=None,
        help="who does the work: supervisor (the default: it plans and hands the worker "
        "subtasks, and gives the worker the whole task if it never hands one) or worker "
        "(the worker alone, given the whole task: for small models that cannot plan)",
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
        type=positive_int,
        default=None,
        metavar="N",
        help="with --search: attempts to make at most (default 4)",
    )
    run.add_argument(
        "--attempts-parallel",
        type=positive_int,
        default=None,
        metavar="K",
        help="with --search: attempts running at once (default 1, at most --attempts; the "
        "run's memory, CPUs, disk and processes are shared out between them)",
    )
    run.add_argument(
        "--attempt-min-time",
        type=duration,
        default=None,
        metavar="T",
        help="with --search: the least time an attempt is given (default 30s): a smaller "
        "share is raised to it, and with less of the run's time left no attempt starts",
    )


def agent_settings(args: argparse.Namespace, task: Any, model: str) -> dict[str, Any]:
    """`--agent`, `--search`, `--attempts`, `--attempts-parallel` as the run's config, or
    one line saying why they cannot go together."""
    settings: dict[str, Any] = {}
    if args.agent == "worker":
        if model == "baseline":
            raise UsageError("--agent worker needs a model; --model baseline runs the recipe")
        if args.search != "none":
            raise UsageError(
                f"--agent worker and --search {args.search} do not go together: a search's "
                "attempts are each a worker already"
            )
    if args.agent is not None:
        settings["agent"] = args.agent
    return settings | search_settings(args, task, model)


def search_settings(args: argparse.Namespace, task: Any, model: str) -> dict[str, Any]:
    """The search's settings for one run, or the one line saying why they cannot be
    (`mlra batch` asks the same of each task and model before any run starts)."""
    min_time = args.attempt_min_time
    if args.search == "none":
        if min_time is not None:
            raise UsageError("--attempt-min-time goes with --search greedy or llm")
        if args.attempts is not None or args.attempts_parallel is not None:
            raise UsageError("--attempts and --attempts-parallel go with --search greedy or llm")
        return {}
    if args.search == "llm" and model == "baseline":
        raise UsageError(
            "--search llm needs a model to choose the attempts; with --model baseline use "
            "--search greedy (the recipe's variants)"
        )
    from mlra.agent.providers.table import why_steers_no_search

    if args.search == "llm" and (why := why_steers_no_search(model)) is not None:
        raise UsageError(
            f"--search llm needs a model to choose the attempts; {why}: use --search "
            f"greedy with --model {model.strip()}"
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
        _check_parallel(args.attempts_parallel, args.attempts, task, model)
        settings["attempts_parallel"] = args.attempts_parallel
    if min_time is not None:
        if min_time <= 0:
            raise UsageError("--attempt-min-time must be more than 0s")
        settings["attempt_min_s"] = min_time
    return settings


def _check_parallel(k: int, attempts: int | None, task: Any, model: str) -> None:
    """K above the most attempts the search can start is refused: every attempt's share
    of the run's memory, CPUs, processes, disk and GPUs is 1/K, so the budget of the K
    that can never run would be left unused, not shared out."""
    from mlra.agent.setup.config import RunConfig

    most = attempts if attempts is not None else RunConfig.model_fields["attempts"].default
    why = f"--attempts {attempts}" if attempts is not None else f"--attempts, default {most}"
    variants = len(task.baseline.variants) if model == "baseline" else most
    if variants < most:
        most, why = variants, f"task {task.name}'s recipe declares {variants} variants"
    if k > most:
        raise UsageError(
            f"--attempts-parallel {k} is more than the {most} attempts this search can "
            f"start ({why}): each would get 1/{k} of the run's budget and {k - most}/{k} of it "
            f"would never be used; give --attempts-parallel {most} or less"
        )
