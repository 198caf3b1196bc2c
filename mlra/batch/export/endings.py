"""How a run ended, as the trackers tell endings: MLflow's FINISHED, FAILED, KILLED or
RUNNING, W&B's exit code, and in words. One rule for every tracker, read from the
run's outcome (`result.json`, else its log folded), built on the batch report's own
judgement (batch/report_judged.py: `has_outcome`, `graded_ending`, `killed_for_memory`),
not a copy of it that could drift:

- a run the report judged (it ended by itself) with a score FINISHED, whatever ended it
  (the agent's submission, the deadline, a budget: its `reason` tag says which);
- one judged with no score (a rule broken, the evaluator's error, no submission, a
  deadline, a budget or a graded stop with nothing graded, a replay that diverged, a run
  Ray killed for its memory) FAILED, with why: the report judges it, and it failed;
- one with no outcome of the agent's: a person's stop, or a SIGTERM (a batch stopped, a
  scheduler's time limit), graded or not, KILLED (W&B 255); an error's ending (a provider
  that kept failing) FAILED with its message; a replay whose recording was killed, and a
  log without `run_finished` (mlra killed), KILLED with no exit: W&B's Crashed once synced;
- a run `--ungraded` (this machine could not grade its task) FINISHED where its ending
  would have been graded: not grading it was the user's choice, its `ungraded` tag says
  why; one that handed nothing in (stuck, no submission) FAILED as any run's;
- a search's attempt (never graded on the test split, only validated) FINISHED where it
  ended its work or hit its own deadline or budget (its best validation tagged), and where
  its search cancelled it ("stopped by its search", never a person's stop);
- a log still being written RUNNING.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlra.agent.record.run_result import RunResult
from mlra.batch.report_judged import graded_ending, has_outcome
from mlra.terminal_text import printable_line

STOP_EXIT = 255
"""The exit code W&B itself records for a run its user stopped (Ctrl-C, wandb's
exit_hooks): W&B's Killed is set only by its server, so a stop reads Failed there, its
notes saying who ended it. (254, said to read Crashed on W&B's server, is in none of
wandb's own code: a killed mlra's run has no exit record instead, as a killed process's.)"""

NOTHING_GRADED = "nothing was graded"
"""`error` where why the run has no score is its ending's own words (no submission)."""

BY_ITS_SEARCH = "stopped by its search"
"""An attempt cancelled by its search (the run's deadline, the search submitting, its
stop of every attempt, the supervisor): the search's doing, no person's."""

WORK_UNDONE = "it ended before its work was done"
"""`error` of an attempt that ended by itself otherwise (stuck, a call failing again)."""

ATTEMPT_DONE = frozenset({"attempt_ended", "submitted", "deadline", "budget"})
"""An attempt's endings of its own that ended its work: validated, never test-graded."""


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


def _no_score(result: RunResult, words: str) -> str:
    """Why a judged run has no score: the evaluator's words, the rules it broke, else
    that nothing was graded (its ending's words say why, in `mlra.ending`)."""
    violations = "; ".join(result.violations)
    error = result.evaluation_error
    if error and violations and violations not in error:
        error = f"{error}: {violations}"
    said = printable_line(error or violations or "")
    return said if said and said != words else NOTHING_GRADED


def _attempt(result: RunResult, words: str) -> Ended:
    """A search's attempt: never graded on the test split, so no score is no failure."""
    if result.status == "error":
        return Ended("FAILED", 1, words, error=words)
    if result.reason == "stopped":
        return Ended("FINISHED", 0, f"{BY_ITS_SEARCH}: {words}")
    if result.status == "finished" and result.reason in ATTEMPT_DONE:
        return Ended("FINISHED", 0, words)
    return Ended("FAILED", 1, words, error=WORK_UNDONE)  # stuck, a failing call


def ended(result: RunResult, *, attempt: bool = False, oom: str | None = None) -> Ended:
    """How the run ended, for each tracker (this module's rule); `attempt`: a search's
    attempt's own run; `oom`: why Ray killed it for its memory (`killed_for_memory`)."""
    words = printable_line(result.message or result.reason)
    status, reason = result.status, result.reason
    if status == "running":
        return Ended("RUNNING", None, words)
    if oom is not None and result.score is None:  # judged, and failed (the report's rule)
        return Ended("FAILED", 1, words, error=printable_line(oom))
    if status == "interrupted":
        return Ended("KILLED", None, words)
    if result.cause == "recording_unfinished":  # an attempt's too: no search stopped it
        return Ended("KILLED", None, words)  # a replay of a killed run: as the run was
    if attempt:
        return _attempt(result, words)
    if not has_outcome(result):
        if reason == "stopped":  # a person's stop, or a SIGTERM: none of the agent's
            return Ended("KILLED", STOP_EXIT, words)
        return Ended("FAILED", 1, words, error=words)  # an error's ending
    if result.score is not None or (result.ungraded and graded_ending(result)):
        stop = reason == "stopped"  # a person's graded stop: its score kept
        return Ended("KILLED", STOP_EXIT, words) if stop else Ended("FINISHED", 0, words)
    error = words if status == "error" else _no_score(result, words)  # an error: its message
    return Ended("FAILED", 1, words, error=error)


def notes(result: RunResult, end: Ended) -> str:
    """The ending in a sentence, for a tracker's notes on the run."""
    said = f"{result.status} ({result.reason}): {end.words}"
    if end.error is not None and end.error != end.words:
        said += f"; no score: {end.error}"
    if result.ungraded:
        said += f"; not graded (--ungraded): {printable_line(result.ungraded)}"
    return said
