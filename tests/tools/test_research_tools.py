"""The research tools against real servers on this machine: git's smart HTTP over TLS
on loopback (git http-backend), arXiv as a loopback HTTPS server that serves recorded
Atom answers and a real PDF, and a whole scripted run that searches, reads and clones.

mlra fetches for the agent over https only and from allowed hosts only, so each test
allows its loopback server by its address (as a user allows a company's git host) and
trusts the test certificate authority (tests/fakes/tls.py)."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.tools.arxiv import ArxivSearch, RateLimiter, arxiv_limiter
from mlra.tools.arxiv_read import ArxivRead
from mlra.tools.fetch.policy import FetchPolicy, FetchSettings
from mlra.tools.fetched import Fetched
from mlra.tools.github import GithubClone
from mlra.tools.registry import ToolContext, ToolOutcome, ToolRegistry
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.conftest import mlra_cli
from tests.fakes.arxiv_server import ArxivServer
from tests.fakes.git_server import GitServer, bare_repo
from tests.fakes.model_server import ScriptedModelServer
from tests.fakes.tls import ca_bundle
from tests.scripts import call, supervisor_answering, turn


@dataclass
class Repo:
    url: str
    first: str
    main: str
    dev: str
    server: GitServer


def _committer(r: git.Repo) -> None:
    with r.config_writer() as cw:
        cw.set_value("user", "name", "Test")
        cw.set_value("user", "email", "test@example.com")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[GitServer]:
    """An HTTPS git host on loopback serving the bare repositories under served/."""
    root = tmp_path / "served"
    root.mkdir()
    with GitServer(root) as server:
        yield server


@pytest.fixture
def repo(tmp_path: Path, served: GitServer) -> Repo:
    """A repository with two commits on main (the first tagged v1) and a dev branch."""
    work = tmp_path / "src" / "demo"
    r = git.Repo.init(work, initial_branch="main")
    _committer(r)
    (work / "README.md").write_text("# Demo model\nTrains a tiny model.\n")
    (work / "train.py").write_text("print('train')\n")
    (work / "src").mkdir()
    (work / "src" / "model.py").write_text("MODEL = 1\n")
    r.index.add(["README.md", "train.py", "src/model.py"])
    first = r.index.commit("first").hexsha
    r.create_tag("v1")
    (work / "eval.py").write_text("print('eval')\n")
    r.index.add(["eval.py"])
    main = r.index.commit("add eval").hexsha
    r.git.checkout("-b", "dev")
    (work / "dev.txt").write_text("dev\n")
    r.index.add(["dev.txt"])
    dev = r.index.commit("dev work").hexsha
    r.git.checkout("main")
    bare_repo(work, served.root / "demo.git")
    return Repo(url=served.url("demo"), first=first, main=main, dev=dev, server=served)


def policy_for(*hosts: str) -> FetchPolicy:
    """What a user who allowed these hosts and trusts the test authority has."""
    return FetchPolicy(FetchSettings(allow_hosts=list(hosts), ca_bundle=str(ca_bundle())))


def write_config(folder: Path) -> dict[str, str]:
    """mlra's config file trusting the test authority, and the environment naming it."""
    config = folder / "mlra-config.toml"
    config.write_text(f'[fetch]\nca_bundle = "{ca_bundle()}"\n')
    return {"MLRA_CONFIG": str(config)}


class Harness:
    def __init__(self, sandbox: LocalSandbox, ws: Path) -> None:
        self.sandbox = sandbox
        self.ws = ws

    async def call(self, tool: Any, **arguments: Any) -> ToolOutcome:
        registry = ToolRegistry([tool])
        ctx = ToolContext(sandbox=self.sandbox, agent="worker", call_id="c1")
        return await registry.dispatch(tool.name, arguments, ctx)


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    ws = (tmp_path / "run" / "workspace").resolve()
    ws.mkdir(parents=True)
    sandbox = LocalSandbox(ws, SandboxSpec(), isolation_mode="none")
    await sandbox.start()
    yield Harness(sandbox, ws)
    await sandbox.close()


def fetched(outcome: ToolOutcome) -> Fetched:
    (record,) = outcome.data["fetched"]
    return Fetched.model_validate(record)


def head_of(path: Path) -> str:
    """A clone's HEAD, read as root: a run's clone is its sandbox's uid's (run_uid.py),
    which git calls dubious ownership unless told the folder is safe."""
    return git.Repo(path).git.execute(
        ["git", "-c", f"safe.directory={path}", "-C", str(path), "rev-parse", "HEAD"]
    )


