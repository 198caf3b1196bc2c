"""A run without the console: the concise transcript or JSON lines on stdout, and
the last line naming the run folder and the score."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mlra.console.text.args import EXIT_FAILED, EXIT_OK, shown_folder
from mlra.scores import format_normalized
from mlra.terminal_text import printable_line


def run_headless(
    config: Any,
    task: Any,
    provider: Any,
    *,
    json_lines: bool,
    verbose: bool,
    controller: Any = None,
    recorded: list[Any] | None = None,
) -> int:
    import asyncio
    import json
    import signal

    from mlra.agent.agents.run import agent_for, know_tools
    from mlra.agent.run.controller import RunController
    from mlra.batch.executors import LOCAL_RUN_ENV
    from mlra.console.text.headless import JsonDisplay, TranscriptDisplay
    from mlra.console.text.printer import tell_stderr

    display = JsonDisplay() if json_lines else TranscriptDisplay(verbose=verbose)
    if controller is None:
        controller = RunController(config, task, provider)
        controller.subscribe(display.on_event)
        controller.prepare()
    else:  # resumed or forked: the log is open; only what happens from now is shown
        controller.subscribe(display.on_event)
    know_tools(controller)

    def reader_gone() -> None:
        # `mlra run ... | head`: the run is not the reader's to end (see _Printer).
        tell_stderr(
            f"mlra: the output's reader has gone; run {controller.run_dir.name} goes on "
            "without printing, and its log is kept in full"
        )

    display.on_reader_gone = reader_gone
    if isinstance(display, TranscriptDisplay):
        # A search's attempts' own logs: their calls, notices and progress.
        display.attempts_in(controller.run_dir, recorded or ())
        # A resumed run's printer sees no run_started: the config says the server is local.
        display.time_calls(bool(controller.config.base_url))

    async def go() -> Any:
        loop = asyncio.get_running_loop()
        hits = 0

        def on_interrupt() -> None:
            nonlocal hits
            hits += 1
            if os.environ.get(LOCAL_RUN_ENV):  # a batch's Ctrl-C stops its runs unevaluated
                controller.abort()
            elif hits == 1:
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
    last = final_line(controller.run_dir, result)
    if json_lines:
        printed = display.line(
            json.dumps({"run_dir": str(controller.run_dir), **result.model_dump()})
        )
    else:
        printed = display.line(last)
    if not printed and not display.stderr_gone:
        tell_stderr(last)  # the person at the terminal still learns how it ended, and where
    return exit_status(result)


def final_line(run_dir: Path, result: Any) -> str:
    """The last line a headless run prints; a score earned without isolation says so,
    since the agent could have reached what the grader reads. Its texts (an evaluator's
    error, the run's message) are shown, not obeyed: control characters escaped."""

    shown = shown_folder(run_dir)
    isolation = getattr(result, "isolation", None)
    if result.score is not None:
        score = f"score {result.metric} = {result.score:.4g}"
        if result.normalized_score is not None:
            score += f" (normalized {format_normalized(result.normalized_score)})"
        if getattr(result, "self_reported", None):
            score += " · self-reported (the workspace's own number, not a measurement)"
        if not getattr(result, "direction_known", True):
            score += " · success not judged (direction unknown)"
        if isolation == "none":
            score += " · unisolated (sandbox isolation none)"
        elif isolation:
            score += f" · isolation {isolation}"
    else:
        score = f"no score ({result.evaluation_error or result.message or result.reason})"
    search = search_words(result)
    again = ""
    # A replay of a killed recording would stop again at once: nothing to go on with.
    killed = getattr(result, "cause", None) == "recording_unfinished"
    if result.status == "stopped" and result.score is None and result.reason != "submitted":
        again = "" if killed else f" · mlra resume {shown} goes on with it"  # quit, Ctrl-C
    return printable_line(
        f"run {result.status} ({result.reason}) · {score}{search} · run dir {shown}{again}"
    )


def search_words(result: Any) -> str:
    """A search's numbers for the last line: its attempts and how they ended (in the words
    of every verdict line), the best validation, the attempt graded (and whether it was
    submitted) and its validation-to-test gap."""
    a = getattr(result, "attempts", None)
    if a is None:
        return ""
    words = f" · attempts {a.in_words}"
    if a.best is not None and a.best_validation is not None:
        words += f", best validation {a.best_validation:.4g} ({a.best})"
    if a.submitted is None:
        return words + ", none graded"
    unsubmitted = result.reason != "submitted"  # the best validated one, graded instead
    words += f", graded {a.submitted}" + (" (nothing was submitted)" if unsubmitted else "")
    if a.validation_to_test_gap is not None:
        words += f", validation-to-test gap {a.validation_to_test_gap:+.3g}"
    return words


def exit_status(result: Any) -> int:
    return EXIT_OK if result.status == "finished" and result.score is not None else EXIT_FAILED
