"""`github_clone`: bring a public repository into the workspace under repos/.

It runs host-side, because the sandbox may have no network, and runs `git` as a
child process it can kill: a clone that outgrows the size cap or the time-out
is stopped while it downloads, not after. GitPython then reads what arrived
(the commit). Every way a clone can fail becomes one readable observation, and
only failures a second try can cure (a dropped connection, a 5xx) are retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import shutil
import signal
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.fetched import Fetched
from mlra.tools.files import format_size, plural
from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import Sandbox, SandboxError

DEFAULT_MAX_BYTES = 500 * 1024 * 1024
DEFAULT_TIMEOUT_S = 300.0
REPOS_DIR = "repos"
LISTING_ENTRIES = 40
README_LINES = 25
WATCH_INTERVAL_S = 0.2
SCHEMES = {"https", "http", "git", "ssh", "file"}
SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:[\w./~-]+$")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
HEX_REF = re.compile(r"^[0-9a-fA-F]{4,40}$")
NOT_GIT_SUFFIXES = (".pdf", ".zip", ".tar", ".gz", ".tgz", ".html", ".htm", ".txt", ".json")
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
SECRET_ENV_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET")


class GithubCloneArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        description="The repository's git URL, e.g. https://github.com/OWNER/REPO "
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


@dataclass
class _Plan:
    url: str
    ref: str | None
    name: str
    deadline: float = 0.0
    limit_s: float = 0.0


class GitFailed(Exception):
    def __init__(self, stderr: str) -> None:
        super().__init__(stderr)
        self.stderr = stderr


class GithubClone(Tool[GithubCloneArgs]):
    name = "github_clone"
    description = (
        "Clone a public git repository (GitHub or any git URL) into the workspace under "
        "repos/<name>, shallow by default. Optionally check out a branch, tag or commit "
        "(`ref`). Returns the path, the commit, the top-level listing and the start of the "
        "README. Large repositories are refused (size cap) and slow clones time out."
    )
    Args = GithubCloneArgs

    def __init__(
        self,
        *,
        max_bytes: int | None = None,
        timeout_s: float | None = None,
        retries: int = 2,
        backoff_s: float = 2.0,
    ) -> None:
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
        rel = f"{REPOS_DIR}/{plan.name}"
        if _taken(ctx.sandbox, rel):
            raise SandboxError(
                f"{rel} already exists in the workspace; pass another `name` or remove it first"
            )
        # git runs host-side, by path: it clones into a folder of mlra's own, which the
        # agent's processes cannot swap for a link to /root, and the finished clone is
        # moved in beneath the workspace.
        staging = Path(_staging_dir(ctx.sandbox.workspace))
        try:
            return await self._clone_into(plan, args, ctx, rel, staging / plan.name)
        finally:
            await asyncio.to_thread(shutil.rmtree, staging, True)

    async def _clone_into(
        self, plan: _Plan, args: GithubCloneArgs, ctx: ToolContext, rel: str, dest: Path
    ) -> ToolOutcome:
        plan.limit_s = ctx.timeout(self.timeout_s)
        started = time.monotonic()
        deadline = plan.deadline = started + plan.limit_s
        attempt = 0
        while True:
            try:
                how = await self._clone(plan, args.depth, dest)
                break
            except GitFailed as exc:
                await _remove(dest)
                low = exc.stderr.lower()
                transient = any(t in low for t in TRANSIENT)
                wait = self.backoff_s * 2**attempt
                if transient and attempt < self.retries and time.monotonic() + wait < deadline:
                    attempt += 1
                    await asyncio.sleep(wait)
                    continue
                raise SandboxError(self._explain(plan, exc.stderr, attempt)) from None
            except BaseException:
                await _remove(dest)
                raise
        await asyncio.to_thread(_hand_over, dest, ctx.sandbox.workspace)
        info = await asyncio.to_thread(_describe, dest)
        if not await asyncio.to_thread(_move_in, ctx.sandbox, dest, rel):
            await ctx.sandbox.copy_in(dest, rel)
        size = info["bytes"]
        commit = info["commit"]
        fetched = Fetched(kind="git", source=plan.url, path=rel, commit=commit, bytes=size)
        lines = [
            f"Cloned {plan.url} ({how}) into {rel} at commit {commit[:12]} "
            f'("{info["subject"]}", {info["date"]}): {format_size(size)}, '
            f"{plural(info['files'], 'file')}, in {time.monotonic() - started:.1f} s.",
            "Top level: " + ("  ".join(info["listing"]) or "(empty)"),
        ]
        if info["readme"]:
            lines.append(f"{info['readme']} (first lines):")
            lines.append(info["readme_text"])
        else:
            lines.append("(no README at the top level)")
        return ToolOutcome(
            output="\n".join(lines),
            data={
                "path": rel,
                "url": plan.url,
                "ref": plan.ref,
                "commit": commit,
                "depth": 0 if how.endswith("full history") else args.depth,
                "fetched": [fetched.record()],
            },
        )

    async def _clone(self, plan: _Plan, depth: int, dest: Path) -> str:
        """Clone into dest; says how (branch, tag, commit) for the observation."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        shallow = ["--depth", str(depth)] if depth > 0 else []
        history = f"depth {depth}" if depth > 0 else "full history"
        if plan.ref is None:
            await self._git(["clone", *shallow, "--", plan.url, str(dest)], dest, plan)
            branch = await asyncio.to_thread(_branch_of, dest)
            return f"default branch {branch}, {history}" if branch else history
        try:
            await self._git(
                ["clone", *shallow, "--branch", plan.ref, "--", plan.url, str(dest)],
                dest,
                plan,
            )
            kind = "branch" if await asyncio.to_thread(_branch_of, dest) else "tag"
            return f"{kind} {plan.ref}, {history}"
        except GitFailed as exc:
            if "not found in upstream" not in exc.stderr or not HEX_REF.match(plan.ref):
                raise
        await _remove(dest)
        # A commit: fetch just it where the server allows, else the whole history.
        try:
            dest.mkdir(parents=True)
            await self._git(["init", "-q", str(dest)], dest, plan)
            await self._git(["-C", str(dest), "remote", "add", "origin", plan.url], dest, plan)
            await self._git(
                ["-C", str(dest), "fetch", "-q", *shallow, "origin", plan.ref], dest, plan
            )
            await self._git(
                ["-C", str(dest), "checkout", "-q", "--detach", "FETCH_HEAD"], dest, plan
            )
            return f"commit {plan.ref}, {history}"
        except GitFailed:
            await _remove(dest)
        await self._git(["clone", "--", plan.url, str(dest)], dest, plan)
        try:
            await self._git(["-C", str(dest), "checkout", "-q", "--detach", plan.ref], dest, plan)
        except GitFailed:
            raise SandboxError(
                f"{plan.url} has no branch, tag or commit named {plan.ref!r}"
            ) from None
        return f"commit {plan.ref}, full history"

    async def _git(self, argv: list[str], watch: Path, plan: _Plan) -> None:
        """Run git; stop it (and its helpers) when it outgrows the cap or the time."""
        deadline, limit_s = plan.deadline, plan.limit_s
        proc = await asyncio.create_subprocess_exec(
            os.environ.get("GIT_PYTHON_GIT_EXECUTABLE", "git"),
            "-c",
            "credential.helper=",
            "-c",
            "advice.detachedHead=false",
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=_git_env(),
            start_new_session=True,
        )
        communicate = asyncio.ensure_future(proc.communicate())
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SandboxError(
                        f"the clone did not finish within {limit_s:.0f} s and was stopped; "
                        "nothing was kept. Try depth=1, or a smaller repository"
                    )
                done, _ = await asyncio.wait({communicate}, timeout=min(WATCH_INTERVAL_S, left))
                if done:
                    break
                size = await asyncio.to_thread(tree_size, watch)
                if size > self.max_bytes:
                    raise SandboxError(
                        f"the repository is larger than the size cap of "
                        f"{format_size(self.max_bytes)} (already {format_size(size)} when "
                        "stopped); nothing was kept. Try depth=1, or download only the files "
                        "you need"
                    )
            _out, err = communicate.result()
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(BaseException):
                    await proc.wait()
            if not communicate.done():
                communicate.cancel()
        if proc.returncode != 0:
            raise GitFailed(err.decode("utf-8", errors="replace").strip())
        size = await asyncio.to_thread(tree_size, watch)
        if size > self.max_bytes:
            raise SandboxError(
                f"the repository is larger than the size cap of {format_size(self.max_bytes)} "
                f"({format_size(size)}); nothing was kept. Try depth=1"
            )

    def _explain(self, plan: _Plan, stderr: str, retried: int) -> str:
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