def clone_tool(server: GitServer, **options: Any) -> GithubClone:
    return GithubClone(policy=policy_for(server.allow), **options)


# --- github_clone ---------------------------------------------------------------------------


async def test_clone_default_branch_is_shallow_and_described(h: Harness, repo: Repo) -> None:
    out = await h.call(clone_tool(repo.server), url=repo.url)
    assert out.ok, out.output
    dest = h.ws / "repos" / "demo"
    assert head_of(dest) == repo.main
    assert len(list(git.Repo(dest).iter_commits())) == 1  # shallow
    assert "repos/demo" in out.output and repo.main[:12] in out.output
    assert "default branch main" in out.output
    assert "Top level: src/  README.md  eval.py  train.py" in out.output
    assert "# Demo model\nTrains a tiny model." in out.output
    record = fetched(out)
    assert record.kind == "git" and record.source == repo.url and record.path == "repos/demo"
    assert record.commit == repo.main and record.bytes > 0


async def test_clone_a_branch_a_tag_and_a_commit(h: Harness, repo: Repo) -> None:
    tool = clone_tool(repo.server)
    branch = await h.call(tool, url=repo.url, ref="dev", name="dev")
    assert branch.ok and "branch dev" in branch.output
    assert head_of(h.ws / "repos/dev") == repo.dev and (h.ws / "repos/dev/dev.txt").exists()

    tag = await h.call(tool, url=repo.url, ref="v1", name="v1")
    assert tag.ok and "tag v1" in tag.output
    assert head_of(h.ws / "repos/v1") == repo.first and not (h.ws / "repos/v1/eval.py").exists()

    commit = await h.call(tool, url=repo.url, ref=repo.first, name="at-first")
    assert commit.ok, commit.output
    assert head_of(h.ws / "repos/at-first") == repo.first
    assert fetched(commit).commit == repo.first

    short = await h.call(tool, url=repo.url, ref=repo.first[:8], name="short", depth=0)
    assert short.ok, short.output
    assert head_of(h.ws / "repos/short") == repo.first


async def test_clone_failures_are_observations(h: Harness, repo: Repo, tmp_path: Path) -> None:
    tool = clone_tool(repo.server)
    missing = await h.call(tool, url=repo.url, ref="no-such-branch")
    assert not missing.ok and "no branch or tag named 'no-such-branch'" in missing.output
    assert not (h.ws / "repos" / "demo").exists()

    nothing = await h.call(tool, url=repo.server.url("nowhere"))
    assert not nothing.ok and "is not a git repository" in nothing.output

    for url in ("/etc", "ftp://example.com/x", "not a url", "https://example.com/paper.pdf"):
        refused = await h.call(tool, url=url)
        assert not refused.ok and ("git" in refused.output or "https" in refused.output), url
    outside = await h.call(tool, url=repo.url, name="../../escape")
    assert not outside.ok and "plain folder name" in outside.output
    assert not (tmp_path / "escape").exists()

    assert (await h.call(tool, url=repo.url)).ok
    again = await h.call(tool, url=repo.url)
    assert not again.ok and "repos/demo already exists" in again.output


async def test_clone_follows_a_redirect_only_as_far_as_the_policy_allows(
    h: Harness, repo: Repo, tmp_path: Path
) -> None:
    # A renamed repository (GitHub answers 301) is followed to its new place on an
    # allowed host; a redirect to a host the user did not allow is not followed.
    repo.server.redirects["/old-name.git"] = f"{repo.server.base}/demo.git"
    moved = await h.call(clone_tool(repo.server), url=repo.server.url("old-name"), name="moved")
    assert moved.ok, moved.output
    assert head_of(h.ws / "repos" / "moved") == repo.main
    assert f"redirected from {repo.server.url('old-name')}" in moved.output
    assert fetched(moved).source == repo.url

    repo.server.redirects["/elsewhere.git"] = f"https://localhost:{repo.server.port}/demo.git"
    away = await h.call(clone_tool(repo.server), url=repo.server.url("elsewhere"))
    assert not away.ok and "localhost" in away.output and "not on the list" in away.output
    assert not (h.ws / "repos" / "elsewhere").exists()


async def test_clone_over_the_size_cap_is_stopped_and_removed(
    h: Harness, tmp_path: Path, served: GitServer
) -> None:
    work = tmp_path / "big"
    r = git.Repo.init(work)
    _committer(r)
    (work / "weights.bin").write_bytes(
        b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(96_000))
    )  # 3 MiB that does not compress
    r.index.add(["weights.bin"])
    r.index.commit("weights")
    bare_repo(work, served.root / "big.git")
    out = await h.call(clone_tool(served, max_bytes=1024 * 1024), url=served.url("big"))
    assert not out.ok and "size cap of 1.0 MiB" in out.output
    assert not (h.ws / "repos" / "big").exists()


