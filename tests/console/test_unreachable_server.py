"""A model server nothing answers at is bad input: `mlra run`, `resume` and `fork`
refuse it in one line with exit status 75 (EX_TEMPFAIL: a batch waits for it) before a
run folder is made or a log written,
instead of a context-window warning, four retries and a `provider_error` run.

Through the real command line in a subprocess and the real SDKs' HTTP stack, against a
loopback port that was bound and closed (nothing listens: connection refused). A
server that is up but tells no window keeps its warning (tests/agent/test_server_windows.py).
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mlra.exit_status import EXIT_SERVER_DOWN
from tests.conftest import ANSWER_TASK, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import supervisor_answering, worker_answering


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _mlra(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return mlra_cli(
        list(args),
        cwd=cwd,
        env={"OPENAI_API_KEY": "sk-test"},
        timeout=120,
        inherit=lambda name: not name.endswith("_API_KEY"),
    )


def _refused_in_one_line(proc: subprocess.CompletedProcess[str], url: str) -> None:
    assert proc.returncode == EXIT_SERVER_DOWN, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == (
        f"mlra: cannot reach the model server at {url} (connection refused): is it running?\n"
    )


def test_run_refuses_a_server_nothing_answers_at_before_making_a_run_folder(
    tmp_path: Path,
) -> None:
    url = _closed_port_url()
    runs = tmp_path / "runs"
    base = ["run", str(ANSWER_TASK), "--no-tui", "--runs-dir", str(runs), "--isolation", "none"]
    # Window unknown (asked of the server), window set, a model of known window through
    # an Anthropic-compatible URL: each is refused alike, none warns of a window first.
    for model, extra in (
        ("openai/qwen2.5-coder", []),
        ("openai/qwen2.5-coder", ["--context-window", "16000"]),
        ("anthropic/claude-sonnet-4-5", []),
    ):
        proc = _mlra(tmp_path, *base, "--model", model, "--base-url", url, *extra)
        _refused_in_one_line(proc, url)
    assert not runs.exists() or not any(runs.iterdir())


def test_resume_and_fork_refuse_it_before_writing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    # A model's run (a baseline's is refused to a model's agent for another reason).
    script = {"supervisor": supervisor_answering(), "worker": worker_answering()}
    with ScriptedModelServer(script) as server:
        done = _mlra(
            tmp_path,
            *("run", str(ANSWER_TASK), "--model", "openai/qwen2.5-coder", "--no-tui"),
            *("--base-url", server.url_for("openai"), "--isolation", "none"),
            *("--runs-dir", str(runs), "--run-id", "r"),
        )
    assert done.returncode == 0, done.stdout + done.stderr
    log = runs / "r" / "events.jsonl"
    # Cut where a crash would have cut it: a run with no ending, one `mlra resume` takes.
    lines = log.read_bytes().splitlines(keepends=True)
    ended = next(i for i, line in enumerate(lines) if b'"type":"run_finished"' in line)
    log.write_bytes(b"".join(lines[:ended]))
    before = log.read_bytes()
    url = _closed_port_url()
    model = ("--model", "openai/qwen2.5-coder", "--base-url", url, "--no-tui")
    _refused_in_one_line(_mlra(tmp_path, "resume", str(runs / "r"), *model), url)
    _refused_in_one_line(
        _mlra(tmp_path, "fork", str(runs / "r"), "--at", "1", "--run-id", "f", *model), url
    )
    assert log.read_bytes() == before
    assert sorted(p.name for p in runs.iterdir()) == ["r"]


def test_no_such_host_and_a_tls_failure_are_named_and_an_up_server_is_not_refused() -> None:
    from mlra.agent.providers.server_window import ServerUnreachable, read_server_window
    from tests.fakes.model_server import ScriptedModelServer

    def cause(url: str) -> str:
        try:
            asyncio.run(read_server_window(url, "local", "sk-test"))
        except ServerUnreachable as exc:
            return exc.cause
        return "reached"

    assert cause("http://no-such-host.invalid/v1") == "no such host"
    with ScriptedModelServer({"supervisor": [], "worker": []}) as server:
        url = server.url_for("openai")
        assert cause(url) == "reached"  # up, whatever it tells of its window
        # TLS spoken to a plain-HTTP server: the handshake fails, said as TLS.
        assert cause(url.replace("http://", "https://")).startswith("TLS: ")


def test_a_host_of_several_addresses_says_why_and_a_dropped_connect_is_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`localhost` as ::1 and 127.0.0.1 fails as a group, one error an address (anyio's
    "All connection attempts failed"): the cause is read from inside it. A connection
    nobody answers (a machine off, a firewall dropping it) is unreachable too: only a
    slow answer is a server that is up. (The probe's limit is shortened here: a dropped
    connect is never answered, however long it is waited for.)"""
    from mlra.agent.providers import server_window
    from mlra.agent.providers.server_window import (
        ServerUnreachable,
        connect_cause,
        read_server_window,
    )

    monkeypatch.setattr(server_window, "PROBE_TIMEOUT_S", 1.0)

    try:
        try:
            raise ExceptionGroup(
                "", [OSError(99, "Cannot assign requested address"), ConnectionRefusedError()]
            )
        except ExceptionGroup as group:
            raise OSError("All connection attempts failed") from group
    except OSError as failed:
        assert connect_cause(failed) == "cannot assign requested address"
    # A listener whose queue is full: the kernel drops further connections unanswered.
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        queued = [socket.create_connection(("127.0.0.1", port), timeout=30)]  # fills it
        try:
            url = f"http://127.0.0.1:{port}/v1"
            try:
                asyncio.run(read_server_window(url, "local", "sk-test"))
                cause = "reached"
            except ServerUnreachable as exc:
                cause = exc.cause
            assert cause == "no answer to connect within 1 s"
        finally:
            for sock in queued:
                sock.close()


