"""`mlra batch`: its flags, the batch read from them and its file, and its runs started
and driven to their end (how it ends, and what it says then: batch_endings.py).

Imported only when `mlra batch` is named (console/cli/cli.py's table), so it imports
what it needs at its top; Ray stays inside the command, for a batch that runs on it.
Bad input is one line and exit status 2 (the console's `UsageError`), before any run
starts.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path
from typing import Any

from mlra.batch import spec as batch_spec
from mlra.batch.executors.local import LocalExecutor
from mlra.batch.notify import BatchNotifications
from mlra.batch.progress import make_display
from mlra.batch.run_ids import run_names
from mlra.batch.runner import BatchRunner
from mlra.batch.spec import BatchError, Overrides, expand, load_batch_file, load_tasks, parse_spec
from mlra.console.cli.batch_checks import check_batch
from mlra.console.cli.batch_endings import EXIT_TERMINATED, cluster_lost, ended, stopped
from mlra.console.cli.batch_search import add_batch_search_args, search_flags
from mlra.console.cli.fetch_args import add_fetch_args
from mlra.console.cli.notify_args import add_notify_arg
from mlra.console.text.args import (
    UsageError,
    add_budget_args,
    check_writable_dir,
    positive_int,
)
from mlra.terminal_text import printable_line


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_batch_command(sub: Any) -> None:
    batch = sub.add_parser(
        "batch",
        description="Run every task x model x seed combination headless, each an ordinary run "
        "with its own folder. Running the same command again skips finished runs, resumes "
        "interrupted ones and retries failed ones.",
    )
    batch.add_argument("file", nargs="?", type=Path, metavar="FILE", help="a TOML batch file")
    batch.add_argument("--tasks", type=_csv, metavar="A,B", help="task names or folders")
    batch.add_argument(
        "--models", type=_csv, metavar="M1,M2", help="models, as `mlra run` takes them"
    )
    batch.add_argument(
        "--seeds", type=positive_int, metavar="N", help="runs per task and model (default 1)"
    )
    batch.add_argument("--parallel", type=positive_int, metavar="N", help="at most N runs at once")
    batch.add_argument(
        "--executor", choices=["local", "ray"], help="where runs execute (default local)"
    )
    batch.add_argument(
        "--ray-address", metavar="ADDR", help="a Ray cluster (default: start Ray here)"
    )
    batch.add_argument(
        "--out", type=Path, metavar="DIR", help="the batch folder (on Ray, shared storage or not)"
    )
    batch.add_argument("--base-url", help="an OpenAI-compatible server for the non-baseline models")
    batch.add_argument(
        "--max-attempts",
        type=positive_int,
        metavar="N",
        help="starts per run, resumes and retries included (default 3)",
    )
    batch.add_argument("--isolation", choices=["auto", "bwrap", "none"])
    batch.add_argument(
        "--ungraded",
        action="store_true",
        default=None,
        help="run tasks this machine cannot grade all the same (each run `mlra run "
        "--ungraded`); without it such a task is refused before any run starts",
    )
    add_fetch_args(batch, whose="each run")

    add_notify_arg(
        batch,
        help="tell you as each run ends for good (with its score) and as the batch ends: "
        "bell, desktop, cmd:COMMAND (the notification as JSON on its stdin), or an "
        "http(s):// webhook URL (a JSON POST); sent by this process, never by the runs",
    )
    add_budget_args(
        batch, whose="each run", default="the batch file's, else the task's",
        log_default="the batch file's, else 256m",
    )  # fmt: skip
    batch.add_argument(
        "--direction",
        choices=("higher", "lower"),
        help="which way the tasks' metric improves, for folders whose own files do not say "
        "(per task: `direction` in [overrides.<task>])",
    )
    add_batch_search_args(batch)
    batch.add_argument("--no-tui", action="store_true", help="plain progress lines, no bars")
    batch.set_defaults(func=cmd_batch)


def _spec(args: argparse.Namespace) -> Any:
    try:
        data: dict[str, Any] = {}
        if args.file is not None:
            data = load_batch_file(args.file).model_dump(exclude_defaults=True)
        for name in ("tasks", "models", "seeds", "parallel", "executor", "ray_address", "out",
                     "base_url", "max_attempts", "isolation", "tools",
                     "allow_hosts", "ungraded"):  # fmt: skip
            value = getattr(args, name)
            if value is not None:
                data[name] = value
        if args.log_budget is not None:  # as each run's `--log-budget` takes it
            data["log_budget"] = f"{args.log_budget}m" if args.log_budget else "none"
        limits = {
            "time_limit": f"{args.time_limit:g}s" if args.time_limit else None,
            "max_steps": args.max_steps,
            "max_cost": args.max_cost,
            "max_tokens": args.max_tokens,
            "direction": args.direction,
            **search_flags(args),
        }
        defaults = Overrides.model_validate(data.get("defaults", {}))
        data["defaults"] = defaults.merged(Overrides(**limits)).model_dump(exclude_none=True)
        if not data.get("tasks"):
            raise UsageError("batch: name the tasks (--tasks A,B or `tasks` in the batch file)")
        if not data.get("models"):
            raise UsageError(
                "batch: name the models (--models M1,M2 or `models` in the batch file)"
            )
        return parse_spec(data, where=str(args.file or "batch"))
    except BatchError as exc:
        raise UsageError(str(exc)) from None


def cmd_batch(args: argparse.Namespace) -> int:
    spec = _spec(args)
    try:
        tasks = load_tasks(spec)
    except BatchError as exc:
        raise UsageError(str(exc)) from None
    check_batch(spec, tasks)
    out = spec.out_dir()

    check_writable_dir(out, "--out")
    try:
        names = run_names(out)  # the folder's key, made now for a new batch
        runs = expand(spec, names, tasks)
        batch_spec.keep_spec(out, spec, tasks)  # refused where it holds other tasks, models, seeds
    except BatchError as exc:
        raise UsageError(str(exc)) from None
    if spec.executor == "ray":
        try:
            from mlra.batch.executors.ray import RayExecutor  # lazy: for a Ray batch only
            from mlra.batch.executors.ray_connect import ClusterError
        except ImportError:
            raise UsageError(
                "--executor ray: ray is not installed (pip install 'mlra[batch]')"
            ) from None
        try:
            executor: Any = RayExecutor(out, address=spec.ray_address)
        except ClusterError as exc:
            raise UsageError(str(exc)) from None
    else:
        executor = LocalExecutor()
    display = make_display(args.no_tui)
    if spec.executor == "ray":
        executor.on_head_lost = lambda why: cluster_lost(out, why, display)
    runner = BatchRunner(spec, runs, executor, out, listener=display)
    told = _notifications(out, args.notify, runner.notes)
    if told is not None:
        runner.on_settled = told.run_settled
    print(printable_line(f"batch: {len(runs)} runs in {out}"), flush=True)
    if told is not None and told.described:
        print(printable_line(f"batch: notifications go to {told.described}"), flush=True)
    if names.legacy:
        print(printable_line(f"note: {out} predates keyed run ids: its runs keep their names"))
    shared = _baselines_beside_others(spec, tasks, runner.shared_by)
    if shared:
        print(printable_line(shared), flush=True)

    terminated: list[bool] = []

    async def go() -> Any:
        # A SIGTERM (a scheduler ending the job, `timeout`) stops the batch as Ctrl-C does:
        # its runs record their stop and it says what it leaves. It died outright, saying
        # nothing (or, where it had started a local Ray, exited 15 by Ray's own handler).
        me = asyncio.current_task()
        assert me is not None

        def stop() -> None:
            terminated.append(True)
            me.cancel()

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop)
        done = await runner.run()
        if told is not None:
            told.batch_ended(list(done.statuses.values()), len(runs))
            await told.drain()  # the batch's end goes out before the process exits
        return done

    try:
        progress = asyncio.run(go())
    except KeyboardInterrupt:
        display.close()
        executor.close()
        return stopped(out, runs)
    except asyncio.CancelledError:
        if not terminated:
            raise
        display.close()
        executor.close()
        stopped(out, runs, "SIGTERM")
        return EXIT_TERMINATED
    finally:
        display.close()
        executor.close()
    return ended(out, runner.notes, progress)


def _baselines_beside_others(spec: Any, tasks: list[Any], shared_by: int) -> str | None:
    """The batch's line where its baseline runs would measure a task's baseline while they
    share the machine: they record their scores, and the baseline counts none of them."""
    if shared_by <= 1 or "baseline" not in spec.models:
        return None
    from mlra.tasks.foreign.baselines import will_record_baselines
    from mlra.tasks.spec import find_task

    measured = [t.label for t in tasks if will_record_baselines(find_task(t.task))]
    if not measured:
        return None
    return (
        f"batch: the baseline runs of {', '.join(measured)} run {shared_by} at once here: "
        "their scores are kept beside each task and not counted in its measured baseline "
        "(not comparable with a run alone); `mlra run TASK --model baseline` or "
        "`--parallel 1` measures it"
    )


def _notifications(out: Path, written: list[str], notes: list[str]) -> Any:
    """The batch's own notifications (batch/notify.py), where `--notify` was given: the
    runs are not told the destinations, so nothing is sent from a cluster's nodes and
    no token reaches a run's command line or its log."""
    if not written:
        return None

    return BatchNotifications(out, written, notes)