async def test_clone_from_a_server_that_never_answers_times_out(
    h: Harness, served: GitServer
) -> None:
    served.mode = "hang"
    started = time.monotonic()
    out = await h.call(clone_tool(served, timeout_s=1.0), url=served.url("repo"))
    assert not out.ok and "did not finish within 1 s" in out.output
    assert time.monotonic() - started < 10
    assert not (h.ws / "repos" / "repo").exists()


async def test_clone_retries_a_server_error_with_backoff(h: Harness, served: GitServer) -> None:
    served.mode = "503"
    out = await h.call(clone_tool(served, retries=2, backoff_s=0.05), url=served.url("repo"))
    seen = [s for s in served.requests if s.path.endswith("/info/refs")]
    assert not out.ok and "could not reach" in out.output and "3 tries" in out.output
    assert "503" in out.output and len(seen) == 3


# --- arXiv ----------------------------------------------------------------------------------


def arxiv_tools(server: ArxivServer, interval_s: float = 0.0, **options: Any) -> dict[str, Any]:
    limiter = RateLimiter(interval_s)
    kw: dict[str, Any] = {
        "policy": policy_for(),
        "limiter": limiter,
        "api_url": server.api_url,
        "pdf_url": server.pdf_url,
        "timeout_s": 2.0,
        "backoff_s": 0.05,
        "retries": 2,
        **options,
    }
    return {"search": ArxivSearch(**kw), "read": ArxivRead(**kw)}


async def test_search_returns_compact_papers(h: Harness) -> None:
    with ArxivServer() as server:
        tools = arxiv_tools(server)
        out = await h.call(tools["search"], query="attention transformer", max_results=2)
        sorted_out = await h.call(tools["search"], query="attention", sort="submitted")
        query = server.requests[0].query
        requests = len(server.requests)
    assert out.ok, out.output
    assert query["search_query"] == ["all:attention AND all:transformer"]
    assert query["max_results"] == ["2"]
    lines = out.output.splitlines()
    assert lines[0] == "[arXiv search 'attention transformer': 2 papers, sorted by relevance]"
    assert lines[1] == "1. 1706.03762v7  Attention Is All You Need"
    assert "Ashish Vaswani, Noam Shazeer, Niki Parmar, Jakob Uszkoreit and 4 more" in lines[2]
    assert "2017-06-12" in lines[2] and "cs.CL, cs.LG" in lines[2]
    assert lines[3].strip().startswith("The dominant sequence transduction models")
    assert (
        "2. 2205.14135v2  FlashAttention: Fast and Memory-Efficient Exact Attention" in out.output
    )
    assert "Scaling Laws" not in out.output  # max_results honoured
    assert [p["id"] for p in out.data["papers"]] == ["1706.03762v7", "2205.14135v2"]
    record = fetched(out)
    assert record.kind == "arxiv_search" and "search_query=all%3Aattention" in record.source
    assert sorted_out.ok and "sorted by submitted" in sorted_out.output
    # arXiv sent 3 of the 10 asked for: a search keeps its one page rather than
    # paging on around the rate limiter.
    assert "3 papers" in sorted_out.output and requests == 2
    assert "sortBy=submittedDate" in fetched(sorted_out).source


async def test_search_without_matches_says_so(h: Harness) -> None:
    with ArxivServer() as server:
        out = await h.call(arxiv_tools(server)["search"], query="xyzzy plugh")
    assert out.ok and "No arXiv papers match 'xyzzy plugh'" in out.output
    assert out.data["papers"] == []


