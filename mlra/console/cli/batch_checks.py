"""What `mlra batch` refuses before any run starts, once (one line, exit 2): settings
every run of it would fail on, found here rather than in each run after the batch has
begun (a failed run each, and a retry)."""

from __future__ import annotations

import os
from typing import Any

from mlra.agent.providers import resolve_model
from mlra.agent.providers.base import ConfigError
from mlra.console.cli.batch_search import check_agents, check_searches
from mlra.console.cli.needs_cli import UNGRADED_HINT
from mlra.console.text.args import UsageError, check_isolation
from mlra.tasks.readiness import grading_problems
from mlra.tasks.spec import TaskError, find_task


def check_batch(spec: Any, tasks: list[Any]) -> None:
    """Every check below; `tasks` are the batch's, loaded (`batch.spec.load_tasks`)."""
    _check_models(spec)
    check_agents(spec, tasks)
    check_searches(spec, tasks)
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
