"""What `mlra batch` refuses before any run starts, once (one line, exit 2): settings
every run of it would fail on, found here rather than in each run after the batch has
begun (a failed run each, and a retry)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from mlra.agent.providers import resolve_model
from mlra.agent.providers.base import ConfigError
from mlra.console.cli.agent_args import search_settings
from mlra.console.cli.needs_cli import UNGRADED_HINT
from mlra.console.text.args import UsageError, check_isolation
from mlra.tasks.readiness import grading_problems
from mlra.tasks.spec import TaskError, find_task


def check_batch(spec: Any, tasks: list[Any]) -> None:
    """Every check below; `tasks` are the batch's, loaded (`batch.spec.load_tasks`)."""
    _check_models(spec)
    _check_agents(spec, tasks)
    _check_searches(spec, tasks)
    _check_gradable(spec)
    if spec.executor != "ray":  # a Ray node checks its own, and its refusals are reported
        for model in dict.fromkeys(m.strip() for m in spec.models):
            check_isolation(spec.isolation or "auto", model)


def _check_models(spec: Any) -> None:
    """A model name or key that is wrong fails here, once, not in every run."""

    for model in spec.models:
        if model.strip() == "baseline":
            continue
        try:
            resolve_model(model, base_url=spec.base_url, env=os.environ)
        except ConfigError as exc:
            raise UsageError(f"batch: {exc}") from None


def _check_agents(spec: Any, tasks: list[Any]) -> None:
    """`agent = "worker"` where a run of it could not start (a baseline model, a search)
    fails here, once, not in every such run."""
    for t in tasks:
        if t.settings.agent != "worker":
            continue
        if "baseline" in (m.strip() for m in spec.models):
            raise UsageError(
                f"batch: {t.name}: agent worker (--agent, or `agent` in the batch file) needs "
                "a model; --model baseline runs the recipe (give baseline a batch of its own)"
            )
        if t.settings.search not in (None, "none"):
            raise UsageError(
                f"batch: {t.name}: agent worker and search {t.settings.search} do not go "
                "together: a search's attempts are each a worker already"
            )


def _check_searches(spec: Any, tasks: list[Any]) -> None:
    """A search setting no run could start with (`attempts` without `search`, `search llm`
    or a task with no recipe variants for `baseline`) fails here, once, as `mlra run`
    would refuse it: not each run, after the batch has begun, as a failed run."""
    for t in tasks:
        s = t.settings
        asked = argparse.Namespace(
            search=s.search or "none", attempts=s.attempts, attempts_parallel=s.attempts_parallel
        )
        try:
            task = find_task(t.task)
        except TaskError:
            continue  # load_tasks said it already
        for model in dict.fromkeys(m.strip() for m in spec.models):
            try:
                search_settings(asked, task, model)
            except UsageError as exc:
                raise UsageError(
                    f"batch: {t.name} · {model}: {exc} (`search`, `attempts` and "
                    "`attempts_parallel` in the batch file, or their flags)"
                ) from None


def _check_gradable(spec: Any) -> None:
    """A task this machine cannot grade is refused here, before any run starts (every
    run of it would end with no score), unless the batch runs them ungraded. A Ray
    batch's runs are graded where they run, so only the files' verdict counts there."""

    if spec.ungraded:
        return
    refused = []
    for name in spec.tasks:
        try:
            task = find_task(name)
        except TaskError:
            continue  # load_tasks said it already
        if spec.executor == "ray":
            problems = [task.evaluator.cannot_grade] if task.evaluator.cannot_grade else []
        else:
            problems = grading_problems(task)
        if problems:
            refused.append(f"{task.name} ({'; '.join(problems)})")
    if refused:
        raise UsageError(f"batch: cannot be graded here: {', '.join(refused)} ({UNGRADED_HINT})")
