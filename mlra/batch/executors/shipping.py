"""Folders moved between the driver and a Ray node in parts, never whole in memory.

A task folder goes to a node once per content: it is packed by its content hash
and unpacked into a per-node cache (`~/.cache/mlra/tasks/<hash>`, the same path on
every node with the same home, so a run resumed elsewhere finds its task where
its log says). A run folder comes back as a stream of tar.gz chunks written to a
file before it is unpacked, so a large checkpoint needs disk, not memory.

A run folder holds the agent's workspace, so packing it must survive whatever shape
the agent gave it (tarfile's own `add` recurses, follows nothing but reads a sparse
40 GB file as 40 GB of zeros, and writes links the unpacking side then refuses): it
is walked by folder descriptors without recursion (tools/sandbox/trees.py), a sparse
file is written as a GNU sparse member (its data only; unpacking keeps the holes),
and what the other side could not unpack (a path too long to make, a link leading
out of the folder, a device) is left out and named in `LEFT_OUT` inside the folder.
Unpacking skips a member its filter refuses rather than losing the whole folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import posixpath
import queue
import stat
import tarfile
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

from mlra.tools.sandbox import sparse_files, trees

CHUNK = 8 * 2**20
"""Bytes per part: small enough to keep many in flight, big enough to keep Ray's per-object cost low."""
LEFT_OUT = "left-out-when-shipped.txt"
"""Written into a shipped folder when something in it could not be shipped."""
MAX_MEMBER_PATH = 3000
"""Bytes of a member's path at most: unpacked under a folder's own path, a longer one
would pass PATH_MAX (4,096) and fail to be made."""
MAX_MEMBER_DEPTH = 128
"""Folders a member lies below at most: tarfile's "data" filter resolves every member's
path link by link (`realpath`), which costs the cube of the depth."""
MAX_LEFT_OUT_LINES = 1000


