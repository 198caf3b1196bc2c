"""What every `mlra` subcommand shares: exit codes, the one-line usage error, and
argument types that answer bad input in one line (exit status 2).

Imported by the command line's modules (cli, batch_cli, resume_cli, runs_cli),
none of which imports another's private helpers.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, cast

from mlra.exit_status import EXIT_API_UNREACHABLE, EXIT_SERVER_DOWN, EXIT_USAGE
from mlra.sizes import parse_size_mb
from mlra.terminal_text import printable

if TYPE_CHECKING:
    from mlra.tools.sandbox.backends import SandboxBackend, SandboxRequest

EXIT_OK, EXIT_FAILED = 0, 1
EXIT_INTERRUPTED = 130
"""Ctrl-C, as shells report a process ended by SIGINT (128 + 2)."""


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit status 2."""

    exit_status = EXIT_USAGE


class ServerDown(UsageError):
    """The `--base-url` server nothing answers at: one line, as bad input is said, but
    its own exit status, by which a batch knows to wait for it (not by the words)."""

    exit_status = EXIT_SERVER_DOWN


class ApiUnreachable(UsageError):
    """A vendor's API this machine cannot connect to (no network): its own exit status,
    by which a batch knows no wait of its mends it."""

    exit_status = EXIT_API_UNREACHABLE


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # `--memory -1g`, `--time-limit -5m`: a value its type refuses in words, where
        # argparse took only a plain number so and said "expected one argument".
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(printable(f"mlra: {message} (see `{self.prog} --help`)") + "\n")
        raise SystemExit(EXIT_USAGE)


def positive_int(text: str) -> int:
    return _whole(text, 1, "must be positive")


def nonnegative_int(text: str) -> int:
    return _whole(text, 0, "must not be negative")


def _whole(text: str, least: int, below: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} {below}")
    return value


def finite_float(text: str) -> float:
    """A number, refusing `nan` and `inf` (which Python's float() reads): a budget of
    `nan` compares false with everything, so it would never end the run."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_float(text: str) -> float:
    value = finite_float(text.lstrip("$"))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def temperature(text: str) -> float:
    value = finite_float(text)
    if not 0 <= value <= 2:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range (0 to 2)")
    return value


def duration(text: str) -> float:
    from mlra.durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gpus(text: str) -> str:
    value = text.strip()
    ids = [g.strip() for g in value.split(",")]
    if value.lower() in ("all", "none") or (value and all(ids)):
        return value.lower() if value.lower() in ("all", "none") else ",".join(ids)
    raise argparse.ArgumentTypeError(f"{text!r}: use all, none or GPU ids such as 0,2")


def size_mb(text: str, *, least_mb: int, example: str) -> int:
    """A size as `mlra/sizes.py` reads it, for argparse."""
    try:
        return parse_size_mb(text, least_mb=least_mb, example=example)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def memory_mb(text: str) -> int:
    """A memory limit: at least 6 MB (a container's least), or none (0)."""
    return size_mb(text, least_mb=6, example="512m, 16g")


def disk_mb(text: str) -> int:
    """A disk quota: at least 1 MB, or none (0)."""
    return size_mb(text, least_mb=1, example="500m, 50g")


def check_disk_fits(disk: int | None, runs_dir: Path) -> None:
    """A `--disk` the runs disk cannot set aside whole is refused before the run folder is
    made, as the volume would refuse it once the sandbox starts (tools/sandbox/disk_claim.py):
    the quota would take the reserve the logs and grading need. Where no volume can be
    made the du watcher polls the quota and sets nothing aside, so nothing is refused."""
    if not disk:
        return
    from mlra.tools.sandbox import volume

    if volume.unavailable() is not None:
        return
    from mlra.tools.sandbox.default_limits import disk_reserve_mb, free_mb

    free, reserve = free_mb(runs_dir), disk_reserve_mb(runs_dir)
    if free - disk < reserve:
        raise UsageError(
            f"--disk {disk:,} MB would leave {max(0, free - disk):,} MB free on the runs "
            f"disk, under the {reserve:,} MB it keeps for the logs, grading and other runs: "
            f"ask for at most {max(0, free - reserve):,} MB, or free space"
        )


def check_isolation(isolation: str, model: str, *, network: bool = False) -> None:
    """Refuse, before anything is created, a run whose agent would go unconfined (the
    local backend's preflight, tools/sandbox/local_backend.py); a baseline run that may
    go on unconfined is warned about."""
    from mlra.tools.sandbox.backends import SandboxRequest
    from mlra.tools.sandbox.local_backend import LocalBackend

    mode = cast(Literal["auto", "bwrap", "none"], isolation)
    request = SandboxRequest(confined=model != "baseline", isolation=mode, network=network)
    check_backend(LocalBackend(), request)


def check_backend(backend: SandboxBackend, request: SandboxRequest) -> None:
    """A sandbox backend's preflight at the command line: a refusal is one line and exit
    status 2 (UsageError), each warning one line on stderr."""
    from mlra.tools.sandbox.backends import BackendRefused

    try:
        warnings = backend.preflight(request)
    except BackendRefused as exc:
        raise UsageError(str(exc)) from None
    for line in warnings:
        print(f"mlra: warning: {line}", file=sys.stderr)


def check_run_id(run_id: str | None) -> None:
    """A run id names a folder inside the runs folder, never a path out of it."""
    if run_id is None:
        return
    from mlra.agent.run.controller import run_id_problem

    problem = run_id_problem(run_id)
    if problem is not None:
        raise UsageError(f"--run-id: {problem}; it names a folder inside --runs-dir")


def check_writable_dir(path: Path, flag: str) -> None:
    """Make sure a folder the command will write into can be made and written to.

    Called once all other input has been checked, just before the first write, so
    that a `--runs-dir` that is a file, lies under a file, or cannot be written is
    one line and exit status 2 rather than a traceback from deep inside a run. A
    probe file is created and removed because permission bits alone do not answer
    for root, nor for a read-only mount.
    """
    import tempfile

    try:
        for folder in (path, *path.parents):
            if folder.exists() or folder.is_symlink():
                if not folder.is_dir():
                    where = "" if folder == path else f" ({folder} is a file)"
                    raise UsageError(f"{flag} {path} is not a folder{where}")
                break
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path, prefix=".mlra-probe-"):
            pass
    except OSError as exc:
        reason = exc.strerror or " ".join(str(exc).split())
        raise UsageError(f"{flag} {path} cannot be written: {reason}") from None


