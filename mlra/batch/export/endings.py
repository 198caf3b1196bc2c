"""How a run ended, as the trackers tell endings: MLflow's FINISHED, FAILED, KILLED or
RUNNING, W&B's exit code, and in words. One rule for every tracker, read from the
run's outcome (`result.json`, else its log folded), and the same judgement the batch
report makes (batch/report_judged.py) and `mlra runs` shows:

- a run that ended by itself with a score FINISHED, whatever ended it (the agent's
  submission, the deadline, a budget: its `reason` tag says which);
- one that ended by itself with no score (a rule broken, the evaluator's error, no
  submission, a deadline or a budget with nothing graded) FAILED, with why: the report
  judges it, and it failed. Exported FINISHED, it read as a success beside the scored;
- a person's stop (the `stop` key, `mlra ctl stop`, a quit, a Ctrl-C: reason "stopped"),
  graded or not, KILLED: no ending of the agent's (a graded stop keeps its score);
- a run `--ungraded` (this machine could not grade its task) FINISHED: not grading it
  was the user's choice, and its `ungraded` tag says why;
- an attempt of a search that ended its work ("attempt_ended") FINISHED: an attempt is
  never graded on the test split, only validated;
- an error's ending (a provider that kept failing) FAILED, with its message;
- a log without `run_finished`: RUNNING while its writer holds it, else mlra was
  killed: KILLED (W&B: no exit, its Crashed once synced, as a killed W&B process's).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlra.agent.record.run_result import RunResult
from mlra.terminal_text import printable_line

STOP_EXIT = 255
"""The exit code W&B itself records for a run its user stopped (Ctrl-C): W&B's Killed
is set only by its server, so a stop reads Failed there, its notes saying who ended it."""


@dataclass(frozen=True)
class Ended:
    mlflow: str
    """FINISHED, FAILED, KILLED or RUNNING."""
    wandb_exit: int | None
    """0 (Finished), 1 (Failed), 255 (a user's stop), None: no exit (running, or killed)."""
    words: str
    """How it ended, as its run_finished said (or the log's want of one)."""
    error: str | None = None
    """Why a FAILED run failed: why it has no score, or its error."""


def _no_score(result: RunResult) -> str:
    """Why a run that ended by itself has no score: the evaluator's words, the rules it
    broke, else its ending's (no submission)."""
    violations = "; ".join(result.violations)
    error = result.evaluation_error
    if error and violations and violations not in error:
        error = f"{error}: {violations}"
    return printable_line(error or violations or result.message or "no score")


def ended(result: RunResult) -> Ended:
    """How the run ended, for each tracker (this module's rule)."""
    words = printable_line(result.message or result.reason)
    status, reason = result.status, result.reason
    if status == "running":
        return Ended("RUNNING", None, words)
    if status == "interrupted":
        return Ended("KILLED", None, words)
    if reason == "stopped":
        return Ended("KILLED", STOP_EXIT, words)
    if status != "finished":
        return Ended("FAILED", 1, words, error=words)
    if result.score is not None or result.ungraded or reason == "attempt_ended":
        return Ended("FINISHED", 0, words)
    return Ended("FAILED", 1, words, error=_no_score(result))


def notes(result: RunResult, end: Ended) -> str:
    """The ending in a sentence, for a tracker's notes on the run."""
    said = f"{result.status} ({result.reason}): {end.words}"
    if end.error is not None and end.error != end.words:
        said += f"; no score: {end.error}"
    if result.ungraded:
        said += f"; not graded (--ungraded): {printable_line(result.ungraded)}"
    return said
