"""`github_clone`: bring a public repository into the workspace under repos/.

The clone is work mlra does for the agent outside the agent's sandbox (which may
have no network), so it is confined as the agent is (tools/fetch/): the URL must be
https to an allowed host (GitHub unless the user allows more), resolving to a public
address that git is then pinned to; git runs in a bubblewrap box of its own that
sees only a staging folder in the run folder, as an unprivileged uid with no
credentials, no config of the host's, no redirects followed (each is checked here
first) and no protocol but https; the clone's summary (commit, listing, README) is
read inside the box too, never following a link the repository holds. A clone that
outgrows the size cap or the time-out is stopped while it downloads. The finished
clone is renamed in beneath the workspace. Every way a clone can fail becomes one
readable observation, and only failures a second try can cure (a dropped
connection, a 5xx) are retried.

What the request means (the URL normalized, the ref and folder name checked) is read
first, before anything is fetched, in tools/github_plan.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.fetch import landing
from mlra.tools.fetch.box import FetchBox, confinement, root_outside_of
from mlra.tools.fetch.https import https_get
from mlra.tools.fetch.policy import FetchPolicy, Target
from mlra.tools.fetched import Fetched
from mlra.tools.files import format_size, plural
from mlra.tools.github_plan import REPOS_DIR, ClonePlan, plan_clone
from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import Sandbox, SandboxError
from mlra.tools.sandbox.host_copies import copy_in

DEFAULT_MAX_BYTES = 500 * 1024 * 1024
DEFAULT_TIMEOUT_S = 300.0
DESCRIBE_TIMEOUT_S = 60.0
HEX_REF = re.compile(r"^[0-9a-fA-F]{4,40}$")
TRANSIENT = (
    "could not resolve host",
    "connection timed out",
    "connection reset",
    "failed to connect",
    "early eof",
    "rpc failed",
    "unexpected disconnect",
    "the remote end hung up unexpectedly",
    "returned error: 5",
    "returned error: 429",
)
NOT_A_REPO = (
    "does not appear to be a git repository",
    "repository not found",
    "not found",
    "not a git repository",
    "returned error: 404",
    "could not read username",
    "authentication failed",
)
RETRY_STATUS = {429, 500, 502, 503, 504}
CAP_SIGNS = ("file size limit exceeded", "invalid index-pack output", "index-pack died")


class GithubCloneArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        description="The repository's https URL, e.g. https://github.com/OWNER/REPO "
        "(a /tree/BRANCH link works too)."
    )
    ref: str | None = Field(
        default=None,
        description="Optional branch, tag or commit to check out; default: the default branch.",
    )
    depth: int = Field(
        default=1,
        ge=0,
        le=100_000,
        description="How many commits of history to fetch; 1 (the default) is fastest, "
        "0 fetches the whole history.",
    )
    name: str | None = Field(
        default=None,
        description="Folder name under repos/; default: the repository's name.",
    )


class GitFailed(Exception):
    def __init__(self, stderr: str) -> None:
        super().__init__(stderr)
        self.stderr = stderr


@dataclass
class _Clone:
    """One clone's working parts: the confined box, the staging folder, the target."""

    box: FetchBox
    staging: Path
    dest: str
    """The clone's folder name inside the staging folder."""
    target: Target
    """The repository's URL, resolved and pinned, after any redirect."""
    ca: str | None
    cap: int
    """Bytes the clone may take: the size cap, or less where the disk quota has less left."""
    cap_said: str


