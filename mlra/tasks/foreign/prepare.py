"""Preparing a foreign task before its run: the task folder copied into the cache
(`$MLRA_CACHE_DIR/prepared/<task>-<content hash>/`, outside any workspace) and its
`scripts/prepare.py` run there, host-side, once: a second run of the same folder finds
the copy and starts at once. The copy is the task the run reads (its `env/` the
starter, its `scripts/` the hidden files and the grader's), so the benchmark's own
folder is never written to.

prepare.py runs as the benchmarks run it (`python prepare.py` in `scripts/`, with the
network, unconfined), with the model providers' keys left out of its environment.
Its stdin holds empty lines and then ends: MLAgentBench's Kaggle tasks pause on
`input("Consent to the competition at ...; Press any key")`, which an empty line
answers as the Enter key does (the consent itself is given on the competition's
page; without it Kaggle's download fails, and so does prepare.py); a question it
asks beyond those lines meets the end of input. A failure is one line naming the
log that holds its whole output.

A prepare.py that exits 0 has not necessarily prepared anything: MLAgentBench's babylm
runs `wget` and `unzip` through subprocess.run and ignores their failures. So its
output is read for the download tools' and Python's own error lines, and the copy for
data folders left empty; either is a failed prepare, not kept (a copy cached before
this check is checked again by `mlra tasks prepare` and removed where it fails).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from mlra.tasks.foreign.common import (
    MARKER,
    SKIPPED,
    Layout,
    Marker,
    content_hash,
    locked,
    prepared_dir,
)
from mlra.tasks.foreign.loader import detect, marker, task_name
from mlra.tasks.foreign.mlrcbench import SHIM
from mlra.tasks.network_reads import network_downloads, reaching
from mlra.tasks.spec import TaskError, TaskSpec, load_task
from mlra.tools.sandbox.env import is_secret_name

ENTER_PRESSES = b"\n" * 64
"""prepare.py's stdin: its "Press any key" pauses answered, no interaction possible."""

DOWNLOAD_ERRORS = re.compile(
    r"unable to resolve host address"  # wget
    r"|\bfailed: "  # wget: "failed: Name or service not known", "... failed: Connection refused"
    r"|cannot find or open"  # unzip, of a zip that was never downloaded
    r"|\b40[134] (?:Not Found|Forbidden|Unauthorized)"  # wget's "ERROR 404: Not Found" too
    r"|ERROR 40\d"
    r"|curl: \(\d+\)"  # curl: (6) Could not resolve host
    r"|Could not resolve host"
    r"|Temporary failure in name resolution"
    r"|Traceback \(most recent call last\)"
    r"|End-of-central-directory signature not found"  # unzip of an HTML error page
    r"|gzip: .*not in gzip format"
    r"|tar: Error is not recoverable",
    re.IGNORECASE,
)
"""Lines a download that failed leaves in prepare.py's output although it exits 0."""

KAGGLE_FAILURES = (
    (
        re.compile(r"Authentication required to call the Kaggle API|401 - Unauthorized"),
        "Kaggle has no credentials here: `kaggle auth login`, or an API token in "
        "~/.kaggle/kaggle.json",
    ),
    (
        re.compile(r"403 - Forbidden"),
        "Kaggle refused the download: accept the competition's rules on its page first",
    ),
)
"""What the `kaggle` command prints when it fails, and what to do about it."""

CONSENT = re.compile(r"^.*Press any key(?: after you have accepted the rules online\.)?")
"""MLAgentBench's Kaggle consent prompt, which the next output follows on its line."""

NETWORK_FAILURES = re.compile(
    r"Max retries exceeded|Failed to resolve|NameResolutionError|Network is unreachable"
    r"|Connection refused|unable to resolve host address|Could not resolve host"
    r"|Temporary failure in name resolution",
    re.IGNORECASE,
)
"""A download's line saying that it could not reach its server."""

