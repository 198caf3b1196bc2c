"""`mlra batch --executor ray` on a real two-node cluster started by `ray start`, the
second node in a mount namespace of its own that does not see the task or the batch
folder (see `ray_cluster`): a user-made task scores on both nodes, placement follows a
custom resource, a node whose raylet is killed mid-run costs one attempt and is
reported, requests no node can hold and addresses that cannot work each answer in one
line within seconds, and a batch whose cluster's head dies says so with its report."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from tests.batch.naming import batch_run_id
from tests.batch.ray_cluster import (
    RayCluster,
    RayNode,
    cmdline,
    free_port,
    ray_cluster,
    why_no_cluster,
)
from tests.batch.test_batch import MODEL, supervisor_fallback, worker_writing
from tests.conftest import ANSWER_TASK, SECRET_ENV, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(why_no_cluster() is not None, reason=str(why_no_cluster())),
]

ANSWER_LIMIT_S = 30.0
"""The issue's bound on a refusal: an infeasible request or an unusable address."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    hidden = tmp_path_factory.mktemp("driver-only")
    with ray_cluster(hidden) as started:
        yield started


@pytest.fixture
def user_task(cluster: RayCluster) -> Path:
    """A task folder only the driver (and the head, on its disk) has."""
    folder = cluster.hidden / "tasks" / "answer-hidden"
    if not folder.exists():
        shutil.copytree(ANSWER_TASK, folder)
    return folder


