"""A recording made before 2026-12-01 still replays. Its fingerprints left the run's id
out wherever it stood, as a word too (an attempt `a1`'s `[attempt a1] ...` read
`[attempt <run>]`); now only a path names the run's folder, so each attempt of an older
search's recording, and any run whose id is a word of its prompts, diverged at its first
model call, blaming the system prompt.

The old recording is made in-process with the old rule put back (ModelTurn's names and
`normalize`, as they were), over the scripted model server; the replay runs through the
real command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.loop import fingerprint
from mlra.agent.loop.fingerprint import normalize, run_names
from mlra.agent.loop.model_turn import ModelTurn
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import load_task
from tests.agent.test_replay_compare import _calls, _env
from tests.conftest import ANSWER_TASK, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn


def _old_names(turn: ModelTurn) -> list[tuple[str, str]]:
    """ModelTurn.replacements as it was: the run's id among the names."""
    run = turn.run
    pairs = [(str(run.workspace), "<workspace>"), (run.run_id, "<run>")]
    if run.sandbox is not None:
        pairs.insert(0, (run.sandbox.workdir, "<workspace>"))
    return sorted(pairs, key=lambda p: -len(p[0]))


def _old_normalize(text: str, replacements: Any = (), **_: Any) -> str:
    """`normalize` as it was: each name replaced wherever it stands."""
    text = normalize(text)
    for old, new in replacements:
        if old:
            text = text.replace(old, new)
    return text


@pytest.mark.parametrize("name", ["answer", "again"])
async def test_a_recording_made_by_the_old_rule_still_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A run named `answer`, recorded when `write the answer into answer.txt` was
    fingerprinted as `write the <run> into <run>.txt`, replayed under its own name (as an
    attempt `a1` of a search replays as `a1`) and under another."""
    worker = [
        turn("Answer.", call("bash", command="echo 42 > answer.txt && cat answer.txt")),
        turn("", call("report", summary="answer.txt holds the answer")),
    ]
    script = {"supervisor": supervisor_answering(), "worker": worker}
    with monkeypatch.context() as old, ScriptedModelServer(script, turn_by_history=True) as server:
        old.setattr(ModelTurn, "replacements", _old_names)
        old.setattr(fingerprint, "normalize", _old_normalize)
        provider = resolve_model("openai/test-model", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer", model="openai/test-model", runs_dir=tmp_path / "runs", run_id="answer"
        )
        controller = RunController(config, load_task(ANSWER_TASK), provider)
        await controller.run(agent_for)
        await provider.aclose()
    then = read_events(controller.run_dir / "events.jsonl")
    assert isinstance(then[-1], ev.RunFinished) and then[-1].reason == "submitted"
    proc = mlra_cli(
        [
            "run",
            str(ANSWER_TASK),
            "--model",
            f"replay:{controller.run_dir}",
            "--no-tui",
            "--runs-dir",
            str(tmp_path / "replays"),
            "--run-id",
            name,
        ],
        cwd=tmp_path,
        env=_env(),
    )
    again = read_events(tmp_path / "replays" / name / "events.jsonl")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said
    assert "diverged" not in said, said
    assert isinstance(again[-1], ev.RunFinished) and again[-1].reason == "submitted"
    assert _calls(again) == _calls(then)


def test_the_old_rule_is_the_names_as_they_were() -> None:
    """An attempt's workspaces and its id, wherever it stands: no folder path beside."""
    names = run_names("/workspace", "/tmp/a/runs/S/attempts/a1/workspace")
    assert fingerprint.by_the_old_rule(names, names) == [
        ("/tmp/a/runs/S/attempts/a1/workspace", "<workspace>"),
        ("/workspace", "<workspace>"),
        ("a1", "<run>"),
    ]
    told = "[attempt a1] see /tmp/a/runs/S/attempts/a1/jobs"
    assert normalize(told, names) == "[attempt a1] see <run>/jobs"
    then = normalize(told, fingerprint.by_the_old_rule(names), whole_names=False)
    assert then == "[attempt <run>] see /tmp/a/runs/S/attempts/<run>/jobs"