def plan_clone(url: str, ref: str | None, name: str | None) -> _Plan:
    """The URL to clone, the ref and the folder name; refuses what is not a git URL."""
    raw = url.strip()
    if re.match(r"^(www\.)?(github|gitlab)\.com/", raw):
        raw = "https://" + raw
    if ref is not None:
        ref = ref.strip() or None
        if ref is not None and (ref.startswith("-") or any(c.isspace() for c in ref)):
            raise SandboxError(f"{ref!r} is not a branch, tag or commit name")
    if SCP_LIKE.match(raw):
        target = raw
        path = raw.split(":", 1)[1]
    else:
        parts = urlsplit(raw)
        if parts.scheme.lower() not in SCHEMES or not (parts.netloc or parts.scheme == "file"):
            raise SandboxError(
                f"{url!r} is not a git URL; github_clone takes a repository URL such as "
                "https://github.com/OWNER/REPO (also http://, git://, ssh://, file:// or "
                "git@HOST:OWNER/REPO)"
            )
        path = parts.path
        if path.lower().endswith(NOT_GIT_SUFFIXES):
            raise SandboxError(
                f"{url!r} points to a file, not a git repository; download files with bash "
                "(curl) if the sandbox has network, or clone the repository that holds it"
            )
        target = raw
        if parts.netloc.lower() in {"github.com", "www.github.com"}:
            segs = [s for s in path.split("/") if s]
            if len(segs) < 2:
                raise SandboxError(
                    f"{url!r} does not name a repository; use https://github.com/OWNER/REPO"
                )
            owner, repo = segs[0], segs[1].removesuffix(".git")
            if len(segs) >= 4 and segs[2] in {"tree", "blob", "commit"} and ref is None:
                ref = segs[3]
            target = f"https://github.com/{owner}/{repo}.git"
            path = f"/{owner}/{repo}"
    if name is None:
        base = path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
        name = re.sub(r"[^A-Za-z0-9._-]", "-", base).lstrip(".-") or "repo"
    elif not SAFE_NAME.match(name) or name in {".", ".."}:
        raise SandboxError(
            f"name {name!r} must be a plain folder name (letters, digits, '.', '_', '-'); "
            f"the clone always goes under {REPOS_DIR}/ in the workspace"
        )
    return _Plan(url=target, ref=ref, name=name)


