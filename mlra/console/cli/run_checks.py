"""What `mlra run` settles and checks before a run folder is made: the model and its
provider (a server down is refused here), a replay's recorded limits, the task's GPUs
on this host, the sandbox's preflight, a foreign task's prepared copy, the context
window and the `--break` rules. Each refusal is one line, exit status 2 (75 or 69 for a
model server or API that cannot be reached); `mlra resume` checks its `--break` rules here too.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from mlra.console.text.args import UsageError, check_backend
from mlra.tools.sandbox.backends import sandbox_backend


def prepared_task(task: Any) -> Any:
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


def resolved_model(args: argparse.Namespace) -> tuple[str, Any]:
    """The model spec and its provider (None for the baseline agent), with the context
    window learnt from the server where it tells it (before the run records its limits)."""
    from mlra.agent.loop.replay_provider import ReplayProvider
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
    if isinstance(provider, ReplayProvider):  # its recording named in full, not as typed
        return provider.spec, provider
    return spec, provider


def check_demo(model: str, task: Any, *, new_run: str | None = None) -> None:
    """`--model demo` on a task it has no recipe for, refused before the run starts
    (agent/providers/demo_plan.py `task_refusal`; `new_run`: a fork or resume's)."""
    from mlra.agent.providers.demo_plan import task_refusal

    problem = task_refusal(model, task, new_run=new_run)
    if problem is not None:
        raise UsageError(problem)


def check_window(config: Any, task: Any, provider: Any, output_set: int | None) -> None:
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


def recorded_limits(args: argparse.Namespace, provider: Any) -> None:
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


def host_gpu_notices(args: argparse.Namespace, task: Any) -> list[str]:
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


def checked_backend(args: argparse.Namespace, task: Any, model: str) -> Any:
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
