"""A fork and the user's messages of the run it was forked from.

A message the source's worker read before the forked step is part of the history
the fork keeps, so the fork's model reads it once, as history; one it read at the
forked step or later belongs to the source's own timeline, so the fork's model never
reads it. The fork's own `--message` is read once, at the forked step. The source is
the real command line against the scripted model server, steered with the real
`mlra ctl` while the model holds its answer (the test waits on the run's events).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.tools.sandbox import bwrap as bw
from tests.agent.test_resume import _env, research_script
from tests.conftest import mlra_cli
from tests.console.test_ctl_cli import ctl, live_run
from tests.fakes.model_server import ScriptedModelServer

pytestmark = pytest.mark.skipif(bw.find_bwrap() is None, reason="needs bubblewrap")

EARLY = "keep it short please"
LATE = "write the answer in capitals"
NEW = "now write the answer tersely"


def _worker_step(step: int) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["type"] == "step_started" and e["agent"] == "worker" and e["step"] == step


def test_a_fork_reads_the_sources_messages_once_as_history_and_its_own_once(
    tmp_path: Path,
) -> None:
    script = research_script()
    # The worker's answers at steps 1 and 4 wait for the test: a message sent then is
    # read at the next step (2: before the fork's step 5; 5: the forked step itself).
    script["worker"][0] = {**script["worker"][0], "hold": "step1"}
    script["worker"][3] = {**script["worker"][3], "hold": "step4"}
    with live_run(script, tmp_path) as (proc, run_dir, server, watch):
        watch.wait_for("the worker's step 1", _worker_step(1))
        assert ctl(tmp_path, "inject", EARLY).returncode == 0
        server.release("step1")
        watch.wait_for("the worker's step 4", _worker_step(4))
        assert ctl(tmp_path, "inject", LATE).returncode == 0
        server.release("step4")
        watch.wait_end()
        assert proc.wait(timeout=60) == 0
    source = read_events(run_dir / "events.jsonl")
    read_at = {e.step: e.delivered for e in source if isinstance(e, ev.StepStarted) and e.delivered}
    assert read_at == {2: [EARLY], 5: [LATE]}

    with ScriptedModelServer(research_script(), turn_by_history=True) as model:
        forked = mlra_cli(
            [
                *("fork", str(run_dir), "--at", "5", "--message", NEW, "--run-id", "f"),
                *("--runs-dir", str(tmp_path), "--base-url", model.url_for("openai"), "--no-tui"),
            ],
            cwd=tmp_path,
            env=_env(),
        )
        requests = model.requests_for("worker")
    assert forked.returncode == 0, forked.stdout + forked.stderr
    # What the fork's model was sent, from its step 5 on: the early message once, in
    # the history; the late one never; the fork's own once, in step 5's prompt.
    assert len(requests) == 2
    for request in requests:
        sent = json.dumps(request.body)
        assert (sent.count(EARLY), sent.count(LATE), sent.count(NEW)) == (1, 0, 1)
    assert NEW in json.dumps(requests[0].body["messages"][-1])
    events = read_events(tmp_path / "f" / "events.jsonl")
    step5 = next(e for e in events if isinstance(e, ev.StepStarted) and e.step == 5)
    assert step5.delivered == [NEW]
