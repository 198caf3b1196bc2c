"""A virtual environment built for a list of requirements, once per content, in the
cache (`$MLRA_CACHE_DIR/envs/<key>/`).

The key is a hash of the normalized requirements, the Python they run on and the
site-packages they are laid over (mlra's own): the same requirements on the same
machine are one environment, shared by every task that names them, and a changed one
is a new environment, never an edited one. It is built in `<key>.partial` and renamed when whole, under a lock, so the
runs of a batch that start together build it once and none ever sees half of one.

The environment holds what the task names (and what that needs); everything else
comes from mlra's own environment, laid under it by a `.pth` file: torch,
transformers and the rest of the ML stack are the machine's own builds (a CUDA torch
on a GPU machine), not fresh downloads of gigabytes per task, and a build takes
seconds. What the task names wins, being earlier on `sys.path`. Where a package the
task replaces is one that mlra's own packages need in other versions (a `numpy<2` pin
under mlra's pandas, which needs numpy 2), those packages are installed again in the
environment in versions that agree, so an import does not break; any that cannot be
(mlra itself, installed from a folder) are listed in the record as warnings.

uv builds it where installed (a dependency of mlra), given pip's own settings (its
find-links, extra index URLs and constraints: torch from the machine's own wheel),
and where an index cannot be reached, again offline from uv's cache and the machine's
file indexes; without uv, `python -m venv` and pip. A failure is one line naming the
build's log.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, Field

from mlra.tasks.foreign.common import cache_root, locked
from mlra.tools.sandbox.env import is_secret_name

FORMAT = "mlra-env-1"
RECORD = "mlra-env.json"
"""In a built environment: what it holds and how it was built. Written last: a folder
without it is not an environment."""
BASE_PTH = "_mlra_base.pth"
REQUIREMENTS_FILE = "mlra-requirements.txt"
REPAIR_ROUNDS = 3
INSTALL_TIMEOUT_S = 3600.0


class EnvBuildError(Exception):
    """An environment that could not be built; the message is one line naming the log."""


class EnvRecord(BaseModel):
    key: str
    requirements: list[str]
    python: str
    """The Python version it runs ("3.11.7")."""
    interpreter: str
    base: list[str]
    """mlra's site-packages folders, laid under the environment's own."""
    builder: str
    """"uv 0.13.9", or "pip 26.3" where uv is not installed."""
    built_at: str
    build_s: float
    replaced: list[str] = Field(default_factory=list)
    """mlra's own packages installed again in the environment, in versions that agree
    with what the task named (pandas, under a `numpy<2`)."""
    warnings: list[str] = Field(default_factory=list)
    """mlra's packages that still see a version outside their requirements."""
    log: str = ""


def base_interpreter() -> str:
    """The Python mlra runs on, out of any virtual environment: the task's environment
    is made from it, so it can lay mlra's packages under its own."""
    base = getattr(sys, "_base_executable", "") or sys.executable
    return os.path.realpath(base)


def base_site_dirs() -> list[str]:
    """mlra's own site-packages, what the task's environment is laid over."""
    dirs = [os.path.realpath(d) for d in site.getsitepackages() if os.path.isdir(d)]
    return list(dict.fromkeys(dirs))


