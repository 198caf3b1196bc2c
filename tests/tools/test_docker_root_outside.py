"""A Docker run whose container could not get a uid of its own says so, once.

As root, a Docker run's container runs as a uid claimed for it (tools/sandbox/
docker_user.py). Where none can be claimed (here: every claims folder a path under a
regular file, as a read-only /run and temporary folder would leave it), the container
runs as root outside, and the run says so as the bubblewrap sandbox's fallback does:
one `root_outside` notice in its log, shown in the headless lines. A run that got its
uid says nothing of the kind. Real runs (`--model baseline`) against the test engine.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.cli.cli import main
from mlra.tools.sandbox import run_uid
from tests.conftest import ANSWER_TASK, TEST_IMAGE, answer_task_as

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root claims uids for sandboxes")


@pytest.mark.parametrize("claimable", [False, True], ids=["no-uid-claimable", "own-uid"])
def test_a_docker_run_says_once_whether_its_container_ran_as_root_outside(
    tmp_path: Path,
    docker_host: str,
    claimable: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    task = answer_task_as(
        ANSWER_TASK, tmp_path, "whoami", ('command = "python -c', 'command = "id -u && python3 -c')
    )
    if not claimable:
        (tmp_path / "a-file").write_text("")
        monkeypatch.setattr(run_uid, "CLAIMS_DIRS", (tmp_path / "a-file" / "mlra-uids",))
    runs = tmp_path / "runs"
    code = main(
        ["run", str(task), "--model", "baseline", "--no-tui", "--runs-dir", str(runs),
         "--sandbox", "docker", "--image", TEST_IMAGE]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    (run_dir,) = runs.iterdir()
    events = read_events(run_dir / "events.jsonl")
    step = next(e for e in events if isinstance(e, ev.ToolResult) and e.tool == "bash")
    uid = int(step.output.split()[0])  # what `id -u` printed inside the container
    said = [e for e in events if isinstance(e, ev.Notice) and e.kind == "root_outside"]
    (finished,) = [e for e in events if isinstance(e, ev.EvaluationFinished)]
    assert finished.ok and finished.score == 1.0, finished.error
    if claimable:
        assert uid >= run_uid.FIRST_UID
        assert said == [] and "root outside" not in out
        return
    assert uid == 0
    # One notice, the container's: the grader's sandbox fell back as well (it could
    # claim no uid either) and is not said again.
    assert len(said) == 1 and said[0].level == "warning", said
    message = said[0].message
    assert "no uid of its own could be claimed for the agent's sandbox" in message
    assert "Not a directory" in message  # the claim's own reason
    assert "its Docker container ran as root (uid 0) outside" in message
    assert "its Docker container ran as root (uid 0) outside" in out  # the headless lines