DATA_FOLDER_NAMES = {"data", "dataset", "datasets", "raw", "input", "inputs", "images"}
"""An empty folder of one of these names is a data folder left empty, even where the
benchmark's own folder had it already (empty folders are not in a git checkout, so
one found there came with the files and is checked all the same)."""

OUTPUT_FOLDER_NAMES = {"output", "outputs", "logs", "log", "submission", "results", "checkpoints"}
"""Folders a prepare.py makes empty on purpose, for the task's code to write into."""


def prepared(task: TaskSpec, *, echo: Callable[[str], object] = print) -> TaskSpec:
    """`task` read from its prepared copy, made first where there is none yet."""
    if marker(task.root) is not None:
        return task
    source = task.root
    layout = detect(source)
    if layout is None:
        return task
    name = task_name(source)
    digest = content_hash(source)
    dest = prepared_dir(name, digest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with locked(dest.parent / f"{dest.name}.lock"):
            if marker(dest) is None:
                _made(source, dest, layout, name, digest, echo)
    except OSError as exc:  # the cache folder cannot be written ($MLRA_CACHE_DIR names another)
        raise TaskError(f"{source}: cannot prepare it in {dest.parent}: {exc}") from None
    return load_task(dest)


def _made(
    source: Path, dest: Path, layout: Layout, name: str, digest: str, echo: Callable[[str], object]
) -> None:
    """The prepared copy made, or why not as one line (a full disk, a folder it cannot
    read), never a traceback."""
    record = Marker(layout=layout, name=name, source=str(source), hash=digest, prepared=False)
    try:
        _make(source, dest, record, echo)
    except OSError as exc:
        shutil.rmtree(dest.with_name(dest.name + ".partial"), ignore_errors=True)
        raise TaskError(f"{source}: could not prepare a copy in {dest.parent}: {exc}") from None


def _make(source: Path, dest: Path, record: Marker, echo: Callable[[str], object]) -> None:
    partial = dest.with_name(dest.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)  # left by a preparation that was killed
    shutil.copytree(source, partial, symlinks=True, ignore=shutil.ignore_patterns(*SKIPPED))
    if record.layout == "mlrcbench" and not (partial / "env" / SHIM.name).exists():
        shutil.copytree(SHIM, partial / "env" / SHIM.name, ignore=shutil.ignore_patterns(*SKIPPED))
    script = partial / "scripts" / "prepare.py"
    if script.is_file():
        log = dest.with_name(dest.name + ".prepare.log")
        echo(f"preparing {record.name}: running scripts/prepare.py once (kept in {dest})")
        env = {
            k: v for k, v in os.environ.items() if not is_secret_name(k) or k.startswith("KAGGLE_")
        }
        with log.open("wb") as out:
            proc = subprocess.run(
                [sys.executable, "prepare.py"],
                cwd=script.parent,
                input=ENTER_PRESSES,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                check=False,
            )
        if proc.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            lines = [
                ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()
            ]
            last = lines[-1] if lines else "no output"
            raise TaskError(
                f"{source}: scripts/prepare.py failed (exit {proc.returncode}): {last[:300]}"
                f"{missing_command(last)}{earlier_failure(lines[:-1])} (its whole output: {log})"
            )
        problem = prepare_problem(partial, log, source)
        if problem is not None:
            shutil.rmtree(partial, ignore_errors=True)
            raise TaskError(
                f"{source}: scripts/prepare.py exited 0 but {problem}, so the copy is not "
                f"kept as prepared (its whole output: {log})"
            )
        record.prepared = True
    (partial / MARKER).write_text(record.model_dump_json(indent=2))
    partial.rename(dest)


def prepare_log(copy: Path) -> Path:
    """Where the output of the prepare.py that made `copy` is kept (beside it)."""
    return copy.with_name(copy.name.removesuffix(".partial") + ".prepare.log")


def prepare_problem(copy: Path, log: Path, source: Path | None) -> str | None:
    """Why a prepare.py that exited 0 did not prepare `copy`, or None: Kaggle's refusal,
    an error line a failed download leaves in its output, or a data folder left empty
    (one it made, absent from `source`, or one named as data folders are). A line saying
    a server could not be reached is no failure on its own: huggingface_hub and pip
    print one for each retry and then succeed; it only explains a failure found."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        text = ""
    lines = text.splitlines()
    refused = kaggle_failure(lines)
    if refused is not None:
        return f"its download failed: {refused}"
    problem = None
    for line in lines:
        if DOWNLOAD_ERRORS.search(line):
            problem = f"its output has a download error ({line.strip()[:200]!r})"
            break
    empty = empty_data_folders(copy, source) if problem is None else []
    if empty:
        shown = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
        problem = (
            f"left {'an empty data folder' if len(empty) == 1 else 'empty data folders'}: {shown}"
        )
    if problem is None:
        return None
    failed = failed_download(lines)
    return f"its download failed: {failed}" if failed is not None else problem


def empty_data_folders(copy: Path, source: Path | None) -> list[str]:
    """The outermost folders of `copy` (under env/ and scripts/) that hold no file."""
    empty: list[str] = []
    for top in ("env", "scripts"):
        base = copy / top
        if not base.is_dir():
            continue
        for dirpath, dirnames, _ in os.walk(base):
            here = Path(dirpath)
            keep = []
            for name in sorted(dirnames):
                folder = here / name
                if name in SKIPPED or folder.is_symlink():
                    continue
                rel = folder.relative_to(copy)
                if _holds_no_file(folder) and (
                    name.lower() in DATA_FOLDER_NAMES
                    or (
                        name.lower() not in OUTPUT_FOLDER_NAMES
                        and (source is None or not (source / rel).exists())
                    )
                ):
                    empty.append(rel.as_posix())
                else:
                    keep.append(name)
            dirnames[:] = keep
    return empty


def _holds_no_file(folder: Path) -> bool:
    return not any(p.is_file() or p.is_symlink() for p in folder.rglob("*"))


def recheck(task: TaskSpec) -> str | None:
    """A prepared copy checked again as a fresh prepare is (`mlra tasks prepare`): one
    cached before the check existed may hold nothing. Where it fails, the copy is
    removed (so the next run prepares afresh) and the line saying so returned."""
    found = marker(task.root)
    if found is None or not found.prepared:
        return None
    copy = task.root
    log = prepare_log(copy)
    source = Path(found.source)
    problem = prepare_problem(copy, log, source if source.is_dir() else None)
    if problem is None:
        return None
    with locked(copy.parent / f"{copy.name}.lock"):
        shutil.rmtree(copy, ignore_errors=True)
    return (
        f"{copy}: removed: the scripts/prepare.py that made it exited 0 but {problem} "
        f"(its whole output: {log})"
    )


def missing_command(last: str) -> str:
    """What a prepare.py that ran a command this machine lacks failed of, in words:
    MLAgentBench's Kaggle tasks run `kaggle`, and Python says only "No such file or
    directory: 'kaggle'"."""
    found = re.search(r"No such file or directory: '([\w.+-]+)'", last)
    if found is None or shutil.which(found[1]) is not None:
        return ""
    name = found[1]
    how = " (pip install kaggle, with your Kaggle API token in ~/.kaggle/kaggle.json)"
    return (
        f"; it runs the command `{name}`, which is not installed{how if name == 'kaggle' else ''}"
    )


def earlier_failure(lines: list[str]) -> str:
    """The first failure a prepare.py's output shows before its last line, in words: a
    Kaggle task whose `kaggle` download failed (no credentials, no network) goes on to
    unzip nothing and ends reading a csv that is not there, so its last line alone
    ("No such file or directory: '../env/train.csv'") names a consequence, not the cause."""
    failed = failed_download(lines)
    if failed is not None:
        return f"; the download failed before it: {failed}"
    for whole in lines:
        line = CONSENT.sub("", whole).strip()
        if DOWNLOAD_ERRORS.search(line.replace("Traceback (most recent call last)", "")):
            return f"; an earlier step failed first ({line[:160]!r})"
    return ""


def failed_download(lines: list[str]) -> str | None:
    """Why a download in prepare.py's output failed, where it says: Kaggle's credentials
    or rules, or no way to its server. Only for a failure already known: a retry's
    line names no way to its server too, and the retry may then succeed."""
    refused = kaggle_failure(lines)
    if refused is not None:
        return refused
    for whole in lines:
        line = CONSENT.sub("", whole).strip()  # the consent prompt ends with no newline
        if NETWORK_FAILURES.search(line):
            return (
                f"it could not reach its server, and prepare.py needs the network ({line[:160]!r})"
            )
    return None


def kaggle_failure(lines: list[str]) -> str | None:
    """What Kaggle's refusal in prepare.py's output (no credentials, rules not accepted)
    asks for, or None: a refused download never succeeds later in the same run."""
    for whole in lines:
        line = CONSENT.sub("", whole).strip()
        for pattern, said in KAGGLE_FAILURES:
            if pattern.search(line):
                return said
    return None


DOWNLOADERS = {"kaggle", "wget", "curl", "gsutil", "gdown", "aws"}
"""Commands a prepare.py downloads with: it needs the network, where mlra's runs have none.
`git` is not one: `git apply` of a patch downloads nothing."""


def prepare_commands(root: Path) -> list[str]:
    """The commands a folder's scripts/prepare.py runs, read with `ast`, never run: the
    first word of each literal `subprocess.run([...])` (call, check_call, Popen...) and
    `os.system("...")`, in order, each once."""
    try:
        tree = ast.parse((root / "scripts" / "prepare.py").read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = ast.unparse(node.func)
        first = node.args[0]
        word = None
        if name.startswith("subprocess.") and isinstance(first, ast.List) and first.elts:
            head = first.elts[0]
            if isinstance(head, ast.Constant) and isinstance(head.value, str):
                word = head.value
        elif name == "os.system" and isinstance(first, ast.Constant):
            word = str(first.value).split(maxsplit=1)[0] if str(first.value).strip() else None
        if word and word not in found:
            found.append(word)
    return found


def prepare_needs(root: Path) -> tuple[list[str], list[str]]:
    """What a folder's prepare.py, not run yet, downloads with (its words for `tasks
    show`: the commands it runs, and its own Python's downloads, tasks/network_reads.py)
    and which of those commands this machine lacks (each a blocker: the prepare
    would fail at once). Empty once prepared, where it runs none, and for a task folder
    of mlra's own: `mlra tasks import` keeps prepare.py among the hidden files of the
    task it prepared, and a run of that folder never runs it."""
    if (
        detect(root) is None
        or marker(root) is not None
        or not (root / "scripts" / "prepare.py").is_file()
    ):
        return [], []
    downloads, missing = [], []
    for word in prepare_commands(root):
        if word not in DOWNLOADERS:
            continue
        kaggle = ", Kaggle credentials and the competition's rules accepted on its page"
        downloads.append(
            f"it downloads with `{word}`, which needs the network{kaggle if word == 'kaggle' else ''}"
        )
        if shutil.which(word) is None:
            how = " (pip install kaggle, with your Kaggle API token)" if word == "kaggle" else ""
            missing.append(f"its scripts/prepare.py runs `{word}`, which is not installed{how}")
    # Its Python may download too (`requests.get`, `tfds.load`, `gs://`): said, never a
    # blocker (a static reading: the fetch may have a local fallback, or never run).
    script = root / "scripts" / "prepare.py"
    for found in network_downloads([script], root, [root / "env"]):
        tail = "" if found.sends else ", which needs the network"  # said already
        downloads.append(f"it {reaching([found])} with {found.what}{tail}")
    return downloads, missing