async def test_read_downloads_the_pdf_and_pages_through_it(h: Harness) -> None:
    with ArxivServer() as server:
        read = arxiv_tools(server)["read"]
        first = await h.call(read, id="arXiv:1706.03762", end_page=1)
        second = await h.call(read, id="https://arxiv.org/abs/1706.03762", start_page=2)
        past = await h.call(read, id="1706.03762", start_page=9)
        pdf_requests = [s for s in server.requests if s.path.startswith("/pdf/")]
        served = server.pdfs["1706.03762"]
    assert first.ok, first.output
    saved = h.ws / "papers" / "1706.03762.pdf"
    assert saved.read_bytes() == served
    assert first.output.startswith(
        "[papers/1706.03762.pdf (downloaded, 1.5 KiB): arXiv 1706.03762, page 1 of 3]"
    )
    assert "MARKER-ABSTRACT" in first.output and "MARKER-ARCHITECTURE" not in first.output
    assert "read on with arxiv_read id='1706.03762' start_page=2" in first.output
    record = fetched(first)
    assert record.kind == "arxiv_pdf" and record.path == "papers/1706.03762.pdf"
    assert record.sha256 == hashlib.sha256(served).hexdigest() and record.bytes == len(served)
    assert record.source == f"{server.pdf_url}/1706.03762" and not record.cached

    assert second.ok and "already in the workspace" in second.output
    assert "pages 2-3 of 3" in second.output
    assert "MARKER-ARCHITECTURE" in second.output and "MARKER-RESULTS" in second.output
    assert "not shown" not in second.output and fetched(second).cached
    assert len(pdf_requests) == 1  # the second read did not download again
    assert not past.ok and "has 3 pages; start_page 9 is past the end" in past.output


async def test_read_refuses_missing_papers_and_bad_ids(h: Harness) -> None:
    with ArxivServer() as server:
        read = arxiv_tools(server)["read"]
        missing = await h.call(read, id="2401.99999")
        bad = await h.call(read, id="../../etc/passwd")
        requests = len(server.requests)
    assert not missing.ok and "arXiv has no paper '2401.99999' (HTTP 404)" in missing.output
    assert not (h.ws / "papers" / "2401.99999.pdf").exists()
    assert not bad.ok and "is not an arXiv id" in bad.output
    assert requests == 1  # a bad id never reaches the network


async def test_an_overloaded_arxiv_is_retried_then_reported(h: Harness) -> None:
    with ArxivServer(mode="503") as server:
        tools = arxiv_tools(server, backoff_s=0.1)
        search = await h.call(tools["search"], query="attention")
        read = await h.call(tools["read"], id="1706.03762")
        times = [s.at for s in server.requests]
    assert not search.ok and "HTTP 503 (after 3 tries)" in search.output
    assert "try again in a minute" in search.output
    assert not read.ok and "HTTP 503 (after 3 tries)" in read.output
    assert len(times) == 6
    # Exponential backoff between the tries of one request: 0.1 s, then 0.2 s.
    assert times[1] - times[0] >= 0.09 and times[2] - times[1] >= 0.19


async def test_a_passing_overload_is_ridden_out(h: Harness) -> None:
    with ArxivServer(fail_first=1) as server:
        out = await h.call(arxiv_tools(server)["search"], query="attention")
        seen = len(server.requests)
    assert out.ok and "Attention Is All You Need" in out.output and seen == 2


async def test_an_arxiv_that_never_answers_times_out(h: Harness) -> None:
    with ArxivServer(mode="hang") as server:
        tools = arxiv_tools(server, timeout_s=0.3, retries=1)
        started = time.monotonic()
        search = await h.call(tools["search"], query="attention")
        read = await h.call(tools["read"], id="1706.03762")
        took = time.monotonic() - started
    assert not search.ok and "no answer within 0.3 s (after 2 tries)" in search.output
    assert not read.ok and "no answer within 0.3 s" in read.output
    assert took < 5
    assert not (h.ws / "papers" / "1706.03762.pdf").exists()


async def test_one_limiter_spaces_all_arxiv_requests(h: Harness) -> None:
    assert ArxivSearch().limiter is ArxivRead().limiter is arxiv_limiter()
    with ArxivServer() as server:
        tools = arxiv_tools(server, interval_s=0.3)
        outcomes = await asyncio.gather(
            h.call(tools["search"], query="attention"),
            h.call(tools["read"], id="1706.03762"),
            h.call(tools["search"], query="transformer"),
        )
        times = sorted(s.at for s in server.requests)
    assert all(o.ok for o in outcomes), [o.output for o in outcomes]
    assert len(times) == 3
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.29, gaps


async def test_the_rate_limiter_queues_concurrent_callers() -> None:
    limiter = RateLimiter(0.1)
    entered: list[float] = []

    async def request() -> None:
        async with limiter.slot():
            entered.append(time.monotonic())

    await asyncio.gather(*(request() for _ in range(4)))
    gaps = [b - a for a, b in itertools.pairwise(entered)]
    assert len(gaps) == 3 and min(gaps) >= 0.1, gaps


