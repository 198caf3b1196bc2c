"""Attacks through what mlra fetches for the agent: each refused, the honest answer still scoring.

The research tools run outside the agent's sandbox, so an agent could try to borrow
mlra's powers through them: clone the project checkout by file:// (the tasks' hidden
test sets are in git), reach the host's loopback or a private address, run the host's
ssh with root's keys, follow a server's redirect to loopback, have the clone's summary
read host files through links, or clone a neighbour run's workspace. Each attack here
is a whole `mlra run` (root, default flags, bubblewrap) with a scripted worker that
tries it and then answers honestly: the attack must come back as an error observation
with nothing of the host in the run's output, log or workspace, nothing outside the
run touched, no connection reaching the loopback servers, and the answer still 1.0.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.tools.arxiv import ArxivSearch, RateLimiter
from mlra.tools.arxiv_read import ArxivRead
from mlra.tools.fetch.policy import FetchPolicy, FetchSettings
from mlra.tools.registry import ToolContext, ToolOutcome, ToolRegistry
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.conftest import mlra_cli
from tests.fakes.arxiv_server import ArxivServer
from tests.fakes.git_server import GitServer, bare_repo
from tests.fakes.model_server import ScriptedModelServer
from tests.fakes.tls import ca_bundle, serve_tls
from tests.scripts import call, supervisor_answering, turn
from tests.tools.test_sandbox_attacks import REPO, Scene, _make_scene


def _no_bwrap() -> str | None:
    from mlra.tools.sandbox.bwrap import isolation_problem

    return isolation_problem()


pytestmark = pytest.mark.skipif(_no_bwrap() is not None, reason=_no_bwrap() or "")


@pytest.fixture
def scene(monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    import shutil

    made = _make_scene(monkeypatch)
    # The user's own config file, in the home folder the run sees: it trusts the test
    # certificate authority, as a user behind a company's TLS proxy would.
    config = made.home / ".config" / "mlra" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[fetch]\nca_bundle = "{ca_bundle()}"\n')
    yield made
    for target in made.write_targets():
        target.unlink(missing_ok=True)
    shutil.rmtree(made.root, ignore_errors=True)


class Recorder:
    """A loopback server (plain TCP or TLS) that records every connection it gets."""

    def __init__(self, *, tls: bool) -> None:
        self.hits: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                recorder.hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls:
            serve_tls(self.httpd)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def recorders() -> Iterator[tuple[Recorder, Recorder]]:
    plain, tls = Recorder(tls=False), Recorder(tls=True)
    yield plain, tls
    plain.close()
    tls.close()


@dataclass
class FetchRun:
    code: int
    stdout: str
    stderr: str
    run_dir: Path
    events: list[ev.Event]

    def results(self, tool: str) -> list[ev.ToolResult]:
        return [e for e in self.events if isinstance(e, ev.ToolResult) and e.tool == tool]

    def everything(self) -> str:
        texts = [self.stdout, self.stderr]
        for path in sorted(self.run_dir.rglob("*")):
            if path.is_file() and not path.is_symlink():
                texts.append(path.read_text(errors="replace"))
        return "\n".join(texts)


def clone(url: str, name: str | None = None) -> dict[str, Any]:
    """A github_clone call (`call`'s own first parameter is called name)."""
    arguments = {"url": url} if name is None else {"url": url, "name": name}
    return {"name": "github_clone", "arguments": arguments}


def _run(scene: Scene, attacks: list[dict[str, Any]], *allow: str) -> FetchRun:
    """`mlra run` on the scene's task (root, bubblewrap, the canary keys and home): the
    worker makes each attack call, then answers honestly."""
    worker = [turn("", attack) for attack in attacks]
    worker += [
        turn("", call("bash", command="cat question.txt; echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42")),
    ]
    runs = scene.root / "cli-runs"
    flags: list[str] = []
    for host in allow:
        flags += ["--allow-host", host]
    env = {
        "HOME": str(scene.home),
        "OPENAI_API_KEY": scene.canaries["API key"],
        "ANTHROPIC_API_KEY": scene.canaries["Anthropic key"],
    }
    with ScriptedModelServer({"supervisor": supervisor_answering(), "worker": worker}) as server:
        proc = mlra_cli(
            [
                "run", str(scene.task), "--model", "openai/test-model",
                "--base-url", server.url_for("openai"), "--no-tui",
                "--runs-dir", str(runs), *flags,
            ],
            cwd=scene.cwd, env=env, timeout=240,
        )  # fmt: skip
    (run_dir,) = runs.iterdir()
    return FetchRun(
        proc.returncode, proc.stdout, proc.stderr, run_dir, read_events(run_dir / "events.jsonl")
    )


def _honest(scene: Scene, run: FetchRun) -> None:
    """The honest answer scored, and nothing of the host reached the run or its output."""
    assert run.code == 0, run.stderr[-2000:]
    started = run.events[0]
    assert isinstance(started, ev.RunStarted) and started.sandbox is not None
    assert started.sandbox.isolation == "bwrap"
    assert json.loads((run.run_dir / "result.json").read_text())["score"] == 1.0
    leaked = scene.leaks(run.everything())
    assert not leaked, f"leaked: {leaked}"
    created = [str(t) for t in scene.write_targets() if t.exists()]
    assert created == []


def test_clones_of_local_paths_other_schemes_and_unlisted_hosts_are_refused(
    scene: Scene, recorders: tuple[Recorder, Recorder]
) -> None:
    plain, tls = recorders
    other_workspace = scene.other_run / "workspace"
    other_workspace.mkdir()
    (other_workspace / "notes.txt").write_text(scene.canaries["another run's log"] + "\n")
    subprocess.run(["git", "init", "-q", str(other_workspace)], check=True)
    attacks = [
        # The project checkout: tasks/builtin/*/hidden/ is in git.
        clone(REPO.as_uri(), "checkout"),
        clone(str(REPO), "checkout-path"),
        # A neighbour run's workspace.
        clone(other_workspace.as_uri(), "neighbour"),
        # The host's loopback, over http and https, and a private address.
        clone(f"http://127.0.0.1:{plain.port}/x.git", "plain"),
        clone(f"https://127.0.0.1:{tls.port}/x.git", "tls"),
        clone("https://10.0.0.1/org/repo.git", "private"),
        clone("https://169.254.169.254/latest/meta-data", "metadata"),
        # The host's ssh client, with root's keys and config.
        clone("ssh://git@127.0.0.1:22/org/repo.git", "ssh"),
        clone("git@example.com:org/repo.git", "scp"),
        clone("git://127.0.0.1/org/repo.git", "git"),
    ]
    run = _run(scene, attacks)
    clones = run.results("github_clone")
    assert len(clones) == len(attacks)
    assert all(not r.ok for r in clones), [r.output for r in clones]
    said = "\n".join(r.output for r in clones)
    assert said.count("https:// only") >= 6, said
    assert "not on the list of hosts" in said
    assert plain.hits == [] and tls.hits == []
    assert not (run.run_dir / "workspace" / "repos").exists()
    _honest(scene, run)


def test_a_listed_name_that_resolves_to_loopback_and_a_redirect_to_it_are_refused(
    scene: Scene, tmp_path: Path, recorders: tuple[Recorder, Recorder]
) -> None:
    _plain, tls = recorders
    served = tmp_path / "served"
    served.mkdir()
    with GitServer(served) as host:
        # The user allowed this server by its address; it redirects one path to another
        # loopback server, which nobody allowed, and another to a name that resolves to
        # loopback.
        host.redirects["/moved.git"] = f"https://127.0.0.1:{tls.port}/x.git"
        host.redirects["/named.git"] = f"https://localhost:{tls.port}/x.git"
        attacks = [
            clone(host.url("moved"), "moved"),
            clone(host.url("named"), "named"),
            # A name the user listed, which resolves to the loopback: not a public address.
            clone(f"https://localhost:{tls.port}/x.git", "listed"),
        ]
        run = _run(scene, attacks, host.allow, f"localhost:{tls.port}")
    clones = run.results("github_clone")
    assert [r.ok for r in clones] == [False, False, False], [r.output for r in clones]
    assert "127.0.0.1:" in clones[0].output and "not on the list" in clones[0].output
    assert "loopback" in clones[1].output and "loopback" in clones[2].output
    assert tls.hits == []
    _honest(scene, run)


def test_links_in_a_cloned_repository_reach_nothing_of_the_host(
    scene: Scene, tmp_path: Path
) -> None:
    work = tmp_path / "linky"
    work.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    # Links to a hidden answer, a root-only file, mlra's environment and another run's log.
    (work / "README.md").symlink_to(scene.hidden / "secret.txt")
    (work / "shadow").symlink_to("/etc/shadow")
    (work / "environ").symlink_to("/proc/self/environ")
    (work / "parent-environ").symlink_to("/proc/1/environ")
    (work / "other").symlink_to(scene.other_run / "events.jsonl")
    (work / "train.py").write_text("print('train')\n")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "links"], check=True)
    served = tmp_path / "served"
    served.mkdir()
    bare_repo(work, served / "linky.git")
    with GitServer(served) as host:
        attacks = [
            clone(host.url("linky")),
            call("read_file", path="repos/linky/README.md"),
            call("read_file", path="repos/linky/environ"),
            call("list_files", path="repos/linky"),
            call(
                "bash",
                command="cat repos/linky/README.md repos/linky/shadow repos/linky/environ "
                "repos/linky/parent-environ repos/linky/other; true",
            ),
        ]
        run = _run(scene, attacks, host.allow)
    (cloned,) = run.results("github_clone")
    assert cloned.ok, cloned.output
    assert "README.md: a symbolic link, not followed." in cloned.output
    assert "README.md@" in cloned.output and "train.py" in cloned.output
    reads = run.results("read_file")
    assert all(not r.ok for r in reads), [r.output for r in reads]
    _honest(scene, run)


