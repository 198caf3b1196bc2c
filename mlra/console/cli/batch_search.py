"""`mlra batch`'s settings for who does each run's work and its search over attempts:
`--agent`, `--search`, `--attempts`, `--attempts-parallel` and `--attempt-min-time`,
each also a key of the batch file's `[defaults]` and `[overrides.<task>]`, passed to
each run as `mlra run` takes them (batch/spec.py `run_command`). What no run of the
batch could start with is refused here, once, in one line, before any run starts: not
each run, after the batch has begun, as a failed run.
"""

from __future__ import annotations

import argparse
from typing import Any

from mlra.agent.providers.demo_plan import task_refusal
from mlra.console.cli.agent_args import search_settings
from mlra.console.text.args import UsageError, duration, positive_int
from mlra.durations import parse_duration
from mlra.tasks.spec import TaskError, find_task


def add_batch_search_args(batch: argparse.ArgumentParser) -> None:
    batch.add_argument(
        "--agent",
        choices=("supervisor", "worker"),
        help="who does each run's work (`mlra run --agent`; per task: `agent` in "
        "[overrides.<task>]): worker, the worker alone, for small models that cannot plan",
    )
    batch.add_argument(
        "--search",
        choices=("none", "greedy", "llm"),
        help="each run searches over attempts (`mlra run --search`; per task: `search` in "
        "[overrides.<task>])",
    )
    batch.add_argument(
        "--attempts",
        type=positive_int,
        metavar="N",
        help="with --search: attempts each run makes at most (not --max-attempts, which "
        "counts starts of a run)",
    )
    batch.add_argument(
        "--attempts-parallel",
        type=positive_int,
        metavar="K",
        help="with --search: attempts each run has running at once",
    )
    batch.add_argument(
        "--attempt-min-time",
        type=duration,
        metavar="T",
        help="with --search: the least time each run gives an attempt (`mlra run "
        "--attempt-min-time`, default 30s; per task: `attempt_min_time` in [overrides.<task>])",
    )


def search_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The flags, as the batch's [defaults] keys (None: not given)."""
    least = args.attempt_min_time
    return {
        "agent": args.agent,
        "search": args.search,
        "attempts": args.attempts,
        "attempts_parallel": args.attempts_parallel,
        "attempt_min_time": f"{least:g}s" if least is not None else None,
    }


def check_agents(spec: Any, tasks: list[Any]) -> None:
    """`agent = "worker"` where a run of it could not start (a baseline model, a search)."""
    for t in tasks:
        if t.settings.agent != "worker":
            continue
        if "baseline" in (m.strip() for m in spec.models):
            raise UsageError(
                f"batch: {t.label}: agent worker (--agent, or `agent` in the batch file) needs "
                "a model; --model baseline runs the recipe (give baseline a batch of its own)"
            )
        if t.settings.search not in (None, "none"):
            raise UsageError(
                f"batch: {t.label}: agent worker and search {t.settings.search} do not go "
                "together: a search's attempts are each a worker already"
            )


def check_searches(spec: Any, tasks: list[Any]) -> None:
    """A search setting no run could start with (`attempts` without `search`, `search llm`
    or a task with no recipe variants for `baseline`), or `demo` on a task it has no
    recipe for, as `mlra run` would refuse it."""
    for t in tasks:
        s = t.settings
        least = s.attempt_min_time
        asked = argparse.Namespace(
            search=s.search or "none",
            attempts=s.attempts,
            attempts_parallel=s.attempts_parallel,
            attempt_min_time=parse_duration(least) if least is not None else None,
        )
        try:
            task = find_task(t.task)
        except TaskError:
            continue  # load_tasks said it already
        for model in dict.fromkeys(m.strip() for m in spec.models):
            if (problem := task_refusal(model, task)) is not None:
                raise UsageError(f"batch: {t.label} · {model}: {problem}")
            try:
                search_settings(asked, task, model)
            except UsageError as exc:
                raise UsageError(
                    f"batch: {t.label} · {model}: {exc} (`search`, `attempts`, "
                    "`attempts_parallel` and `attempt_min_time` in the batch file, or their "
                    "flags)"
                ) from None
