"""What a `github_clone` request asks for, read before anything is fetched.

The URL the agent gave becomes an https git URL (a github.com/OWNER/REPO/tree/BRANCH
link, a bare github.com/..., GitHub's ssh form), or is refused with what to write instead:
another host's ssh address, a URL that names a file, not a repository. The ref and the
folder name under repos/ are checked as text here, so neither can become an option to git
or a path out of repos/; the host is the fetch policy's to judge (tools/fetch/policy.py),
and the clone itself is tools/github.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from mlra.tools.fetch.policy import FetchRefused
from mlra.tools.sandbox.base import SandboxError

REPOS_DIR = "repos"
"""The workspace folder every clone goes under."""
SCP_LIKE = re.compile(r"^(?P<user>[\w.-]+)@(?P<host>[\w.-]+):(?P<path>[\w./~-]+)$")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
NOT_GIT_SUFFIXES = (".pdf", ".zip", ".tar", ".gz", ".tgz", ".html", ".htm", ".txt", ".json")


@dataclass
class ClonePlan:
    """What to clone (an https git URL), at which ref, into which folder under repos/;
    the deadline and time limit are set when the clone starts."""

    url: str
    ref: str | None
    name: str
    deadline: float = 0.0
    limit_s: float = 0.0


def plan_clone(url: str, ref: str | None, name: str | None) -> ClonePlan:
    """The URL to clone, the ref and the folder name; refuses what is not an https git URL
    (the policy then checks the host)."""
    raw = url.strip()
    if re.match(r"^(www\.)?(github|gitlab)\.com/", raw):
        raw = "https://" + raw
    scp = SCP_LIKE.match(raw)
    if scp is not None and scp["host"].lower() == "github.com":
        raw = f"https://github.com/{scp['path']}"  # GitHub's ssh form names the same repo
    elif scp is not None:
        raise FetchRefused(
            f"{url!r} is an ssh address; mlra clones for the agent over https:// only "
            "(write https://HOST/OWNER/REPO)"
        )
    if ref is not None:
        ref = ref.strip() or None
        if ref is not None and (ref.startswith("-") or any(c.isspace() for c in ref)):
            raise SandboxError(f"{ref!r} is not a branch, tag or commit name")
    parts = urlsplit(raw)
    if not parts.scheme or (not parts.netloc and parts.scheme.lower() != "file"):
        raise SandboxError(
            f"{url!r} is not a git URL; github_clone takes a repository URL such as "
            "https://github.com/OWNER/REPO"
        )
    path = parts.path
    if path.lower().endswith(NOT_GIT_SUFFIXES):
        raise SandboxError(
            f"{url!r} points to a file, not a git repository; download files with bash "
            "(curl) if the sandbox has network, or clone the repository that holds it"
        )
    target = raw
    if parts.scheme.lower() in {"https", "http"} and (parts.hostname or "").lower() in {
        "github.com",
        "www.github.com",
    }:
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
    return ClonePlan(url=target, ref=ref, name=name)
