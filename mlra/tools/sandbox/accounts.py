"""A name and a home for the uid a sandbox's commands run as, where tools look them up.

A container runs as the host uid claimed for it (run_uid.py), which no account has, in
the image's /etc/passwd or anywhere: `whoami` said "cannot find name for user ID",
git refused to commit ("unable to look up current user in the passwd file"), and
tools that ask the account for its home (`~` in Python's expanduser where HOME is
unset, ssh, pip's fallbacks) were sent nowhere. Bubblewrap showed the host's
/etc/passwd, whose uid 1000 (the sandbox's inside its namespace) is whichever host
account has it, with a home the sandbox cannot see, or none (`getpass` raised). So each sandbox is
shown the accounts it would show, with its uid named `agent`, home `/tmp/home` (made
by that uid, so its own), bound read-only over /etc/passwd and /etc/group.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import Any

SANDBOX_USER = "agent"
"""The name `USER` says in a container (docker_sandbox.py), now its account's too."""
INSIDE_HOME = "/tmp/home"


def with_account(passwd: str, group: str, *, uid: int, gid: int) -> tuple[str, str]:
    """`passwd` and `group` as the sandbox shows them: any entry of the uid, the gid or
    the name `agent` replaced by the sandbox's own."""

    def kept(text: str, number: int) -> list[str]:
        out = []
        for line in text.splitlines():
            fields = line.split(":")
            if len(fields) >= 3 and (fields[0] == SANDBOX_USER or fields[2] == str(number)):
                continue
            out.append(line)
        return out

    users = kept(passwd, uid)
    users.append(f"{SANDBOX_USER}:x:{uid}:{gid}:mlra agent:{INSIDE_HOME}:/bin/sh")
    groups = kept(group, gid)
    groups.append(f"{SANDBOX_USER}:x:{gid}:")
    return "\n".join(users) + "\n", "\n".join(groups) + "\n"


def write_accounts(folder: Path, passwd: str, group: str) -> tuple[Path, Path]:
    """The two files in `folder`, readable by every uid (the sandbox's reads them)."""
    paths = (folder / "passwd", folder / "group")
    for path, text in zip(paths, (passwd, group), strict=True):
        fresh = path.with_name(f".{path.name}.{os.getpid()}")
        fresh.write_text(text, encoding="utf-8")
        os.chmod(fresh, 0o644)
        os.replace(fresh, path)
    return paths


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def bwrap_accounts(uid: int) -> tuple[Path, Path]:
    """The host's accounts with the sandbox's: in a folder named after their content, in
    the temporary folder (world-readable, as bubblewrap runs as the sandbox's own host
    uid where mlra is root), made once and shared by every sandbox showing the same."""
    passwd, group = with_account(_read("/etc/passwd"), _read("/etc/group"), uid=uid, gid=uid)
    digest = hashlib.sha256(f"{passwd}\0{group}".encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"mlra-accounts-{os.geteuid()}-{digest}"
    paths = (folder / "passwd", folder / "group")
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o755)
    if not _mine(folder):  # another user's at that name: a folder of this process's own
        return _own_accounts(digest, passwd, group)
    if all(p.is_file() for p in paths):
        return paths
    os.chmod(folder, 0o755)
    return write_accounts(folder, passwd, group)


OWN_PREFIX = "mlra-accounts-pid"
_own: tuple[int, Path, str] | None = None
"""(pid, folder, digest written) of this process's own accounts folder, made where
another user took the shared folder's name (which would otherwise be a way to choose the
accounts a sandbox shows). Made once per process, not once per command (/tmp filled up
with them), and removed when the process exits; a killed one's by the next sandbox start
of any process (sweep_gone), not left until another needs a folder of its own."""


def _own_accounts(digest: str, passwd: str, group: str) -> tuple[Path, Path]:
    global _own
    if _own is None or _own[0] != os.getpid() or not _mine(_own[1]):
        sweep_gone()
        # mkdtemp: a name no one could guess and take first, made 0700 then opened to
        # read; the sticky /tmp keeps others from renaming or removing it.
        folder = Path(tempfile.mkdtemp(prefix=f"{OWN_PREFIX}{os.getpid()}-"))
        os.chmod(folder, 0o755)
        if _own is None:
            atexit.register(_remove_own)
        _own = (os.getpid(), folder, "")
    pid, folder, written = _own
    paths = (folder / "passwd", folder / "group")
    if written != digest or not all(p.is_file() for p in paths):
        paths = write_accounts(folder, passwd, group)
        _own = (pid, folder, digest)
    return paths


def _remove_own() -> None:
    if _own is not None and _own[0] == os.getpid():  # not a forked child's to remove
        shutil.rmtree(_own[1], ignore_errors=True)


def sweep_gone() -> None:
    """Remove the own accounts folders of this user's processes that are gone (a killed
    mlra's), at every sandbox start (volume_settle.settle_before_use): a machine running
    many batches would otherwise keep one per killed process."""
    with contextlib.suppress(OSError):
        for folder in Path(tempfile.gettempdir()).glob(f"{OWN_PREFIX}*-*"):
            pid = folder.name.removeprefix(OWN_PREFIX).split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists() and _mine(folder):
                shutil.rmtree(folder, ignore_errors=True)


def _mine(folder: Path) -> bool:
    try:
        info = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def container_accounts(
    client: Any, image_id: str, folder: Path, *, uid: int, gid: int
) -> tuple[Path, Path]:
    """The image's accounts with the container's uid added, written in `folder` (one of
    the container's own, removed with it) for binding over its /etc/passwd and /etc/group."""
    passwd, group = image_accounts(client, image_id)
    return write_accounts(folder, *with_account(passwd, group, uid=uid, gid=gid))


_IMAGE_ACCOUNTS: dict[str, tuple[str, str]] = {}
"""The image's own /etc/passwd and /etc/group, by image id: read once per process."""


def image_accounts(client: Any, image_id: str) -> tuple[str, str]:
    """The image's /etc/passwd and /etc/group (empty where it has none), read from a
    container created and never started: the sandbox's own container binds its files
    over them, so they are read before it exists."""
    if image_id in _IMAGE_ACCOUNTS:
        return _IMAGE_ACCOUNTS[image_id]
    container = client.containers.create(image_id, command=["true"], network_mode="none")
    try:
        texts = [_from_archive(container, path) for path in ("/etc/passwd", "/etc/group")]
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)
    _IMAGE_ACCOUNTS[image_id] = (texts[0], texts[1])
    return _IMAGE_ACCOUNTS[image_id]


def _from_archive(container: Any, path: str) -> str:
    import docker.errors

    try:
        stream, _ = container.get_archive(path)
    except docker.errors.NotFound:
        return ""
    data = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.next()
        handle = tar.extractfile(member) if member is not None and member.isfile() else None
        return handle.read().decode("utf-8", "replace") if handle is not None else ""