def test_a_clone_cannot_be_put_where_a_link_leads_out(scene: Scene, tmp_path: Path) -> None:
    """repos/ made a link to a host folder between the agent's calls: the clone is
    refused, not written through it."""
    outside = scene.outside / "repos-target"
    outside.mkdir()
    os.chmod(outside, 0o777)
    work = tmp_path / "demo"
    work.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    (work / "a.txt").write_text("a\n")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    served = tmp_path / "served"
    served.mkdir()
    bare_repo(work, served / "demo.git")
    with GitServer(served) as host:
        attacks = [
            call("bash", command=f"ln -s {outside} repos && ls -l"),
            clone(host.url("demo")),
        ]
        run = _run(scene, attacks, host.allow)
    (cloned,) = run.results("github_clone")
    assert not cloned.ok and "outside the workspace" in cloned.output, cloned.output
    assert list(outside.iterdir()) == []
    _honest(scene, run)


def test_the_fetch_box_sees_none_of_the_host(tmp_path: Path) -> None:
    """What runs for a fetch (git, the HTTPS runner, the PDF reader) sees its folder and
    the OS, as an unprivileged uid with no capabilities and an environment from nothing."""
    from mlra.tools.fetch.box import FetchBox, confinement

    secret = Path("/var/tmp") / f"mlra-fetch-secret-{os.getpid()}"
    secret.write_text("fetch-box-canary\n")
    folder = tmp_path / "staging"
    folder.mkdir()
    os.environ["MLRA_FETCH_TEST_KEY"] = "sk-fetch-canary"
    try:
        box = FetchBox(folder, bwrap=confinement(allow_unconfined=False))
        script = (
            f"cat {secret}; cat {REPO}/README.md | head -1; ls /root {REPO}/tasks; env; "
            "grep Cap /proc/self/status; id -u; echo done > /workspace/ok"
        )
        result = asyncio.run(box.run(["sh", "-c", script], timeout_s=30))
    finally:
        del os.environ["MLRA_FETCH_TEST_KEY"]
        secret.unlink()
    out = result.stdout.decode()
    assert "fetch-box-canary" not in out and "sk-fetch-canary" not in out
    assert "# mlra" not in out  # the project checkout is not there
    caps = {
        line.split(":")[0]: int(line.split()[1], 16) for line in out.splitlines() if "Cap" in line
    }
    assert caps and caps["CapEff"] == 0 and caps["CapPrm"] == 0
    assert out.strip().splitlines()[-1] != "0"
    assert (folder / "ok").read_text() == "done\n"