class GithubClone(Tool[GithubCloneArgs]):
    name = "github_clone"
    description = (
        "Clone a public git repository (GitHub, or another host the user allowed) over "
        "https into the workspace under repos/<name>, shallow by default. Optionally check "
        "out a branch, tag or commit (`ref`). Returns the path, the commit, the top-level "
        "listing and the start of the README. Large repositories are refused (size cap) and "
        "slow clones time out."
    )
    Args = GithubCloneArgs

    def __init__(
        self,
        *,
        policy: FetchPolicy | None = None,
        max_bytes: int | None = None,
        timeout_s: float | None = None,
        retries: int = 2,
        backoff_s: float = 2.0,
    ) -> None:
        self.policy = policy or FetchPolicy()
        env_mb = os.environ.get("MLRA_CLONE_MAX_MB")
        self.max_bytes = max_bytes or (
            int(float(env_mb) * 1024 * 1024) if env_mb else DEFAULT_MAX_BYTES
        )
        self.timeout_s = timeout_s or float(
            os.environ.get("MLRA_CLONE_TIMEOUT_S", DEFAULT_TIMEOUT_S)
        )
        self.retries = retries
        self.backoff_s = backoff_s

    async def run(self, args: GithubCloneArgs, ctx: ToolContext) -> ToolOutcome:
        plan = plan_clone(args.url, args.ref, args.name)
        target = self.policy.check(plan.url, what=repr(args.url))
        rel = f"{REPOS_DIR}/{plan.name}"
        if _taken(ctx.sandbox, rel):
            raise SandboxError(
                f"{rel} already exists in the workspace; pass another `name` or remove it first"
            )
        bwrap = confinement(allow_unconfined=ctx.sandbox.isolation == "none")
        cap = self.max_bytes
        room = ctx.sandbox.disk_room()
        if room is not None and room < cap:
            # The clone lands in the workspace: it may not take more than its quota has left.
            cap = max(0, room)
            cap_said = f"the workspace's disk quota has {format_size(cap)} left"
        else:
            cap_said = f"the size cap of {format_size(cap)}"
        staging = landing.staging_dir(ctx.sandbox.workspace)
        ca = self.policy.ca_bundle
        box = FetchBox(
            staging,
            bwrap=bwrap,
            hide=ctx.sandbox.spec.hide_paths,
            read_only=[ca] if ca else [],
            file_limit_bytes=max(cap, 1),
            on_root_outside=root_outside_of(ctx, "a fetch step (the clone)"),
        )
        clone = _Clone(box, staging, plan.name, target, str(ca) if ca else None, cap, cap_said)
        try:
            return await self._clone_into(plan, args, ctx, rel, clone)
        finally:
            await asyncio.to_thread(landing.remove, staging)

    async def _clone_into(
        self, plan: ClonePlan, args: GithubCloneArgs, ctx: ToolContext, rel: str, clone: _Clone
    ) -> ToolOutcome:
        plan.limit_s = ctx.timeout(self.timeout_s)
        started = time.monotonic()
        deadline = plan.deadline = started + plan.limit_s
        dest = clone.staging / clone.dest
        attempt = 0
        while True:
            try:
                clone.target = await self._discover(clone, plan)
                how = await self._clone(clone, plan, args.depth)
                break
            except GitFailed as exc:
                await asyncio.to_thread(landing.remove, dest)
                low = exc.stderr.lower()
                transient = any(t in low for t in TRANSIENT)
                wait = self.backoff_s * 2**attempt
                if transient and attempt < self.retries and time.monotonic() + wait < deadline:
                    attempt += 1
                    await asyncio.sleep(wait)
                    continue
                raise SandboxError(self._explain(plan, exc.stderr, attempt)) from None
        info = await self._describe(clone, plan)
        refused = ctx.sandbox.claim_disk(await asyncio.to_thread(landing.tree_size, dest))
        if refused is not None:
            raise SandboxError(f"{refused}; the clone was not kept")
        await asyncio.to_thread(landing.hand_over, dest, ctx.sandbox.workspace)
        if not await asyncio.to_thread(landing.move_in, ctx.sandbox, dest, rel):
            await copy_in(ctx.sandbox, dest, rel)
        size = int(info.get("bytes", 0))
        commit = str(info.get("commit", ""))
        url = clone.target.url
        fetched = Fetched(kind="git", source=url, path=rel, commit=commit, bytes=size)
        files = int(info.get("files", 0))
        counted = plural(files, "file") if info.get("complete", True) else f"over {files:,} files"
        moved = "" if url == plan.url else f" (redirected from {plan.url})"
        lines = [
            f"Cloned {url}{moved} ({how}) into {rel} at commit {commit[:12]} "
            f'("{info.get("subject", "")}", {info.get("date", "")}): {format_size(size)}, '
            f"{counted}, in {time.monotonic() - started:.1f} s.",
            "Top level: " + ("  ".join(info.get("listing") or []) or "(empty)"),
        ]
        readme = info.get("readme")
        if readme and info.get("readme_note"):
            lines.append(f"{readme}: {info['readme_note']}.")
        elif readme:
            lines.append(f"{readme} (first lines):")
            lines.append(str(info.get("readme_text", "")))
        else:
            lines.append("(no README at the top level)")
        return ToolOutcome(
            output="\n".join(lines),
            data={
                "path": rel,
                "url": url,
                "ref": plan.ref,
                "commit": commit,
                "depth": 0 if how.endswith("full history") else args.depth,
                "fetched": [fetched.record()],
            },
        )

    async def _discover(self, clone: _Clone, plan: ClonePlan) -> Target:
        """Ask the server for the repository's refs, following redirects only where each
        passes the policy, and return the final repository URL, pinned to its address:
        git itself follows none."""
        left = max(1.0, plan.deadline - time.monotonic())
        base = plan.url.rstrip("/")
        got = await https_get(
            self.policy,
            clone.box,
            f"{base}/info/refs?service=git-upload-pack",
            out=None,
            max_bytes=0,
            timeout_s=min(left, 60.0),
            what=f"{plan.url!r}",
        )
        host = got.target.host
        if got.error == "tls":
            raise SandboxError(f"the TLS certificate of {host} could not be verified: {got.detail}")
        if got.error == "timeout":
            if time.monotonic() >= plan.deadline - 1.0:
                raise self._too_slow(plan)
            raise GitFailed(f"connection timed out: no answer from {host}")
        if got.error is not None:
            raise GitFailed(f"failed to connect to {host}: {got.detail or got.error}")
        if got.status in RETRY_STATUS:
            raise GitFailed(f"the requested URL returned error: {got.status}")
        if got.status != 200:
            raise GitFailed(f"repository not found (HTTP {got.status})")
        # The last hop passed the policy and is pinned; git fetches from its repository.
        final = got.url.split("?", 1)[0].removesuffix("/info/refs")
        return replace(got.target, url=final)

    def _git_config(self, clone: _Clone) -> list[str]:
        """git's settings for a fetch: https only, pinned to the checked address, no
        redirects, no credentials, no hooks or templates."""
        config = [
            "credential.helper=",
            "advice.detachedHead=false",
            "protocol.allow=never",
            "protocol.https.allow=always",
            "http.followRedirects=false",
            f"http.curloptResolve={clone.target.pin()}",
            "core.hooksPath=/dev/null",
            "submodule.recurse=false",
        ]
        if clone.ca:
            config.append(f"http.sslCAInfo={clone.ca}")
        out: list[str] = []
        for item in config:
            out += ["-c", item]
        return out

    async def _clone(self, clone: _Clone, plan: ClonePlan, depth: int) -> str:
        """Clone into the staging folder; says how (branch, tag, commit) for the observation."""
        url = clone.target.url
        shallow = ["--depth", str(depth)] if depth > 0 else []
        history = f"depth {depth}" if depth > 0 else "full history"
        opts = ["--no-recurse-submodules", "--template="]
        dest = clone.dest
        if plan.ref is None:
            await self._git(clone, plan, ["clone", *opts, *shallow, "--", url, dest])
            branch = (
                await self._git(clone, plan, ["-C", dest, "branch", "--show-current"])
            ).strip()
            return f"default branch {branch}, {history}" if branch else history
        try:
            await self._git(
                clone, plan, ["clone", *opts, *shallow, "--branch", plan.ref, "--", url, dest]
            )
            branch = (
                await self._git(clone, plan, ["-C", dest, "branch", "--show-current"])
            ).strip()
            return f"{'branch' if branch else 'tag'} {plan.ref}, {history}"
        except GitFailed as exc:
            if "not found in upstream" not in exc.stderr or not HEX_REF.match(plan.ref):
                raise
        await asyncio.to_thread(landing.remove, clone.staging / dest)
        # A commit: fetch just it where the server allows, else the whole history.
        try:
            await self._git(clone, plan, ["init", "-q", "--template=", dest])
            await self._git(clone, plan, ["-C", dest, "remote", "add", "origin", url])
            await self._git(clone, plan, ["-C", dest, "fetch", "-q", *shallow, "origin", plan.ref])
            await self._git(clone, plan, ["-C", dest, "checkout", "-q", "--detach", "FETCH_HEAD"])
            return f"commit {plan.ref}, {history}"
        except GitFailed:
            await asyncio.to_thread(landing.remove, clone.staging / dest)
        await self._git(clone, plan, ["clone", *opts, "--", url, dest])
        try:
            await self._git(clone, plan, ["-C", dest, "checkout", "-q", "--detach", plan.ref])
        except GitFailed:
            raise SandboxError(
                f"{plan.url} has no branch, tag or commit named {plan.ref!r}"
            ) from None
        return f"commit {plan.ref}, full history"

    async def _git(self, clone: _Clone, plan: ClonePlan, argv: list[str]) -> str:
        """Run git in the box; stop it when it outgrows the cap or the time. Returns
        its output."""
        left = plan.deadline - time.monotonic()
        if left <= 0:
            raise self._too_slow(plan)
        watched = clone.staging / clone.dest

        def too_big() -> str | None:
            size = landing.tree_size(watched)
            return format_size(size) if size > clone.cap else None

        result = await clone.box.run(
            ["git", *self._git_config(clone), *argv], timeout_s=left, watch=too_big
        )
        if result.timed_out:
            raise self._too_slow(plan)
        # A file that outgrows the cap stops git by RLIMIT_FSIZE (SIGXFSZ), which kills
        # index-pack mid-pack: git then reports its helper's output as invalid.
        low = result.stderr.lower()
        if result.stopped is not None or (
            result.exit_code != 0 and any(sign in low for sign in CAP_SIGNS)
        ):
            raise SandboxError(
                f"the repository is larger than {clone.cap_said} (already "
                f"{result.stopped or 'over it'} when stopped); nothing was kept. Try "
                "depth=1, or download only the files you need"
            )
        if result.exit_code != 0:
            raise GitFailed(result.stderr.strip())
        size = await asyncio.to_thread(landing.tree_size, watched)
        if size > clone.cap:
            raise SandboxError(
                f"the repository is larger than {clone.cap_said} ({format_size(size)}); "
                "nothing was kept. Try depth=1"
            )
        return result.stdout.decode("utf-8", errors="replace")

    def _too_slow(self, plan: ClonePlan) -> SandboxError:
        return SandboxError(
            f"the clone did not finish within {plan.limit_s:.0f} s and was stopped; "
            "nothing was kept. Try depth=1, or a smaller repository"
        )

    async def _describe(self, clone: _Clone, plan: ClonePlan) -> dict:
        """The clone's commit, listing and README, read inside the box."""
        left = max(5.0, min(DESCRIBE_TIMEOUT_S, plan.deadline - time.monotonic()))
        result = await clone.box.run(clone.box.runner("describe", clone.dest), timeout_s=left)
        try:
            info = json.loads(result.stdout)
        except ValueError:
            info = None
        if not isinstance(info, dict) or not info.get("commit"):
            raise SandboxError(
                "the clone arrived but could not be described "
                f"({result.stderr.strip().splitlines()[-1:] or 'no answer'}); nothing was kept"
            )
        return info

    def _explain(self, plan: ClonePlan, stderr: str, retried: int) -> str:
        said = _last_lines(stderr)
        low = stderr.lower()
        tries = f" (after {plural(retried + 1, 'try', 'tries')})" if retried else ""
        if plan.ref and "not found in upstream" in low:
            return f"{plan.url} has no branch or tag named {plan.ref!r}. git said: {said}"
        if any(t in low for t in TRANSIENT):
            return f"could not reach {plan.url}{tries}: {said}"
        if any(t in low for t in NOT_A_REPO):
            return (
                f"{plan.url} is not a git repository that can be cloned (it does not exist, is "
                f"private, or is not a git URL). git said: {said}"
            )
        return f"git clone of {plan.url} failed{tries}: {said}"


def _taken(sandbox: Sandbox, rel: str) -> bool:
    """Whether `rel` holds something: a file, a link, or a folder that is not empty."""
    try:
        fd, _ = sandbox.open_beneath(rel, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True  # something that cannot be opened stands there
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            return True
        with os.scandir(fd) as it:
            return any(True for _ in it)
    finally:
        os.close(fd)


def _last_lines(stderr: str, n: int = 3) -> str:
    lines = [
        line.strip()
        for line in stderr.splitlines()
        if line.strip() and not line.startswith("Cloning into")
    ]
    return " / ".join(lines[-n:]) or "(no message)"