def find_run(name: str, runs_dir: Path, *, folders: bool = False) -> Path:
    """A run as every command that takes one names it (agent/record/run_lookup.py): its
    folder, or its id or the start of one in `runs_dir`; a UsageError, one line, where
    that names no run or several."""
    from mlra.agent.record.run_lookup import NoSuchRun, find_run

    try:
        return find_run(name, runs_dir, folders=folders)
    except NoSuchRun as exc:
        raise UsageError(str(exc)) from None


def run_path(run: str) -> Path:
    """RUN_DIR as `mlra replay`, `resume`, `fork` and `eval` take it (`find_run` in ./runs:
    their commands' folder is the run's own, so they have no --runs-dir to look in).
    Looked up as the command runs, not as its line is parsed: parsing reads no folder."""
    return find_run(run, Path("runs"))


def shown_folder(run_dir: Path) -> str:
    """A run folder as a line tells the user to pass it on (`mlra resume`, `mlra
    replay`): relative to here where that is shorter, else whole; a runs folder
    elsewhere (`--runs-dir /tmp/...`) read `../../tmp/...` from a repository."""
    import os

    try:
        relative = os.path.relpath(run_dir)
    except ValueError:  # another drive (Windows)
        return str(run_dir)
    return relative if len(relative) < len(str(run_dir)) else str(run_dir)


def run_folder(run: str, runs_dir: Path) -> Path:
    """RUN as `mlra ctl`, `attach` and `annotate` take it: `find_run` under --runs-dir,
    resolved; a folder that is not a run is refused here."""
    from mlra.agent.record.eventlog import EVENTS_FILE

    found = find_run(run, runs_dir)
    if not (found / EVENTS_FILE).is_file():
        raise UsageError(
            f"no run {run!r}: not a run folder (no {EVENTS_FILE}), nor a run id in {runs_dir} "
            "(see --runs-dir)"
        )
    return found.resolve()


def add_budget_args(
    parser: argparse.ArgumentParser, *, whose: str, default: str, log_default: str
) -> None:
    """The five limits a run can end on, one definition for run, batch, resume and
    fork; `whose` ("the run", "each run") says whose they are in the help, `default`
    where the limits come from when not given, `log_default` the log budget's."""
    parser.add_argument(
        "--time-limit",
        type=duration,
        metavar="T",
        help=f"{whose}'s time limit, paused time excluded (90s, 20m, 1h30m; default {default})",
    )
    parser.add_argument(
        "--max-steps", type=positive_int, metavar="N", help=f"end {whose} after N worker steps"
    )
    parser.add_argument(
        "--max-cost",
        type=positive_float,
        metavar="USD",
        help=f"end {whose} when its model cost reaches USD",
    )
    parser.add_argument(
        "--max-tokens", type=positive_int, metavar="N", help=f"end {whose} after N model tokens"
    )
    parser.add_argument(
        "--log-budget",
        type=disk_mb,
        metavar="SIZE",
        help=f"the most {whose}'s event log should grow to (1g, or none; default "
        f"{log_default}): near it output is logged shorter, at it {whose} ends and is graded",
    )


def dispatch(args: argparse.Namespace) -> int:
    """Run a parsed subcommand: bad input it finds is one line on stderr, exit 2 (a
    model server's refusal, its own status: `ServerDown`, `ApiUnreachable`; what
    it quotes, a path or a log's line, shown and not obeyed: mlra/terminal_text.py)."""
    try:
        return int(args.func(args))
    except UsageError as exc:
        sys.stderr.write(f"mlra: {printable(str(exc))}\n")
        return exc.exit_status