# --- arXiv: what the agent leaves in papers/, and where arXiv's answer points ----------------


@pytest.fixture
async def arxiv_box(tmp_path: Path) -> AsyncIterator[tuple[LocalSandbox, Path]]:
    workspace = tmp_path / "run" / "workspace"
    workspace.mkdir(parents=True)
    sandbox = LocalSandbox(workspace, SandboxSpec(), isolation_mode="bwrap")
    await sandbox.start()
    yield sandbox, workspace
    await sandbox.close()


async def _arxiv(sandbox: LocalSandbox, tool: Any, **arguments: Any) -> ToolOutcome:
    ctx = ToolContext(sandbox=sandbox, agent="worker", call_id="c1")
    return await ToolRegistry([tool]).dispatch(tool.name, arguments, ctx)


def _arxiv_tools(server: ArxivServer) -> tuple[ArxivSearch, ArxivRead]:
    kw: dict[str, Any] = {
        "policy": FetchPolicy(FetchSettings(ca_bundle=str(ca_bundle()))),
        "limiter": RateLimiter(0.0),
        "api_url": server.api_url,
        "pdf_url": server.pdf_url,
        "timeout_s": 5.0,
        "backoff_s": 0.05,
        "retries": 0,
    }
    return ArxivSearch(**kw), ArxivRead(**kw)


