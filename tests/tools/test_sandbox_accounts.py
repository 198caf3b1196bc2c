"""The uid a sandbox's commands run as has a name and a home of its own (accounts.py).

Started by root, a sandbox runs as a host uid no account has (run_uid.py): in a
container `whoami` said "cannot find name for user ID", git refused to commit ("unable
to look up current user in the passwd file") and `getpass.getuser()` raised; under
bubblewrap the uid was whichever host account had uid 1000, its home unseen. Tried
here as a run makes its sandboxes, by root, through the sandbox's own commands.
"""

from __future__ import annotations

import ast
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.local import LocalSandbox
from tests.conftest import TEST_IMAGE

AS_ROOT = "a sandbox's own uid is claimed only by root" if os.geteuid() != 0 else None

WHO = (
    'whoami; id -un; id -gn; echo "$HOME"; test -O "$HOME" && echo home-is-mine; '
    "python3 -c 'import getpass, os; print(getpass.getuser(), os.path.expanduser(\"~\"))'"
)
GIT = (
    "git init -q && echo hello > notes.txt && git add notes.txt && "
    "git -c user.email=agent@example.com commit -q -m first && git log --format=%an:%s"
)


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A run's workspace as mlra makes it (root's, 0700), outside /tmp."""
    root = Path(tempfile.mkdtemp(prefix="mlra-accounts-test-", dir="/var/tmp"))
    os.chmod(root, 0o700)
    (root / "workspace").mkdir(mode=0o700)
    yield root / "workspace"
    shutil.rmtree(root, ignore_errors=True)


def _said_who(output: str) -> None:
    assert output.splitlines() == [
        "agent",
        "agent",
        "agent",
        "/tmp/home",
        "home-is-mine",
        "agent /tmp/home",
    ], output


@pytest.mark.skipif((AS_ROOT or isolation_problem()) is not None, reason=str(AS_ROOT))
async def test_a_bubblewrap_sandbox_made_by_root_has_a_user_and_git_commits(
    workspace: Path,
) -> None:
    box = LocalSandbox(workspace, SandboxSpec(), isolation_mode="bwrap")
    await box.start()
    try:
        who = await box.exec(["sh", "-c", WHO], timeout=60)
        assert who.exit_code == 0, who.output
        _said_who(who.output)
        git = await box.exec(["sh", "-c", GIT], timeout=60)
        assert git.exit_code == 0, git.output
        assert git.output.strip() == "mlra agent:first"
    finally:
        await box.close()
    # The repository is the sandbox's uid's on the host: root's git, told for this call
    # that it is safe, reads it (docs/security.md).
    log = await asyncio.to_thread(
        subprocess.run,
        ["git", "-c", f"safe.directory={workspace}", "-C", str(workspace), "log", "--format=%s"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert log.returncode == 0 and log.stdout == "first\n", log.stderr


@pytest.mark.skipif(AS_ROOT is not None, reason=str(AS_ROOT))
async def test_a_container_run_as_its_claimed_uid_has_a_user_and_a_home(
    workspace: Path, docker_host: str
) -> None:
    from mlra.tools.sandbox.docker_sandbox import DockerSandbox

    box: Any = DockerSandbox(workspace, SandboxSpec(), image=TEST_IMAGE, run_id="accounts-test")
    await box.start()
    try:
        assert box.uid != 0 and box.uid != 1000  # its claimed uid, which no account has
        who = await box.exec(["sh", "-c", WHO], timeout=60)
        assert who.exit_code == 0, who.output
        _said_who(who.output)
        # The image's own accounts are kept (root, nobody), the sandbox's added.
        users = await box.exec(["sh", "-c", "cut -d: -f1,3 /etc/passwd"], timeout=60)
        assert {"root:0", "nobody:65534", f"agent:{box.uid}"} <= set(users.output.split())
        has_git = await box.exec(["sh", "-c", "command -v git"], timeout=60)
        if has_git.exit_code == 0:  # the test image (Debian minbase) has none
            git = await box.exec(["sh", "-c", GIT], timeout=60)
            assert git.exit_code == 0 and git.output.strip() == "mlra agent:first", git.output
    finally:
        await box.close()


TAKEN_NAME = """
import asyncio, os, sys
from pathlib import Path
from mlra.tools.sandbox import accounts
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox

async def main() -> None:
    shared = accounts.bwrap_accounts(1000)[0].parent
    if sys.argv[2] != "shared" and not shared.name.startswith(accounts.OWN_PREFIX):
        os.chown(shared, 65534, 65534)  # as if another user had made it first
    box = LocalSandbox(Path(sys.argv[1]), SandboxSpec(disk_mb=0), isolation_mode="bwrap")
    await box.start()
    try:
        for _ in range(3):
            print((await box.exec(["whoami"], timeout=30)).output.strip(), flush=True)
        tmp = Path(os.environ["TMPDIR"])
        print(sorted(p.name for p in tmp.iterdir() if p.name.startswith("mlra-accounts-")))
    finally:
        await box.close()
    if sys.argv[2] == "killed":
        os.kill(os.getpid(), 9)

asyncio.run(main())
"""


@pytest.mark.skipif(AS_ROOT is not None, reason=AS_ROOT or "")
@pytest.mark.skipif(isolation_problem() is not None, reason=str(isolation_problem()))
def test_a_taken_accounts_folder_name_costs_one_folder_per_process_removed_after(
    workspace: Path,
) -> None:
    """Where another user had made the shared accounts folder's (predictable) name, each
    command's sandbox made a new folder of its own and none was removed: /tmp filled with
    `mlra-accounts-*`. Now one per process, removed when it exits, and every command
    still has its user. A killed one's was left until another process needed a folder
    of its own (on a machine running many batches, one per killed process piled up): now
    the next sandbox start of any process removes it."""
    tmp = workspace.parent / "tmp"
    tmp.mkdir(mode=0o755)
    env = {
        **os.environ,
        "TMPDIR": str(tmp),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }

    def run(how: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", TAKEN_NAME, str(workspace), how],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == (-9 if how == "killed" else 0), done.stderr
        return done.stdout.splitlines()

    def accounts_folders() -> list[str]:
        return sorted(p.name for p in tmp.iterdir() if p.name.startswith("mlra-accounts-"))

    # While it ran: the taken one and its own, however many commands.
    said = run("exits")
    assert said[:3] == ["agent"] * 3 and len(ast.literal_eval(said[3])) == 2, said
    (shared,) = accounts_folders()  # its own removed as it exited
    said = run("killed")
    assert said[:3] == ["agent"] * 3 and len(ast.literal_eval(said[3])) == 2, said
    assert len(accounts_folders()) == 2  # a killed process's is left...
    os.chown(tmp / shared, 0, 0)  # the shared name free again: the next needs none of its own
    said = run("shared")
    assert said[:3] == ["agent"] * 3, said
    assert ast.literal_eval(said[3]) == [shared], said  # ...and gone once the next one starts
    assert accounts_folders() == [shared]