def cache_root() -> Path:
    explicit = os.environ.get("MLRA_TASK_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mlra" / "tasks"


def content_hash(folder: Path) -> str:
    """Of every file's path, executable bit and bytes (and links' targets): not of mtimes,
    so the same task packed twice, or on two machines, has the same hash."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if "__pycache__" not in p.parts):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"F {rel} {os.access(path, os.X_OK)}\0".encode())
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(2**20), b""):
                    digest.update(block)
        elif path.is_dir():
            digest.update(f"D {rel}\0".encode())
    return digest.hexdigest()[:24]


def pack(folder: Path, dest: Path) -> None:
    """`folder`'s contents as a tar.gz file (members relative to it), `__pycache__` left out."""
    with tarfile.open(dest, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
        add_tree(tar, folder, "", skip=("__pycache__",))


def add_tree(
    tar: tarfile.TarFile, folder: Path, arcname: str, *, skip: tuple[str, ...] = ()
) -> list[str]:
    """Add `folder` (as `arcname`, or its contents at the top when it is empty) without
    recursion, following no link, holes kept; returns what was left out, which is also
    added as `LEFT_OUT` in the folder."""
    left_out: list[str] = []
    root = os.open(folder, trees.DIR_FLAGS)
    prefix = arcname + "/" if arcname else ""
    try:
        if arcname:
            tar.addfile(_info(arcname, os.fstat(root), tarfile.DIRTYPE))
        first: dict[tuple[int, int], str] = {}

        def enter(entry: trees.Entry) -> bool:  # what is left out was noted when visited
            return entry.name not in skip and _fits(prefix + entry.rel) is None

        stats = trees.WalkStats()
        for entry in trees.walk(root, enter=enter, stats=stats):
            name = prefix + entry.rel
            if entry.name in skip:
                continue
            problem = _fits(name)
            if problem is not None:
                _note(left_out, f"{name[:200]!r}{'...' if len(name) > 200 else ''}: {problem}")
                continue
            mode = entry.st.st_mode
            if stat.S_ISDIR(mode):
                tar.addfile(_info(name, entry.st, tarfile.DIRTYPE))
            elif stat.S_ISLNK(mode):
                _add_link(tar, entry, name, prefix, left_out)
            elif stat.S_ISREG(mode):
                key = (entry.st.st_dev, entry.st.st_ino)
                if key in first:
                    info = _info(name, entry.st, tarfile.LNKTYPE)
                    info.linkname = first[key]
                    tar.addfile(info)
                    continue
                if _add_file(tar, entry, name) and entry.st.st_nlink > 1:
                    first[key] = name
            else:
                _note(left_out, f"{name!r}: not a file, folder or link")
        left_out += stats.summary()
        if left_out:
            text = (
                "Left out when this folder was shipped between machines (mlra batch):\n"
                + "".join(f"- {line}\n" for line in left_out)
            ).encode("utf-8", "backslashreplace")
            info = tarfile.TarInfo(prefix + LEFT_OUT)
            info.size = len(text)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(text))
    finally:
        os.close(root)
    return left_out


def _note(left_out: list[str], line: str) -> None:
    if len(left_out) < MAX_LEFT_OUT_LINES:
        left_out.append(line)
    elif len(left_out) == MAX_LEFT_OUT_LINES:
        left_out.append("... and more")


def _fits(name: str) -> str | None:
    """Why a member of this path could not be unpacked, or None."""
    if len(os.fsencode(name)) > MAX_MEMBER_PATH:
        return f"a path longer than {MAX_MEMBER_PATH:,} bytes (with what it holds)"
    if name.count("/") > MAX_MEMBER_DEPTH:
        return f"deeper than {MAX_MEMBER_DEPTH} folders (with what it holds)"
    return None


def _info(name: str, st: os.stat_result, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = int(st.st_mtime)
    return info


def _add_link(
    tar: tarfile.TarFile, entry: trees.Entry, name: str, prefix: str, left_out: list[str]
) -> None:
    """A link, where the unpacking side's "data" filter takes it: relative and leading
    nowhere above the shipped folder."""
    try:
        target = os.readlink(entry.name, dir_fd=entry.dir_fd)
    except OSError:
        return
    where = posixpath.normpath(posixpath.join(posixpath.dirname(entry.rel), target))
    if target.startswith("/") or where == ".." or where.startswith("../"):
        _note(left_out, f"{name!r}: a link to {target!r}, outside the folder")
        return
    info = _info(name, entry.st, tarfile.SYMTYPE)
    info.linkname = target
    tar.addfile(info)


def _add_file(tar: tarfile.TarFile, entry: trees.Entry, name: str) -> bool:
    fd = trees.open_in(entry.dir_fd, entry.name)
    if fd is None:
        return False  # gone, or no longer a file
    try:
        st = os.fstat(fd)
        info = _info(name, st, tarfile.REGTYPE)
        spans = sparse_files.data_extents(fd, st.st_size) if sparse_files.is_sparse(st) else None
        if spans is None or sum(end - start for start, end in spans) * 2 > st.st_size:
            info.size = st.st_size
            tar.addfile(info, _Reader(fd, [(0, st.st_size)]))
            return True
        # GNU sparse format 1.0 (PAX): the map of data spans, then the data alone.
        head = f"{len(spans)}\n" + "".join(f"{a}\n{b - a}\n" for a, b in spans)
        mapped = head.encode().ljust(-(-len(head) // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE, b"\0")
        folder, base = posixpath.split(name)
        info.name = posixpath.join(folder, "GNUSparseFile.0", base)
        info.pax_headers = {
            "GNU.sparse.major": "1",
            "GNU.sparse.minor": "0",
            "GNU.sparse.name": name,
            "GNU.sparse.realsize": str(st.st_size),
        }
        info.size = len(mapped) + sum(end - start for start, end in spans)
        tar.addfile(info, _Reader(fd, spans, mapped))
        return True
    finally:
        os.close(fd)


class _Reader(io.RawIOBase):
    """`head`, then the spans of an open file, read in order (what a member holds)."""

    def __init__(self, fd: int, spans: list[tuple[int, int]], head: bytes = b"") -> None:
        super().__init__()
        self.fd = fd
        self.pending = list(reversed(spans))
        self.head = head

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes, as many as there are (tarfile takes a short read for an end)."""
        if size is None or size < 0:
            size = trees.CHUNK
        out = bytearray()
        if self.head:
            out += self.head[:size]
            self.head = self.head[size:]
        while len(out) < size and self.pending:
            start, end = self.pending[-1]
            if start >= end:
                self.pending.pop()
                continue
            want = min(size - len(out), end - start)
            data = os.pread(self.fd, want, start)
            if not data:  # shrank since it was looked at: zeros, as the size was told
                data = bytes(want)
            self.pending[-1] = (start + len(data), end)
            out += data
        return bytes(out)


def file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(CHUNK), b"")


def unpack(chunks: Iterable[bytes], dest: Path) -> None:
    """Write the parts to a file beside `dest`, then unpack it into `dest` (created)."""
    dest.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".incoming-", suffix=".tar.gz", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        with tarfile.open(name, "r:gz") as tar:
            tar.extractall(dest, filter=_data_or_skip)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def _data_or_skip(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's "data" filter, skipping a member it refuses (an archive of an older
    mlra could hold a link out) instead of losing the whole folder for it."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


def cached(digest: str, fetch: Iterable[bytes], root: Path | None = None) -> Path:
    """The task folder of this hash on this node: unpacked from `fetch` the first time.

    Unpacked beside its final place and renamed into it, so two runs fetching the
    same task at once on one node both end with a whole folder."""
    root = root or cache_root()
    target = root / digest
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=root))
    try:
        unpack(fetch, staging)
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():  # not another run's rename that won: a real failure
                raise
    finally:
        trees.remove_tree(staging, ignore_errors=True)
    return target


def stream_tar(folder: Path, arcname: str, *, depth: int = 4) -> Iterator[bytes]:
    """`folder` as tar.gz parts, produced by a thread at most `depth` parts ahead (the
    thread gives up when the consumer stops taking parts)."""
    parts: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=depth)
    stopped = threading.Event()

    def put(item: bytes | BaseException | None) -> None:
        while not stopped.is_set():
            try:
                parts.put(item, timeout=0.5)
                return
            except queue.Full:
                continue
        raise _Abandoned

    class _Writer:
        def __init__(self) -> None:
            self.buffer = bytearray()

        def write(self, data: bytes) -> int:
            self.buffer += data
            while len(self.buffer) >= CHUNK:
                put(bytes(self.buffer[:CHUNK]))
                del self.buffer[:CHUNK]
            return len(data)

    def produce() -> None:
        writer = _Writer()
        try:
            with tarfile.open(
                fileobj=cast(Any, writer), mode="w|gz", format=tarfile.PAX_FORMAT
            ) as tar:
                add_tree(tar, folder, arcname)
            if writer.buffer:
                put(bytes(writer.buffer))
            put(None)
        except _Abandoned:
            return
        except BaseException as exc:  # handed to the consumer, which raises it
            with contextlib.suppress(_Abandoned):
                put(exc)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        while True:
            part = parts.get()
            if part is None:
                break
            if isinstance(part, BaseException):
                raise part
            yield part
    finally:
        stopped.set()
        thread.join()


class _Abandoned(Exception):
    """The consumer of a stream_tar stopped taking parts."""