async def test_a_paper_the_agent_replaced_is_never_read_by_mlra(
    arxiv_box: tuple[LocalSandbox, Path], tmp_path: Path
) -> None:
    """papers/<id>.pdf made a link to a host secret, or a 40 GB sparse file that starts
    like a PDF: mlra neither follows the link nor reads the giant, and fetches the paper
    anew in their place."""
    sandbox, workspace = arxiv_box
    secret = tmp_path / "secret.txt"
    secret.write_text("%PDF-arxiv-canary-secret\n")
    papers = workspace / "papers"
    papers.mkdir()
    with ArxivServer() as server:
        _, read = _arxiv_tools(server)
        (papers / "1706.03762.pdf").symlink_to(secret)
        linked = await _arxiv(sandbox, read, id="1706.03762", end_page=1)
        giant = papers / "1706.03762v7.pdf"
        with open(giant, "wb") as f:
            f.write(b"%PDF-1.4\n")
            f.truncate(40 * 1024**3)
        sparse = await _arxiv(sandbox, read, id="1706.03762v7", end_page=1)
        fetched = [s.path for s in server.requests]
    for out in (linked, sparse):
        assert out.ok, out.output
        assert "downloaded" in out.output and "MARKER-ABSTRACT" in out.output
        assert "canary" not in out.output
    assert fetched == ["/pdf/1706.03762", "/pdf/1706.03762v7"]
    assert not (papers / "1706.03762.pdf").is_symlink()
    assert secret.read_text() == "%PDF-arxiv-canary-secret\n"
    assert giant.stat().st_size < 1024**2


async def test_arxiv_endpoints_and_redirects_follow_the_same_rules(
    arxiv_box: tuple[LocalSandbox, Path], recorders: tuple[Recorder, Recorder]
) -> None:
    """An arXiv endpoint set to plain http is refused before any request; a redirect of a
    PDF to a loopback server nobody allowed is not followed."""
    sandbox, _ = arxiv_box
    plain, tls = recorders
    with ArxivServer() as server:
        plain_search = ArxivSearch(
            policy=FetchPolicy(FetchSettings(ca_bundle=str(ca_bundle()))),
            limiter=RateLimiter(0.0),
            api_url=f"http://127.0.0.1:{plain.port}/api/query",
            retries=0,
        )
        refused = await _arxiv(sandbox, plain_search, query="attention")
        server.redirect_pdfs = f"https://localhost:{tls.port}/pdf"
        _, read = _arxiv_tools(server)
        redirected = await _arxiv(sandbox, read, id="1706.03762")
    assert not refused.ok and "https:// only" in refused.output
    assert not redirected.ok and "localhost" in redirected.output
    assert plain.hits == [] and tls.hits == []