def env_key(lines: list[str]) -> str:
    """The hash an environment is cached by: its requirements, the Python and the
    site-packages it is laid over. Not what that site-packages holds: a run that lasts
    hours is graded in the environment it started with, though a package was installed
    in mlra's environment meanwhile (to build anew: remove `envs/<key>`)."""
    content = {
        "format": FORMAT,
        "python": sys.version,
        "implementation": sys.implementation.name,
        "interpreter": base_interpreter(),
        "base": base_site_dirs(),
        "requirements": sorted(lines),
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def envs_root() -> Path:
    return cache_root() / "envs"


def env_dir(key: str) -> Path:
    return envs_root() / key[:16]


def read_record(folder: Path) -> EnvRecord | None:
    try:
        return EnvRecord.model_validate_json((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None


def site_packages(venv: Path) -> Path:
    return (
        venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    )


def ensure(
    lines: list[str],
    *,
    echo: Callable[[str], object] | None = print,
    what: str = "the task's environment",
) -> tuple[EnvRecord, Path, bool]:
    """The environment for `lines` (its record, its folder, and whether it was built now),
    built first where the cache has none. Raises EnvBuildError."""
    key = env_key(lines)
    dest = env_dir(key)
    record = read_record(dest)
    if record is not None:
        return record, dest, False
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with locked(dest.parent / f"{dest.name}.lock"):
            record = read_record(dest)
            if record is not None:  # built by another run while this one waited
                return record, dest, False
            if dest.exists():
                shutil.rmtree(dest)  # no record: not a whole environment
            return _build(key, lines, dest, echo, what), dest, True
    except OSError as exc:
        raise EnvBuildError(f"{what} could not be built in {dest.parent}: {exc}") from None


def _build(
    key: str, lines: list[str], dest: Path, echo: Callable[[str], object] | None, what: str
) -> EnvRecord:
    partial = dest.with_name(dest.name + ".partial")
    log = dest.with_name(dest.name + ".build.log")
    if partial.exists():
        shutil.rmtree(partial)  # left by a build that was killed
    uv = uv_binary()
    builder = (
        _version_line([uv, "--version"])
        if uv
        else _version_line([sys.executable, "-m", "pip", "--version"])
    )
    builder = " ".join(builder.split()[:2]) or ("uv" if uv else "pip")
    if echo is not None:
        n = len(lines)
        echo(
            f"building {what} ({n} requirement{'' if n == 1 else 's'}) with {builder} in "
            f"{dest} (log: {log})"
        )
    started = time.monotonic()
    log.write_text(f"# {what}: {', '.join(lines)}\n")
    try:
        record = _make(key, lines, partial, log, uv, builder)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    record.build_s = round(time.monotonic() - started, 2)
    record.log = str(log)
    _rehome(partial, dest)
    (partial / RECORD).write_text(record.model_dump_json(indent=2))
    partial.rename(dest)
    return record


def _make(
    key: str, lines: list[str], partial: Path, log: Path, uv: str | None, builder: str
) -> EnvRecord:
    base = base_interpreter()
    env = _build_env()
    if uv:
        _run([uv, "venv", "--relocatable", "--no-config", "--python", base, str(partial)], log, env)
    else:
        _run([base, "-m", "venv", "--without-pip", str(partial)], log, env)
    python = partial / "bin" / "python"
    requirements = partial / REQUIREMENTS_FILE
    requirements.write_text("\n".join(lines) + "\n")
    install = _install_command(uv, python, requirements)
    _install(install, uv is not None, log, env)
    base_dirs = base_site_dirs()
    own = site_packages(partial)
    replaced: list[str] = []
    for _ in range(REPAIR_ROUNDS):
        repairable = sorted(set(_disagreements(own, base_dirs)[1]) - set(replaced))
        if not repairable:
            break
        requirements.write_text("\n".join([*lines, *replaced, *repairable]) + "\n")
        try:
            _install(install, uv is not None, log, env)
        except EnvBuildError:
            break  # the environment stays as the task's own lines made it; warned below
        replaced += repairable
    broken, _ = _disagreements(own, base_dirs)
    requirements.write_text("\n".join(lines) + "\n")
    (own / BASE_PTH).write_text(
        "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in base_dirs) + "\n"
    )
    _run([str(python), "-c", "import sys"], log, env)  # the environment starts
    return EnvRecord(
        key=key,
        requirements=lines,
        python=".".join(str(v) for v in sys.version_info[:3]),
        interpreter=base,
        base=base_dirs,
        builder=builder,
        built_at=datetime.now(UTC).isoformat(timespec="seconds"),
        build_s=0.0,
        replaced=replaced,
        warnings=[f"{name} needs {need}" for name, need in sorted(broken.items())],
    )


def _install(argv: list[str], offline_too: bool, log: Path, env: dict[str, str]) -> None:
    """An install; with uv, tried again offline where it failed (uv's cache and the
    machine's own file indexes: a machine that cannot reach PyPI now builds what it
    has), the first failure being the one said where both fail."""
    try:
        _run(argv, log, env)
    except EnvBuildError:
        if not offline_too:
            raise
        try:
            _run([*argv, "--offline"], log, env)
        except EnvBuildError:
            pass
        else:
            return
        raise


def _install_command(uv: str | None, python: Path, requirements: Path) -> list[str]:
    if uv is None:
        # pip reads its own settings (pip.conf, PIP_* variables).
        return [
            sys.executable, "-m", "pip", "--python", str(python), "install",
            "--no-input", "--progress-bar", "off", "-r", str(requirements),
        ]  # fmt: skip
    # Like pip, the best version over every index (uv's default takes the first index
    # that has the package at all: the machine's local one, with only today's versions).
    argv = [
        uv, "pip", "install", "--python", str(python), "--no-progress", "--color", "never",
        "--index-strategy", "unsafe-best-match", "-r", str(requirements),
    ]  # fmt: skip
    return argv + uv_options(pip_settings())


def uv_binary() -> str | None:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


PIP_SETTINGS = ("index-url", "extra-index-url", "find-links", "constraint", "no-index", "cert")


def pip_settings() -> dict[str, str]:
    """pip's configuration as pip itself reads it (`pip config list`: its files and
    PIP_* variables; a variable over `install.` over `global.`), for uv, which reads
    none of it: the machine's own wheels and indexes are where pip would look."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    rank = {":env:": 3, "install": 2, "global": 1}
    best: dict[str, tuple[int, str]] = {}
    for line in out.splitlines():
        match = re.match(r"^(:env:|[a-z]+)\.([a-z-]+)=(.*)$", line.strip())
        if match is None or match.group(2) not in PIP_SETTINGS:
            continue
        try:
            value = ast.literal_eval(match.group(3))
        except (ValueError, SyntaxError):
            continue
        order = rank.get(match.group(1), 0)
        if order and order >= best.get(match.group(2), (0, ""))[0]:
            best[match.group(2)] = (order, str(value))
    return {name: value for name, (_, value) in best.items()}


def uv_options(settings: dict[str, str]) -> list[str]:
    argv: list[str] = []
    if settings.get("index-url"):
        argv += ["--index-url", settings["index-url"]]
    for flag in ("extra-index-url", "find-links", "constraint"):
        for value in settings.get(flag, "").split():
            if flag != "constraint" or os.path.isfile(value):
                argv += [f"--{flag}", value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        argv.append("--no-index")
    return argv


def _build_env() -> dict[str, str]:
    """The builder's environment: this one less anything secret-looking (the model
    providers' keys have no business with an installer)."""
    env = {k: v for k, v in os.environ.items() if not is_secret_name(k)}
    cert = pip_settings().get("cert") if uv_binary() else None
    if cert and "SSL_CERT_FILE" not in env and os.path.isfile(cert):
        env["SSL_CERT_FILE"] = cert
    env.pop("VIRTUAL_ENV", None)
    env["COLUMNS"] = "1000"  # uv's messages unwrapped: a failure's cause is one line
    return env


def _version_line(argv: list[str | None]) -> str:
    if any(a is None for a in argv):
        return ""
    try:
        return subprocess.run(
            [str(a) for a in argv], capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _run(argv: list[str], log: Path, env: dict[str, str]) -> None:
    with log.open("a") as out:
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        try:
            proc = subprocess.run(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=log.parent,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise EnvBuildError(
                f"{Path(argv[0]).name} did not finish in {INSTALL_TIMEOUT_S:.0f} s "
                f"(its whole log: {log})"
            ) from None
        except OSError as exc:
            raise EnvBuildError(f"{argv[0]} could not be run: {exc} (log: {log})") from None
    if proc.returncode != 0:
        raise EnvBuildError(
            f"{_last_line(log.read_text(errors='replace'))} (exit {proc.returncode}; its whole "
            f"log: {log})"
        )


def _last_line(text: str) -> str:
    """What a failed build's output says of why, in one line: uv's last cause (its
    lines joined, its box drawing and hints left out), or pip's last line."""
    raw = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("$ ")]
    raw = [ln for ln in raw if not ln.lower().startswith("hint")]
    starts = [i for i, ln in enumerate(raw) if ln.startswith(("×", "╰─▶"))]
    said = raw[starts[-1] :] if starts else raw[-1:]
    joined = " ".join(ln.lstrip("×╰─▶│ ").strip() for ln in said)
    joined = joined.removeprefix("cause: ").removeprefix("Caused by: ")
    return " ".join(joined.split())[:400] or "no output"


def _disagreements(own: Path, base_dirs: list[str]) -> tuple[dict[str, str], list[str]]:
    """mlra's packages the environment does not hold whose requirements it breaks
    (name -> what they need, and what is here), and those of them that can be
    installed again from an index (not mlra itself, installed from a folder)."""
    here: dict[str, str] = {}
    for dist in metadata.distributions(path=[str(own)]):
        here[canonicalize_name(dist.metadata["Name"] or "")] = dist.version
    broken: dict[str, str] = {}
    fixable: list[str] = []
    for dist in metadata.distributions(path=base_dirs):
        name = canonicalize_name(dist.metadata["Name"] or "")
        if not name or name in here or name in broken:
            continue
        needs = []
        for line in dist.requires or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            version = here.get(canonicalize_name(req.name))
            if version is not None and not req.specifier.contains(version, prereleases=True):
                needs.append(f"{req.name}{req.specifier} ({version} here)")
        if needs:
            broken[name] = ", ".join(needs)
            if dist.read_text("direct_url.json") is None:
                fixable.append(name)
    return broken, fixable


def _rehome(partial: Path, dest: Path) -> None:
    """Scripts that name the folder they were built in by its path (pip's shebangs,
    venv's activate) made to name the folder they will be: a new file each (never
    written through a hard link into an installer's cache)."""
    old, new = str(partial).encode(), str(dest).encode()
    bin_dir = partial / "bin"
    for path in bin_dir.iterdir() if bin_dir.is_dir() else []:
        if path.is_symlink() or not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if old not in data or len(data) > 1 << 20:
            continue
        fresh = path.with_name(path.name + ".mlra-new")
        fresh.write_bytes(data.replace(old, new))
        fresh.chmod(path.stat().st_mode & 0o7777)
        fresh.replace(path)
