"""Two `mlra batch` on one batch folder: a run is driven by one of them.

The same command run again while the first still goes (a second terminal, a cron job)
read each run's state and acted on it too: a run the first was waiting to start again
(its model server down, between its tries: no log yet, so not live) was started by
both, and one could set aside the attempt the other had just begun.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mlra.agent.providers.server_window import UNREACHABLE_WORDS
from tests.batch.naming import batch_run_id
from tests.batch.test_batch import MODEL, _wait_for
from tests.conftest import SECRET_ENV, mlra_cli
from tests.console.test_unreachable_server import _closed_port_url


def test_a_second_batch_leaves_a_run_the_first_drives_alone(
    tmp_path: Path, answer_task: Path
) -> None:
    (tmp_path / "answer_task").symlink_to(answer_task)
    out = tmp_path / "b"
    args = ["batch", "--tasks", "answer_task", "--models", MODEL, "--seeds", "1"]
    args += ["--out", str(out), "--base-url", _closed_port_url(), "--isolation", "none"]
    args += ["--no-tui"]
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env["OPENAI_API_KEY"] = "sk-test-not-a-secret"
    first = subprocess.Popen(
        [sys.executable, "-m", "mlra", *args, "--max-attempts", "3"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        log = out / "logs" / f"{batch_run_id(out, MODEL)}.log"
        # Refused by its server, the run waits for the first batch's next try (10 s
        # and more): it has no log of its own meanwhile, so it reads as not live.
        _wait_for(
            lambda: log.is_file() and UNREACHABLE_WORDS in log.read_text(errors="replace"),
            120,
            "the first batch's run refused by its server",
        )
        assert first.poll() is None
        second = mlra_cli([*args, "--max-attempts", "1"], cwd=tmp_path, env=env)
    finally:
        first.kill()
        first.wait()
    said = second.stdout + second.stderr
    assert f"{batch_run_id(out, MODEL)} is driven by another mlra batch; left alone" in said
    assert "server unreachable" not in said  # it did not try the run itself
    # Nor did it write a report calling the first batch's live run failed ("success 0%"):
    # the batch driving it writes report.md as it ends.
    assert "report.md left to the mlra batch still driving 1 run" in said
    assert not (out / "report.md").exists()
