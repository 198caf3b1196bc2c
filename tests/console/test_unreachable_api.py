"""A vendor's own API that cannot be connected to at all is refused before the run, as a
`--base-url` server is: a machine with no network, asked for a hosted model, used to
wait about 7 minutes (the SDK's retries, then `--server-wait`) before ending on
`Name or service not known`, and booked tokens and dollars for calls never sent.

Through the real command line and the real SDKs, pointed by their own environment
variables (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`, `HTTPS_PROXY`) at a name that does
not resolve (`.invalid`, reserved never to) or a loopback port bound and closed.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers.openai import OpenAIProvider
from mlra.agent.record.eventlog import read_events
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.exit_status import EXIT_API_UNREACHABLE
from mlra.tasks.spec import load_task
from tests.conftest import ANSWER_TASK, clock_from, mlra_cli


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _mlra(cwd: Path, model: str, **env_set: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test", **env_set}
    args = ["run", str(ANSWER_TASK), "--no-tui", "--isolation", "none"]
    started = time.monotonic()
    proc = mlra_cli(
        [*args, "--runs-dir", str(cwd / "runs"), "--model", model],
        cwd=cwd,
        env=env,
        timeout=120,
        inherit=lambda k: not k.endswith("_API_KEY") and not k.lower().endswith("_proxy"),
    )
    return proc, time.monotonic() - started


@pytest.mark.parametrize(
    ("model", "variable"),
    [("anthropic/claude-sonnet-4-5", "ANTHROPIC_BASE_URL"), ("openai/gpt-4o", "OPENAI_BASE_URL")],
)
def test_a_hosted_api_that_cannot_be_reached_is_refused_in_one_line_at_once(
    tmp_path: Path, model: str, variable: str
) -> None:
    closed = f"http://127.0.0.1:{_closed_port()}"
    for url, cause in (
        ("http://api.no-such-host.invalid", "no such host"),
        (closed, "connection refused"),
    ):
        proc, took = _mlra(tmp_path, model, **{variable: url})
        assert proc.returncode == EXIT_API_UNREACHABLE, proc.stdout + proc.stderr
        assert proc.stdout == ""
        assert proc.stderr == (
            f"mlra: cannot reach the model server at {url} ({cause}): is this machine "
            "online? (behind a proxy, set HTTPS_PROXY)\n"
        )
        # No retries waited out: well under the SDK's first back-off and connect limit.
        assert took < 60
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_proxy_the_sdk_would_use_is_what_is_checked(tmp_path: Path) -> None:
    """Behind a proxy the API's own name need not resolve here: the proxy is connected to
    (a closed one is named), and NO_PROXY sends the check to the API itself."""
    proxy = f"http://127.0.0.1:{_closed_port()}"
    url = "https://api.no-such-host.invalid"
    proc, _ = _mlra(tmp_path, "openai/gpt-4o", OPENAI_BASE_URL=url, HTTPS_PROXY=proxy)
    assert proc.returncode == EXIT_API_UNREACHABLE, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"mlra: cannot reach the model server at {url} (its proxy {proxy}: connection "
        "refused): is the proxy up?\n"
    )
    proc, _ = _mlra(
        tmp_path, "openai/gpt-4o", OPENAI_BASE_URL=url, HTTPS_PROXY=proxy, NO_PROXY="invalid"
    )
    assert "(no such host)" in proc.stderr


async def test_a_call_that_never_reached_the_server_costs_nothing(
    tmp_path: Path, answer_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's limit ends it while the SDK still retries a port nothing listens on
    (an outage after the run began): no request was sent, so no tokens nor dollars are
    booked for it, where a call cut off once sent still counts its estimate
    (tests/agent/test_model_server_faults.py)."""
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{_closed_port()}/v1")
    provider = OpenAIProvider("gpt-4o", api_key="sk-test", max_retries=4)
    config = RunConfig(
        task="answer", model="openai/gpt-4o", runs_dir=tmp_path, isolation="none", time_limit_s=1.0
    )
    controller = RunController(config, load_task(answer_task), provider)
    clock_from(controller, lambda e: isinstance(e, ev.StepStarted))
    result = await controller.run(agent_for)
    await provider.aclose()
    assert result.reason == "deadline"
    events = read_events(controller.run_dir / "events.jsonl")
    assert any(isinstance(e, ev.ModelRetry) for e in events)  # it was retrying when cut
    assert not [e for e in events if isinstance(e, ev.ModelError) and e.cut_off]
    assert result.input_tokens == 0 and result.cost_usd == 0


def test_a_batch_ends_a_hosted_models_runs_at_once_on_a_machine_with_no_network(
    tmp_path: Path,
) -> None:
    """Told apart from a `--base-url` server that may be starting (waited for up to 10
    minutes) by `mlra run`'s exit status: each run of a hosted model this machine cannot
    reach ends at once, its reason in the progress lines and the report."""
    url = "https://api.anthropic.com"
    env_set = {}
    try:  # this machine has no network; one that has is pointed at a name that never resolves
        socket.getaddrinfo("api.anthropic.com", 443)
        url = env_set["ANTHROPIC_BASE_URL"] = "https://api.no-such-host.invalid"
    except OSError:
        pass
    env = {"ANTHROPIC_API_KEY": "sk-ant-test", **env_set}
    out = tmp_path / "out"
    args = ["batch", "--tasks", str(ANSWER_TASK), "--models", "anthropic/claude-sonnet-4-5"]
    args += ["--seeds", "2", "--out", str(out), "--isolation", "none", "--no-tui"]
    started = time.monotonic()
    proc = mlra_cli(
        args,
        cwd=tmp_path,
        env=env,
        timeout=300,
        inherit=lambda k: (
            not k.endswith(("_API_KEY", "_BASE_URL")) and not k.lower().endswith("_proxy")
        ),
    )
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    refused = (
        f"mlra: cannot reach the model server at {url} (no such host): is this machine "
        "online? (behind a proxy, set HTTPS_PROXY)"
    )
    failed = [line.split("] ", 1)[1] for line in proc.stdout.splitlines() if "] failed (" in line]
    assert len(failed) == 2 and all(
        line.startswith("failed (API unreachable) ") and line.endswith(refused) for line in failed
    ), proc.stdout
    assert "trying again" not in proc.stdout  # no wait for a server that may be starting
    assert proc.stdout.count("(failed, API unreachable, 0 attempts)") == 2, proc.stdout
    assert "batch: 0/2 finished" in proc.stdout
    report = (out / "report.md").read_text()
    assert "API unreachable ×2" in report and "usage" not in report
    assert not (out / "runs").exists() or not any((out / "runs").iterdir())
    assert (
        took < 150
    )  # a start and a name lookup per run (a loaded machine), no 10 minutes of waits