def test_a_batch_goes_on_without_the_runs_whose_server_is_unreachable(tmp_path: Path) -> None:
    """Each run of the unreachable server is refused as `mlra run` refuses it (no folder,
    no retries spent on it) and reported with the line once its starts are used up
    (one here); the batch's other runs go on."""
    url = _closed_port_url()
    out = tmp_path / "out"
    proc = _mlra(
        tmp_path,
        *("batch", "--tasks", str(ANSWER_TASK), "--models", "baseline,openai/qwen"),
        *("--seeds", "1", "--out", str(out), "--base-url", url, "--isolation", "none"),
        *("--max-attempts", "1", "--no-tui"),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    refused = f"mlra: cannot reach the model server at {url} (connection refused): is it running?"
    # what refused it, not "usage" (bad input): the report's failures column says so too
    assert f"(failed, server unreachable, 0 attempts): {refused}" in proc.stdout
    report = (out / "report.md").read_text()
    assert "server unreachable ×1" in report and "usage" not in report
    assert "batch: 1/2 finished (0 already were; 0 retries)" in proc.stdout
    made = [p.name for p in (out / "runs").iterdir()]
    assert len(made) == 1 and "baseline" in made[0]  # the refused run has no folder
    assert not (out / "retired").exists()


def test_a_batch_tries_a_run_again_once_its_server_is_back(tmp_path: Path) -> None:
    """A server restarting while a batch runs unattended: the run that came due is
    tried again after a wait, and finishes once the server answers."""
    url = _closed_port_url()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["OPENAI_API_KEY"] = "sk-test"
    args = ["batch", "--tasks", str(ANSWER_TASK), "--models", "openai/qwen", "--seeds", "1"]
    args += ["--out", str(out), "--base-url", url, "--isolation", "none", "--no-tui"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlra", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    script = {"supervisor": supervisor_answering(), "worker": worker_answering()}
    try:
        assert proc.stdout is not None
        seen: list[str] = []
        for line in proc.stdout:  # the batch's own lines, as they come
            seen.append(line)
            if "server unreachable for" in line:
                break
        assert "trying again in 10 s" in seen[-1] and "connection refused" in seen[-1], seen
        with ScriptedModelServer(script, port=port):
            rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(seen) + rest
    assert "batch: 1/1 finished" in rest, rest


def test_a_model_call_whose_server_is_gone_still_fails_as_a_provider_error() -> None:
    """Inside a run (the server went away after it started) nothing is refused: the
    model call says it cannot connect, after its retries, as a ProviderError."""
    from mlra.agent.providers.base import Message, ProviderError
    from mlra.agent.providers.openai import OpenAIProvider

    url = _closed_port_url()

    async def call() -> str:
        provider = OpenAIProvider("local", api_key=None, base_url=url, max_retries=0)
        try:
            await provider.generate(
                system="s", messages=[Message(role="user", content="hi")], tools=[]
            )
        except ProviderError as exc:
            return str(exc)
        finally:
            await provider.aclose()
        return "answered"

    said = asyncio.run(call())
    assert said.startswith(f"openai/local: cannot connect to {url}")


async def test_a_batch_that_waited_out_its_server_says_how_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its wait the run is given up as what it was, a server that never answered,
    with how often it was refused and how long the batch waited: the report said
    `usage ×2`, as for a bad command line. (The waits are shortened here; the real
    `mlra run` refuses each try.)"""
    from mlra.batch import runner as batch_runner
    from mlra.batch.executors.local import LocalExecutor
    from mlra.batch.report import write_report
    from mlra.batch.run_ids import run_names
    from mlra.batch.spec import BatchSpec, expand

    monkeypatch.setattr(batch_runner, "UNREACHABLE_WAIT_S", 0.2)
    monkeypatch.setattr(batch_runner, "UNREACHABLE_BUDGET_S", 0.3)
    for key in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    url = _closed_port_url()
    out = tmp_path / "out"
    spec = BatchSpec(
        tasks=[str(ANSWER_TASK)], models=["openai/qwen"], out=out, base_url=url, isolation="none"
    )
    runner = batch_runner.BatchRunner(spec, expand(spec, run_names(out)), LocalExecutor(), out)
    progress = await runner.run()
    (status,) = progress.statuses.values()
    assert (status.kind, status.reason) == ("failed", "server unreachable")
    assert status.detail.startswith(f"mlra: cannot reach the model server at {url}")
    assert re.search(r"\(refused 3 times while the batch waited 0s\)$", status.detail), (
        status.detail
    )
    (group,) = write_report(out, plots=False)
    assert group.failures == {"server unreachable": 1}
    assert "refused 3 times while the batch waited" in (out / "report.md").read_text()
