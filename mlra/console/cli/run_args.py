"""`mlra run`'s flags: the task and model, the budgets, the sandbox and what its commands
get, the research tools, and the controls a run starts with (breakpoints, paused).

Apart from the command (console/cli/run_cli.py) and its checks (run_checks.py) because
the flags alone are some fifty; parsing them imports only argparse and the flag
helpers, and a value of the wrong form is refused by its type (one line, exit 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mlra.console.cli.agent_args import add_agent_args
from mlra.console.cli.fetch_args import add_fetch_args
from mlra.console.cli.notify_args import add_notify_arg
from mlra.console.text.args import (
    add_budget_args,
    disk_mb,
    duration,
    gpus,
    memory_mb,
    nonnegative_int,
    positive_float,
    positive_int,
    temperature,
)
from mlra.tools.sandbox.backends import BACKENDS, DEFAULT_BACKEND


def add_run_args(run: argparse.ArgumentParser) -> None:
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
        "--machine-free-disk",
        type=nonnegative_int,
        metavar="MB",
        # mlra batch's own (with --machine-shared-by K): the space free beyond the
        # reserve on the runs disk as it measured it when it started; the default disk
        # shares of its runs at once are 1/K of half of it, so they are equal.
        help=argparse.SUPPRESS,
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
