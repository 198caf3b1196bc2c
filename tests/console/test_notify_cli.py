"""`--notify` on the command line: a bad destination is one line and exit status 2
before anything is made; a headless run tells a command and a webhook of its end, with
the score, and neither the webhook's token nor the API key goes anywhere else."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ANSWER_TASK, mlra_cli

API_KEY = "sk-cli-notify-do-not-leak"


@pytest.mark.parametrize(
    ("dest", "said"),
    [
        ("beep", "'beep' is not a destination"),
        ("cmd:", "cmd: needs a command"),
        ("ftp://example.com/x", "not ftp://"),
        ("bell,", "an empty destination"),
    ],
)
def test_a_bad_notify_is_one_line_and_exit_2(tmp_path: Path, dest: str, said: str) -> None:
    proc = mlra_cli(
        ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--notify", dest],
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--notify" in lines[0] and said in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists()


class _Hook(BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    handler = type("Hook", (_Hook,), {"bodies": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port, handler.bodies
    finally:
        server.shutdown()
        server.server_close()


def test_a_headless_run_tells_a_command_and_a_webhook_of_its_end(
    tmp_path: Path, hook: tuple[int, list[dict[str, Any]]]
) -> None:
    port, bodies = hook
    proc = mlra_cli(
        [
            "run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--runs-dir", "runs",
            "--notify", "cmd:cat >> heard.jsonl; env > env.txt",
            "--notify", f"bell,http://127.0.0.1:{port}/hook/S3CRET-T0KEN",
        ],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": API_KEY},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (heard,) = [json.loads(line) for line in (tmp_path / "heard.jsonl").read_text().splitlines()]
    assert (heard["kind"], heard["status"], heard["score"]) == ("finished", "finished", 1.0)
    assert [b["kind"] for b in bodies] == ["finished"] and bodies[0]["score"] == 1.0
    assert API_KEY not in (tmp_path / "env.txt").read_text()
    (run_dir,) = (tmp_path / "runs").iterdir()
    logged = (run_dir / "events.jsonl").read_text()
    assert f"notifications go to command, bell, webhook to 127.0.0.1:{port}" in logged
    for text in (logged, (run_dir / "result.json").read_text(), proc.stdout, proc.stderr):
        assert "S3CRET" not in text and "heard.jsonl" not in text


def test_a_batch_tells_of_each_run_s_end_and_its_own(tmp_path: Path) -> None:
    proc = mlra_cli(
        [
            "batch", "--tasks", str(ANSWER_TASK), "--models", "baseline", "--seeds", "2",
            "--out", "out", "--no-tui", "--notify", "cmd:cat >> heard.jsonl",
        ],
        cwd=tmp_path,
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "batch: notifications go to command" in proc.stdout
    heard = [json.loads(line) for line in (tmp_path / "heard.jsonl").read_text().splitlines()]
    runs = [n for n in heard if n["kind"] == "finished"]
    assert len(runs) == 2 and all(n["score"] == 1.0 and n["status"] == "finished" for n in runs)
    (end,) = [n for n in heard if n["kind"] == "batch_finished"]
    assert end["counts"] == {"finished": 2} and end["run_dir"] == str((tmp_path / "out").resolve())
    for note in runs:  # each run's own log knows nothing of the destination
        assert "heard.jsonl" not in (Path(note["run_dir"]) / "events.jsonl").read_text()


def test_a_fork_is_told_where_it_is_given_notify_and_records_no_destination(
    tmp_path: Path,
) -> None:
    ran = mlra_cli(
        ["run", str(ANSWER_TASK), "--model", "baseline", "--no-tui", "--runs-dir", "runs"],
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    (source,) = (tmp_path / "runs").iterdir()
    forked = mlra_cli(
        [
            "fork", str(source), "--at", "1", "--no-tui", "--run-id", "again",
            "--notify", "cmd:cat >> heard.jsonl",
        ],
        cwd=tmp_path,
    )  # fmt: skip
    assert forked.returncode == 0, forked.stdout + forked.stderr
    (heard,) = [json.loads(line) for line in (tmp_path / "heard.jsonl").read_text().splitlines()]
    assert (heard["kind"], heard["run_id"], heard["score"]) == ("finished", "again", 1.0)
    logged = (tmp_path / "runs" / "again" / "events.jsonl").read_text()
    assert logged.count("notifications go to command") == 1 and "heard.jsonl" not in logged
