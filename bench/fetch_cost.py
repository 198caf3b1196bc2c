"""What confining the research tools costs: a clone and an arXiv read, in the fetch box.

Since issue 24 every step mlra takes outside the sandbox for the agent (git, an HTTPS
request, parsing a feed, a PDF's text, a clone's summary) runs in a bubblewrap box of
its own. This measures, against loopback HTTPS servers (git http-backend, the test
arXiv), the median of:

- one empty step in the box (`true`), the floor of every fetch step;
- `github_clone` of a small repository (the policy, a discovery request, git in the
  box, the summary in the box), beside plain `git clone` of the same URL on the host,
  unconfined, as mlra cloned before;
- `arxiv_read` of a 3-page PDF already in the workspace (its text extracted in the box).

Run: python bench/fetch_cost.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mlra.tools.arxiv import RateLimiter  # noqa: E402
from mlra.tools.arxiv_read import ArxivRead  # noqa: E402
from mlra.tools.fetch.box import FetchBox, confinement  # noqa: E402
from mlra.tools.fetch.policy import FetchPolicy, FetchSettings  # noqa: E402
from mlra.tools.github import GithubClone  # noqa: E402
from mlra.tools.registry import ToolContext, ToolRegistry  # noqa: E402
from mlra.tools.sandbox.base import SandboxSpec  # noqa: E402
from mlra.tools.sandbox.local import LocalSandbox  # noqa: E402
from tests.fakes.arxiv_server import ArxivServer  # noqa: E402
from tests.fakes.git_server import GitServer, bare_repo  # noqa: E402
from tests.fakes.tls import ca_bundle  # noqa: E402


def _ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1000:.0f} ms (p90 {sorted(samples)[int(len(samples) * 0.9) - 1] * 1000:.0f} ms)"


def _small_repo(root: Path) -> Path:
    work = root / "src"
    work.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    for i in range(20):
        (work / f"file{i}.py").write_text(f"print({i})\n" * 50)
    (work / "README.md").write_text("# A small repository\n")
    git = ["git", "-C", str(work), "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "small"], check=True)
    served = root / "served"
    served.mkdir()
    bare_repo(work, served / "small.git")
    return served


async def main(rounds: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="mlra-bench-fetch-"))
    try:
        served = _small_repo(root)
        ws = root / "run" / "workspace"
        ws.mkdir(parents=True)
        sandbox = LocalSandbox(ws, SandboxSpec(), isolation_mode="bwrap")
        await sandbox.start()
        ctx = ToolContext(sandbox=sandbox, agent="worker", call_id="b")
        box_dir = root / "box"
        box_dir.mkdir()
        box = FetchBox(box_dir, bwrap=confinement(allow_unconfined=False))
        empty: list[float] = []
        for _ in range(rounds):
            began = time.monotonic()
            await box.run(["true"], timeout_s=30)
            empty.append(time.monotonic() - began)
        print(f"an empty step in the fetch box:        {_ms(empty)}")

        with GitServer(served) as server:
            policy = FetchPolicy(
                FetchSettings(allow_hosts=[server.allow], ca_bundle=str(ca_bundle()))
            )
            registry = ToolRegistry([GithubClone(policy=policy)])
            boxed: list[float] = []
            plain: list[float] = []
            env = {**os.environ, "GIT_SSL_CAINFO": str(ca_bundle())}
            for i in range(rounds):
                began = time.monotonic()
                out = await registry.dispatch(
                    "github_clone", {"url": server.url("small"), "name": f"c{i}"}, ctx
                )
                boxed.append(time.monotonic() - began)
                assert out.ok, out.output
                dest = root / f"plain{i}"
                began = time.monotonic()
                await asyncio.to_thread(
                    subprocess.run,
                    ["git", "clone", "-q", "--depth", "1", server.url("small"), str(dest)],
                    check=True,
                    env=env,
                )
                plain.append(time.monotonic() - began)
            print(f"github_clone, confined (small repo):   {_ms(boxed)}")
            print(f"git clone on the host, unconfined:     {_ms(plain)}")

        with ArxivServer() as arxiv_server:
            read = ArxivRead(
                policy=FetchPolicy(FetchSettings(ca_bundle=str(ca_bundle()))),
                limiter=RateLimiter(0.0),
                api_url=arxiv_server.api_url,
                pdf_url=arxiv_server.pdf_url,
            )
            registry = ToolRegistry([read])
            first = await registry.dispatch("arxiv_read", {"id": "1706.03762"}, ctx)
            assert first.ok, first.output
            cached: list[float] = []
            for _ in range(rounds):
                began = time.monotonic()
                out = await registry.dispatch("arxiv_read", {"id": "1706.03762"}, ctx)
                cached.append(time.monotonic() - began)
                assert out.ok and "already in the workspace" in out.output
            print(f"arxiv_read of a PDF in the workspace:  {_ms(cached)}")
        await sandbox.close()
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    asyncio.run(main(parser.parse_args().rounds))
