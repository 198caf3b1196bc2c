"""How a batch folder names its runs: a readable part and a suffix no run can compute.

A batch run's id is `<task>__<model>__s<seed>-<mac>`: the readable part is for
people and reports, and `<mac>` is 64 bits of HMAC-SHA256 of the run's task,
model and seed under a key the batch folder keeps (`.mlra-batch-key`, 0600).
An agent in one run of a batch knows the batch's tasks, models and seeds, so
without the suffix it could name its neighbours' folders exactly; with it, it
needs a key that sits outside every sandbox's view (a sandbox sees only its own
workspace, and the key is readable by its owner only).

The same command run again computes the same ids from the same key, so resume,
retries (`retired/<run-id>__a<n>`), `logs/<run-id>.*` and `mlra report` (which
reads the run folders alone and needs no key) find the same folders. Only the
driver computes ids: a Ray node is handed each run's id in its job, so the key
never leaves the driver's batch folder.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from mlra.batch.errors import BatchError

KEY_FILE = ".mlra-batch-key"
KEY_BYTES = 32
MAC_HEX = 16
"""Hex digits of the suffix: 64 bits, as standalone run ids have (`agent/setup/run_setup.py`)."""
READ_TRIES = 20
"""Reads of a key file found short: on storage without hard links, a racing driver
creates it with O_EXCL and writes it a moment later."""

_LEGACY = re.compile(r".+__.+__s\d+")
_KEYED = re.compile(rf".+__.+__s\d+-[0-9a-f]{{{MAC_HEX}}}")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def readable_id(task_name: str, model: str, seed: int) -> str:
    """What people read in a run id; on its own, the id of a run in a legacy folder."""
    return f"{slug(task_name)}__{slug(model)}__s{seed}"


def without_mac(run_id: str) -> str:
    """The readable part of a batch run's id (`tiny-lm__baseline__s1`), for a line with
    room for little else: within one batch it names the run as well as the whole id."""
    return run_id.rsplit("-", 1)[0] if _KEYED.fullmatch(run_id) else run_id


@dataclass(frozen=True)
class RunNames:
    """The naming of one batch folder's runs."""

    key: bytes | None
    """None: a legacy folder, whose runs keep the ids they were started under."""

    @property
    def legacy(self) -> bool:
        return self.key is None

    def run_id(self, task_name: str, model: str, seed: int) -> str:
        readable = readable_id(task_name, model, seed)
        if self.key is None:
            return readable
        # The raw names, not their slugs: two models that slug alike still differ here.
        message = json.dumps(["mlra-batch-run/1", task_name, model, seed]).encode()
        mac = hmac.new(self.key, message, hashlib.sha256).hexdigest()[:MAC_HEX]
        return f"{readable}-{mac}"


def run_names(out: Path) -> RunNames:
    """The folder's naming: its key, made now (the folder with it) for a new batch.

    A folder made before run ids were keyed (runs named `<task>__<model>__s<seed>`,
    no key file) keeps those names: giving it a key now would start a second set
    of runs beside the first instead of continuing them, and its runs' names are
    already known to whoever could read them. A folder whose runs carry a suffix
    but whose key is gone is refused: its runs could not be found again.
    """
    path = out / KEY_FILE
    key = _read_key(path)
    if key is not None:
        return RunNames(key)
    names = _run_names_in(out)
    if any(_LEGACY.fullmatch(n) for n in names):
        return RunNames(None)
    if any(_KEYED.fullmatch(n) for n in names):
        raise BatchError(
            f"{out}: its runs are named with the key in {KEY_FILE}, which is gone; "
            "restore that file to carry the batch on, or give another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    return RunNames(_create_key(path))


def _run_names_in(out: Path) -> set[str]:
    """The run ids the folder holds traces of: run folders, retired attempts, logs, cards."""
    names: set[str] = set()
    for sub in ("runs", "retired", "logs"):
        with contextlib.suppress(OSError):
            for entry in os.scandir(out / sub):
                name = entry.name
                if sub == "retired":
                    name = re.sub(r"__a\d+$", "", name)
                elif sub == "logs":
                    name = re.sub(r"\.(log|json)$", "", name)
                names.add(name)
    return names


def _read_key(path: Path) -> bytes | None:
    """The key in the file, None when there is no file."""
    for _ in range(READ_TRIES):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BatchError(f"cannot read the batch key {path}: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise BatchError(f"{path} is not a file")
            if info.st_mode & 0o077:  # copied with the umask's bits: private again
                with contextlib.suppress(OSError):
                    os.fchmod(fd, 0o600)
            text = os.read(fd, 4 * KEY_BYTES).decode("ascii", "replace").strip()
        finally:
            os.close(fd)
        if len(text) == 2 * KEY_BYTES:
            try:
                return bytes.fromhex(text)
            except ValueError:
                break
        if text:
            break
        time.sleep(0.05)  # another driver's O_EXCL file, not yet written
    raise BatchError(f"{path} holds no batch key; restore it, or give another --out")


def _create_key(path: Path) -> bytes:
    """A new key in a private file, or the key of a driver that made it first.

    Written whole to a private file of its own, then linked into place: the link
    fails when the key exists, so two drivers starting the same batch at once
    agree, and no reader ever sees half a key.
    """
    key = secrets.token_bytes(KEY_BYTES)
    data = (key.hex() + "\n").encode()
    tmp = path.with_name(f"{KEY_FILE}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            _create_without_links(path, data)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    found = _read_key(path)
    if found is None:
        raise BatchError(f"the batch key {path} vanished as it was made")
    return found


def _create_without_links(path: Path, data: bytes) -> None:
    """Storage with no hard links: O_EXCL decides who makes it (readers wait for its bytes)."""
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except FileExistsError:
        return
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