async def test_callers_woken_late_together_are_still_spaced() -> None:
    limiter = RateLimiter(0.1)
    entered: list[float] = []

    async def request() -> None:
        async with limiter.slot():
            entered.append(time.monotonic())

    await request()  # goes at once; the next two must wait their turns
    waiting = [asyncio.create_task(request()) for _ in range(2)]
    await asyncio.sleep(0)  # both have reserved their slots and sleep
    # The loop is held past both reserved starts, as a busy machine holds it: both wake
    # at once, and the second must still wait an interval after the first went.
    time.sleep(0.35)  # noqa: ASYNC251
    await asyncio.gather(*waiting)
    gaps = [b - a for a, b in itertools.pairwise(entered)]
    assert len(gaps) == 2 and min(gaps) >= 0.1, gaps


# --- a whole run ----------------------------------------------------------------------------


def test_a_scripted_run_searches_reads_and_clones(
    tmp_path: Path, answer_task: Path, repo: Repo
) -> None:
    supervisor = [
        turn("First, the literature.", call("arxiv_search", query="attention", max_results=1)),
        *supervisor_answering(),
    ]
    worker = [
        turn("Find papers.", call("arxiv_search", query="attention transformer", max_results=3)),
        turn("Read the first.", call("arxiv_read", id="1706.03762", start_page=2, end_page=2)),
        turn("Get the code.", call("github_clone", url=repo.url, ref="v1")),
        turn("Answer.", call("bash", command="echo 42 > answer.txt")),
        turn("", call("report", summary="answer.txt holds 42; paper and code fetched")),
    ]
    with (
        ArxivServer() as arxiv_server,
        ScriptedModelServer({"supervisor": supervisor, "worker": worker}) as server,
    ):
        proc = mlra_cli(
            [
                "run",
                str(answer_task),
                "--model",
                "openai/test-model",
                "--base-url",
                server.url_for("openai"),
                "--no-tui",
                "--runs-dir",
                str(tmp_path / "runs"),
                "--allow-host",
                repo.server.allow,
            ],
            cwd=tmp_path,
            env={
                **arxiv_server.env(),
                **write_config(tmp_path),
                "MLRA_ARXIV_INTERVAL_S": "0.05",
            },
            timeout=120,
        )
        worker_requests = json.dumps([r.body for r in server.requests_for("worker")])
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    ws = run_dir / "workspace"
    assert (ws / "papers" / "1706.03762.pdf").read_bytes()[:5] == b"%PDF-"
    assert head_of(ws / "repos" / "demo") == repo.first
    assert (ws / "repos" / "demo" / "README.md").exists()

    events = read_events(run_dir / "events.jsonl")
    results = {(e.agent, e.tool): e for e in events if isinstance(e, ev.ToolResult)}
    assert results[("supervisor", "arxiv_search")].ok
    kinds = {}
    for tool in ("arxiv_search", "arxiv_read", "github_clone"):
        result = results[("worker", tool)]
        assert result.ok, result.output
        (record,) = result.data["fetched"]
        kinds[tool] = Fetched.model_validate(record)
    assert kinds["arxiv_search"].kind == "arxiv_search"
    assert kinds["arxiv_read"].kind == "arxiv_pdf"
    assert kinds["arxiv_read"].path == "papers/1706.03762.pdf"
    assert (
        kinds["arxiv_read"].sha256
        == hashlib.sha256((ws / "papers" / "1706.03762.pdf").read_bytes()).hexdigest()
    )
    assert kinds["github_clone"].kind == "git" and kinds["github_clone"].commit == repo.first
    assert kinds["github_clone"].path == "repos/demo"
    # The worker read what the tools found.
    assert (
        "MARKER-ARCHITECTURE" in worker_requests and "Attention Is All You Need" in worker_requests
    )
    assert "# Demo model" in worker_requests
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score"] == 1.0


async def test_a_clone_takes_no_more_than_the_workspace_quota_has_left(
    tmp_path: Path, served: GitServer
) -> None:
    """The clone lands in the workspace: under a 1 MB disk quota a 3 MiB repository is
    stopped while it downloads and nothing is kept, as over the size cap."""
    work = tmp_path / "big"
    r = git.Repo.init(work)
    _committer(r)
    (work / "weights.bin").write_bytes(
        b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(96_000))
    )
    r.index.add(["weights.bin"])
    r.index.commit("weights")
    bare_repo(work, served.root / "big.git")
    ws = (tmp_path / "run" / "workspace").resolve()
    ws.mkdir(parents=True)
    sandbox = LocalSandbox(ws, SandboxSpec(disk_mb=1), isolation_mode="none")
    await sandbox.start()
    try:
        out = await Harness(sandbox, ws).call(clone_tool(served), url=served.url("big"))
    finally:
        await sandbox.close()
    assert not out.ok and "disk quota" in out.output, out.output
    assert not (ws / "repos" / "big").exists()