def batch(
    cluster: RayCluster, *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = mlra_cli(
        ["batch", *args, "--isolation", "none", "--no-tui"],
        cwd=cluster.hidden,
        env={**cluster.env, **(env or {})},
        timeout=timeout,
    )
    return proc, time.monotonic() - start


def results(out: Path) -> dict[str, dict[str, object]]:
    return {p.parent.name: json.loads(p.read_text()) for p in (out / "runs").glob("*/result.json")}


def node_of(result: dict[str, object]) -> str:
    node = result.get("node")
    assert isinstance(node, dict), f"result.json names no node: {result}"
    return str(node["node_id"])  # type: ignore[index]


def start_driver(cluster: RayCluster, args: list[str]) -> subprocess.Popen[str]:
    """`mlra ARGS` as a batch driver the test signals or outlives: its own process.

    Its Ctrl-C is the terminal's default whatever started pytest: a shell's background
    job (`pytest &`, `nohup`) ignores SIGINT, and a child inherits that, so the
    driver would never see the test's SIGINT (asyncio installs its handler only over
    the default one)."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    return subprocess.Popen(
        [sys.executable, "-m", "mlra", *args],
        cwd=cluster.hidden,
        env={**env, **cluster.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_command(
    node: RayNode | list[RayNode], marker: str, driver: subprocess.Popen[str], what: str
) -> None:
    """Until a process on `node` (or on one of them) runs a command line holding `marker`
    (2 minutes at most)."""
    nodes = node if isinstance(node, list) else [node]
    deadline = time.monotonic() + 120
    while not any(marker in cmdline(pid) for n in nodes for pid in n.descendants()):
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline, what
        time.sleep(0.2)  # another machine's processes: nothing to await


def clean(proc: subprocess.CompletedProcess[str]) -> None:
    """No traceback, and none of Ray's own logging in the batch's output."""
    both = proc.stdout + proc.stderr
    assert "Traceback" not in both, both[-3000:]
    assert "(raylet" not in proc.stdout and "raylet.cc" not in proc.stdout, proc.stdout[-3000:]


def test_a_user_made_task_scores_on_both_nodes(cluster: RayCluster, user_task: Path) -> None:
    out = cluster.hidden / "b-both"
    proc, _ = batch(
        cluster, "--tasks", str(user_task), "--models", "baseline", "--seeds", "4",
        "--executor", "ray", "--ray-address", cluster.address, "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    clean(proc)
    found = results(out)
    assert sorted(found) == sorted(batch_run_id(out, "baseline", seed) for seed in range(1, 5))
    assert all(r["score"] == 1.0 for r in found.values())
    head, node_b = cluster.node_id("head"), cluster.node_id("nodeB")
    assert {node_of(r) for r in found.values()} == {head, node_b}
    for run_id, result in found.items():
        node = node_of(result)
        log = (out / "logs" / f"{run_id}.log").read_text()
        assert node[:8] in log and "run finished (submitted)" in log
        workspace = out / "runs" / run_id / "workspace"
        assert (workspace / "answer.txt").read_text() == "42\n"
        # The task's hidden files reached the node's grader, never the agent's workspace.
        names = {p.name for p in workspace.rglob("*")}
        assert not names & {"check.py", "expected.txt", "validation.txt"}, (run_id, names)


def test_a_custom_resource_places_every_run_on_its_node(
    cluster: RayCluster, user_task: Path
) -> None:
    out = cluster.hidden / "b-placed"
    spec = cluster.hidden / "placed.toml"
    spec.write_text(
        f'tasks = ["{user_task}"]\nmodels = ["baseline"]\nseeds = 2\nexecutor = "ray"\n'
        f'ray_address = "{cluster.address}"\nout = "{out}"\n\n'
        "[defaults]\nresources = { nodeB = 1 }\n"
    )
    proc, _ = batch(cluster, str(spec))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = results(out)
    assert len(found) == 2
    assert {node_of(r) for r in found.values()} == {cluster.node_id("nodeB")}


@pytest.mark.parametrize(
    ("ask", "named"),
    [("cpus = 2", "CPU"), ("gpus = 1", "GPU"), ("resources = { nodeC = 1 }", "nodeC")],
    ids=["cpus", "gpus", "custom"],
)
def test_a_request_no_node_can_hold_is_refused_in_one_line(
    cluster: RayCluster, user_task: Path, ask: str, named: str
) -> None:
    out = cluster.hidden / f"b-infeasible-{named}"
    spec = cluster.hidden / f"infeasible-{named}.toml"
    spec.write_text(
        f'tasks = ["{user_task}"]\nmodels = ["baseline"]\nexecutor = "ray"\n'
        f'ray_address = "{cluster.address}"\nout = "{out}"\n\n[defaults]\n{ask}\n'
    )
    proc, took = batch(cluster, str(spec), timeout=ANSWER_LIMIT_S * 3)
    assert took < ANSWER_LIMIT_S, f"answered after {took:.1f} s"
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    clean(proc)
    (refusal,) = [line for line in proc.stdout.splitlines() if line.startswith("not done:")]
    assert named in refusal and "nodes have" in refusal, refusal
    # The run that never started is a row of the report, with its reason.
    rows = json.loads((out / "report.json").read_text())["runs"]
    run_id = batch_run_id(out, "baseline")
    assert [(r["run_id"], r["started"]) for r in rows] == [(run_id, False)]
    again = mlra_cli(["report", str(out)], cwd=cluster.hidden)
    assert again.returncode == 0 and run_id in (out / "report.md").read_text()


@pytest.mark.parametrize("case", ["nothing-listens", "silent", "ray-client", "wrong-token"])
def test_an_address_that_cannot_work_is_one_line_and_exit_2(
    cluster: RayCluster, user_task: Path, case: str
) -> None:
    env: dict[str, str] = {}
    # A port that accepts connections and never answers (a firewall, another service).
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    address = {
        "nothing-listens": f"127.0.0.1:{free_port()}",
        "silent": f"127.0.0.1:{silent.getsockname()[1]}",
        "ray-client": f"ray://127.0.0.1:{free_port()}",
        "wrong-token": cluster.address,
    }[case]
    if case == "wrong-token":
        if "RAY_AUTH_TOKEN" not in cluster.env:
            pytest.skip("this Ray has no token authentication")
        env["RAY_AUTH_TOKEN"] = "0" * 32
    try:
        proc, took = batch(
            cluster, "--tasks", str(user_task), "--models", "baseline", "--executor", "ray",
            "--ray-address", address, "--out", str(cluster.hidden / f"b-{case}"),
            env=env, timeout=ANSWER_LIMIT_S * 4,
        )  # fmt: skip
    finally:
        silent.close()
    # The cases within its 30 s; a silent port (not among them: Ray's own
    # handshake must time out) within twice that, not Ray's minutes of retries.
    limit = ANSWER_LIMIT_S * (2 if case == "silent" else 1)
    assert took < limit, f"answered after {took:.1f} s: {proc.stderr[-2000:]}"
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlra: ") and address in lines[0], lines


def test_a_run_stopped_on_the_node_without_the_disk_resumes_there(
    cluster: RayCluster, user_task: Path
) -> None:
    """Ctrl-C brings the stopped run's folder back; the same command again sends it to
    the node, which resumes it rather than starting afresh."""
    out = cluster.hidden / "b-resumed"
    marker = "sleep 31.5"
    script = {
        "supervisor:fallback": supervisor_fallback(),
        "worker:fallback": turn("Waiting.", call("bash", command=marker, timeout=60)),
    }
    node_b = cluster.nodes[-1]
    with ScriptedModelServer(script) as server:
        spec = cluster.hidden / "resumed.toml"
        spec.write_text(
            f'tasks = ["{user_task}"]\nmodels = ["{MODEL}"]\nexecutor = "ray"\n'
            f'ray_address = "{cluster.address}"\nout = "{out}"\n'
            f'base_url = "{server.url_for("openai")}"\n\n[defaults]\nresources = {{ nodeB = 1 }}\n'
        )
        driver = start_driver(cluster, ["batch", str(spec), "--isolation", "none", "--no-tui"])
        try:
            wait_for_command(node_b, marker, driver, "the run never reached its long command")
            driver.send_signal(signal.SIGINT)
            stdout, stderr = driver.communicate(timeout=90)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.communicate()
        assert "Traceback" not in stdout + stderr, stdout[-2000:] + stderr[-2000:]
        run_dir = out / "runs" / batch_run_id(out, MODEL)
        # Came back from the node, stopped by the user and not evaluated: resumable.
        (ended,) = [
            e for e in read_events(run_dir / "events.jsonl") if isinstance(e, ev.RunFinished)
        ]
        assert ended.status == "stopped" and ended.reason == "stopped"
        assert not (run_dir / "evaluation").exists()
        server.set_fallback("worker", worker_writing("42"))
        proc, _ = batch(cluster, str(spec))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    events = read_events(run_dir / "events.jsonl")
    assert any(isinstance(e, ev.RunResumed) for e in events)
    assert not (out / "retired").exists()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score"] == 1.0 and node_of(result) == cluster.node_id("nodeB")


def test_a_node_killed_mid_run_costs_one_attempt_and_is_reported(
    cluster: RayCluster, user_task: Path
) -> None:
    """Next to last in the file: the second node is gone after it (its `ray start` ends
    with its raylet)."""
    out = cluster.hidden / "b-killed"
    marker = "sleep 21.5"  # the agent's long command, as found among node B's processes
    script = {
        "supervisor:fallback": supervisor_fallback(),
        "worker:fallback": turn("Waiting.", call("bash", command=marker, timeout=60)),
    }
    node_b = cluster.nodes[-1]
    killed = cluster.node_id("nodeB")
    with ScriptedModelServer(script) as server:
        args = ["batch", "--tasks", str(user_task), "--models", MODEL, "--seeds", "2"]
        args += ["--executor", "ray", "--ray-address", cluster.address, "--out", str(out)]
        args += ["--base-url", server.url_for("openai"), "--max-attempts", "2"]
        args += ["--isolation", "none", "--no-tui"]
        driver = start_driver(cluster, args)
        try:
            wait_for_command(node_b, marker, driver, "no run reached its long command on node B")
            os.kill(node_b.raylet_pid(), signal.SIGKILL)
            server.set_fallback("worker", worker_writing("42"))
            stdout, stderr = driver.communicate(timeout=180)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.communicate()
    assert driver.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert "Traceback" not in stdout + stderr
    found = results(out)
    assert sorted(found) == sorted(batch_run_id(out, MODEL, seed) for seed in (1, 2))
    assert all(r["score"] == 1.0 for r in found.values())
    (lost,) = [p for p in (out / "retired").iterdir()]
    run_id = lost.name.rsplit("__a", 1)[0]
    assert node_of(found[run_id]) != killed  # retried elsewhere, within --max-attempts 2
    placements = json.loads((lost / "placement.json").read_text())
    assert placements[-1]["node_id"] == killed and placements[-1]["outcome"] == "node lost"
    lines = stdout.splitlines()
    (at,) = [i for i, line in enumerate(lines) if f"node lost {run_id}" in line]
    assert "queued again" in lines[at], lines[at]
    # One node is left, with one CPU: the retry's run starts there after the other run ended
    # (its events' times; the progress line may show both running for the moment the
    # driver takes to read the first one's last messages).
    (other,) = [r for r in found if r != run_id]
    ended = read_events(out / "runs" / other / "events.jsonl")[-1].ts
    assert read_events(out / "runs" / run_id / "events.jsonl")[0].ts >= ended
    rows = json.loads((out / "report.json").read_text())["runs"]
    attempts = sorted((r["run_id"], r["attempt"]) for r in rows)
    assert attempts == sorted([(run_id, 1), (run_id, 2), *[(r, 1) for r in found if r != run_id]])
    log = (out / "logs" / f"{run_id}.log").read_text()
    assert killed[:8] in log and "run finished (submitted)" in log
    assert not re.search(r"mlra-batch-\d+-", log), log  # the driver's folders, not node B's
    assert f"node {killed[:8]}" in (out / "report.md").read_text()  # where attempts ran


def test_a_batch_whose_cluster_head_dies_says_so_with_the_report(
    cluster: RayCluster, user_task: Path
) -> None:
    """Last in the file: the head is stopped under a running batch, and with it the
    cluster. Ray's core ends the driver's process about 60 s after its head's GCS is
    gone, saying so only in `<out>/ray.log`: the batch vanished from the terminal with no
    line and no report. (The cluster's own head, not one started for this test: a Ray
    start is 10 to 25 s on the 2 shared cores.)"""
    out = cluster.hidden / "b-head-lost"
    marker = "sleep 41.5"  # the agent's long command, found among the nodes' processes
    script = {
        "supervisor:fallback": supervisor_fallback(),
        "worker:fallback": turn("Waiting.", call("bash", command=marker, timeout=90)),
    }
    with ScriptedModelServer(script) as server:
        args = ["batch", "--tasks", str(user_task), "--models", MODEL, "--seeds", "1"]
        args += ["--executor", "ray", "--ray-address", cluster.address, "--out", str(out)]
        args += ["--base-url", server.url_for("openai"), "--isolation", "none", "--no-tui"]
        driver = start_driver(cluster, args)
        try:
            # On the head after the test above; on either node where this test runs alone.
            nodes = [cluster.head, *cluster.nodes]
            wait_for_command(nodes, marker, driver, "the run never reached its command")
            cluster.head.stop()
            stdout, stderr = driver.communicate(timeout=120)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.communicate()
    assert driver.returncode == 1, stdout[-3000:] + stderr[-3000:]
    said = stdout + stderr
    assert "Traceback" not in said, said[-3000:]
    lost = [line for line in stdout.splitlines() if "the Ray cluster was lost" in line]
    assert len(lost) == 1, stdout[-3000:]
    assert "the same command resumes the batch" in lost[0]
    assert f"report {out / 'report.md'}" in lost[0]
    assert (out / "report.md").is_file()
