"""Saying once a run that a sandbox of it runs as root outside.

As root, each sandbox of a run (the agent's, the grader's, each fetch step) runs as a
uid of its own (tools/sandbox/run_uid.py). Where bubblewrap cannot start as one (a host
that lets no unprivileged user make a user namespace: AppArmor's restriction on Ubuntu
24.04), each falls back to running as root outside, still confined, as a Docker run's
container does where no uid can be claimed for it (tools/sandbox/docker_user.py): the
user must hear it, once, whichever fell back first, as a typed notice of the run's log
that the console and headless lines show as they show every notice. Whether it was said is the log's
(RunState.root_outside), so a resumed run does not say it again.
"""

from __future__ import annotations

from mlra import events as ev
from mlra.agent.loop.run_context import RunContext
from mlra.tools.sandbox.run_uid import root_outside_words


def tell_root_outside(run: RunContext, what: str, problem: str) -> None:
    """The run's `root_outside` notice, unless said already: `what` (a bubblewrap
    sandbox) fell back, why."""
    say_root_outside(run, root_outside_words(what, problem))


def say_root_outside(run: RunContext, message: str) -> None:
    """The run's `root_outside` notice, unless said already, in a sandbox's own words
    (Sandbox.root_outside_words: a Docker container's fallback is not bubblewrap's)."""
    if run.state.root_outside is not None:
        return
    run.append(ev.Notice(level="warning", kind="root_outside", message=message))