def tree_size(root: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, f)).st_size
    return total


def _git_env() -> dict[str, str]:
    """The host's environment for git, without keys, and with no way to prompt."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().endswith(SECRET_ENV_SUFFIXES) and not k.startswith("GIT_")
    }
    env.update({"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never", "LC_ALL": "C"})
    return env


def _taken(sandbox: Sandbox, rel: str) -> bool:
    """Whether `rel` holds something: a file, a link, or a folder that is not empty."""
    try:
        fd, _ = sandbox.open_beneath(rel, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            return True
        with os.scandir(fd) as it:
            return any(True for _ in it)
    finally:
        os.close(fd)


def _staging_dir(workspace: Path) -> str:
    """A private folder for the clone, next to the workspace (the run folder, which the
    agent cannot reach) so it can be renamed in, else in the host's temporary folder."""
    with contextlib.suppress(OSError):
        return tempfile.mkdtemp(prefix=".clone-", dir=workspace.parent)
    return tempfile.mkdtemp(prefix="mlra-clone-")


def _move_in(sandbox: Sandbox, staged: Path, rel: str) -> bool:
    """Put the finished clone at `rel`, renaming it into its parent opened beneath the
    workspace; False where the staging folder is on another file system (copy it in)."""
    parent_rel, _, name = rel.rpartition("/")
    parent, _ = sandbox.open_beneath(parent_rel, os.O_RDONLY, make_parents=True, make_dir=True)
    try:
        owner = sandbox.workspace.stat()
        if os.geteuid() == 0 and owner.st_uid != 0:
            os.fchown(parent, owner.st_uid, owner.st_gid)
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=parent)  # an empty folder waiting for it
        try:
            os.rename(staged, name, dst_dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                return False
            raise SandboxError(f"the clone could not be put at {rel}: {exc.strerror}") from None
        return True
    finally:
        os.close(parent)


def _hand_over(dest: Path, workspace: Path) -> None:
    """The clone belongs to whoever owns the workspace (a Docker sandbox's user, when
    mlra runs as root), so the agent can change what it cloned."""
    owner = workspace.stat()
    if os.geteuid() != 0 or owner.st_uid == 0:
        return
    os.lchown(dest.parent, owner.st_uid, owner.st_gid)
    for base, dirs, files in os.walk(dest):
        os.lchown(base, owner.st_uid, owner.st_gid)
        for name in [*dirs, *files]:
            with contextlib.suppress(OSError):
                os.lchown(os.path.join(base, name), owner.st_uid, owner.st_gid)


def _branch_of(dest: Path) -> str | None:
    import git  # GitPython; imported when first used, as it is slow to import

    repo = git.Repo(dest)
    try:
        return None if repo.head.is_detached else repo.active_branch.name
    finally:
        repo.close()


def _describe(dest: Path) -> dict:
    import git  # GitPython; imported when first used, as it is slow to import

    repo = git.Repo(dest)
    try:
        head = repo.head.commit
        commit, subject = head.hexsha, head.summary
        date = head.committed_datetime.date().isoformat()
    finally:
        repo.close()
    entries = sorted(
        (p for p in dest.iterdir() if p.name != ".git"), key=lambda p: (not p.is_dir(), p.name)
    )
    listing = [p.name + ("/" if p.is_dir() else "") for p in entries[:LISTING_ENTRIES]]
    if len(entries) > LISTING_ENTRIES:
        listing.append(f"... {len(entries) - LISTING_ENTRIES} more")
    readmes = sorted(
        (p for p in entries if p.is_file() and p.name.lower().startswith("readme")),
        key=lambda p: (p.suffix.lower() not in {".md", ".rst", ".txt", ""}, p.name),
    )
    readme_text = ""
    if readmes:
        text = readmes[0].read_text(encoding="utf-8", errors="replace").splitlines()
        shown = [line[:200] for line in text[:README_LINES]]
        readme_text = "\n".join(shown)
        if len(text) > README_LINES:
            readme_text += f"\n[... {len(text) - README_LINES:,} more lines]"
    files = sum(len(fs) for b, _d, fs in os.walk(dest) if ".git" not in Path(b).parts)
    return {
        "commit": commit,
        "subject": subject,
        "date": date,
        "listing": listing,
        "readme": readmes[0].name if readmes else None,
        "readme_text": readme_text,
        "files": files,
        "bytes": tree_size(dest),
    }


def _last_lines(stderr: str, n: int = 3) -> str:
    lines = [
        line.strip()
        for line in stderr.splitlines()
        if line.strip() and not line.startswith("Cloning into")
    ]
    return " / ".join(lines[-n:]) or "(no message)"


async def _remove(path: Path) -> None:
    if path.exists():
        await asyncio.to_thread(shutil.rmtree, path, True)
