"""The wheels a lent GPU machine needs to install mlra offline, made here beforehand.

    python bench/gpu_wheels.py --out .gpu-wheels

A GPU machine is lent for about 15 minutes of device time in all, with no network, and
its image (bench/gpu_checks/device_image.py) holds the CUDA torch, transformers and most
of the scientific stack but not mlra's own dependencies (pydantic, textual, lm-eval,
...). Working out and fetching what is missing there would spend the loan; so it is done
here: the `ml` extra's requirements, followed through this environment's installed
metadata with the machine's markers (Python 3.12 on Linux x86-64), less what the image
has, each fetched from PyPI as a wheel for that Python and platform at the version
installed here (the versions the tests passed with), a pure-Python sdist built into a
wheel here, and mlra's own wheel built from the checkout. The folder goes with the
checkout (the device tool's `carry`, 64 MiB with the tree) and bench/gpu_on_device.sh
installs from it and runs bench/gpu_check.py (docs/contributing.md, "On a lent GPU
machine").
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_checks, beside this file

from gpu_checks import device_image

ROOT = Path(__file__).resolve().parent.parent
CARRY_LIMIT_MB = 64.0
"""What the device tool carries, the checkout and this folder together."""
MARKERS = {
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


def needed(
    python: str, top: str = "mlra", extras: frozenset[str] = frozenset({"ml"})
) -> dict[str, str]:
    """Every distribution `top[extras]` needs on the machine, by normalised name, with
    the version installed here; those the image has at a version that will do are
    left out. A requirement this environment has not installed is an error: its
    version could not be the one the tests passed with."""
    markers = {**MARKERS, "python_version": python, "python_full_version": f"{python}.0"}
    wanted: dict[str, frozenset[str]] = {}
    specifiers: dict[str, list[Requirement]] = {}
    todo = [(top, extras)]
    while todo:
        name, asked = todo.pop()
        key = canonicalize_name(name)
        if key in wanted and asked <= wanted[key]:
            continue
        wanted[key] = wanted.get(key, frozenset()) | asked
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"gpu_wheels: {name} is needed but not installed here") from None
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not any(
                req.marker.evaluate({**markers, "extra": e}) for e in {"", *asked}
            ):
                continue
            specifiers.setdefault(canonicalize_name(req.name), []).append(req)
            todo.append((req.name, frozenset(req.extras)))
    carried: dict[str, str] = {}
    for key in sorted(wanted):
        if key == canonicalize_name(top):
            continue
        there = device_image.VERSIONS.get(key)
        has = key in device_image.PACKAGES
        if has and (
            there is None
            or all(r.specifier.contains(there, prereleases=True) for r in specifiers.get(key, []))
        ):
            continue
        carried[key] = metadata.version(key)
    return carried


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False
    )


def fetch(pins: dict[str, str], out: Path, python: str) -> list[str]:
    """Each pin as a wheel for the machine into `out`; what could be had neither as such
    a wheel nor as a pure-Python one built here."""
    platform = [f"--platform={p}" for p in device_image.PLATFORMS]
    target = [f"--python-version={python}", "--implementation=cp", *platform]
    failed = []
    for name, version in pins.items():
        got = pip(
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            *target,
            "-d",
            str(out),
            f"{name}=={version}",
        )
        if got.returncode == 0:
            continue
        with tempfile.TemporaryDirectory() as scratch:
            built = pip("wheel", "-q", "--no-deps", "-w", scratch, f"{name}=={version}")
            wheels = list(Path(scratch).glob("*.whl"))
            if built.returncode or not wheels or not all(_pure(w.name) for w in wheels):
                failed.append(
                    f"{name}=={version}: {(got.stderr or built.stderr).strip().splitlines()[-1:]}"
                )
                continue
            for wheel in wheels:
                shutil.move(str(wheel), out / wheel.name)
    return failed


def _pure(filename: str) -> bool:
    _, _, _, tags = parse_wheel_filename(filename)
    return all(t.abi == "none" and t.platform == "any" for t in tags)


def own_wheel(out: Path) -> Path:
    """mlra's wheel from the checkout, as .ci/run builds it: from a copy of its files and
    package (a `build/` folder left in the checkout would be packed too)."""
    with tempfile.TemporaryDirectory() as scratch:
        src = Path(scratch) / "src"
        src.mkdir()
        for path in ROOT.iterdir():
            if path.is_file():
                shutil.copy2(path, src / path.name)
        shutil.copytree(ROOT / "mlra", src / "mlra", ignore=shutil.ignore_patterns("__pycache__"))
        got = pip("wheel", "-q", "--no-deps", "--no-build-isolation", str(src), "-w", str(out))
        if got.returncode:
            raise SystemExit(f"gpu_wheels: mlra's wheel did not build: {got.stderr.strip()}")
    (wheel,) = out.glob("mlra-*.whl")
    return wheel


def stand_in(name: str, version: str, out: Path) -> None:
    """An empty wheel that says `name` `version` is installed: the image's packages, for
    the resolver to take as given (their own requirements are the image's business)."""
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpu_wheels\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(out / f"{dist}-py3-none-any.whl", "w") as zf:
        for n, text in files.items():
            zf.writestr(n, text)


def resolves(wheels: Path, python: str) -> str:
    """Whether `mlra[ml]` installs from `wheels` alone on the machine, asked of pip's own
    resolver for its Python and platform, the image's packages stood in for at the
    versions it has (where known; else the version installed here): "" if it does,
    else pip's last lines."""
    with tempfile.TemporaryDirectory() as scratch:
        stubs, target = Path(scratch) / "stubs", Path(scratch) / "target"
        stubs.mkdir()
        for name in device_image.PACKAGES:
            try:
                version = device_image.VERSIONS.get(name) or metadata.version(name)
            except metadata.PackageNotFoundError:
                version = "0"
            stand_in(name, version, stubs)
        own_wheel(stubs)
        platform = [f"--platform={p}" for p in device_image.PLATFORMS]
        got = pip(
            "install", "--dry-run", "--ignore-installed", "--no-index", "--only-binary=:all:",
            "--find-links", str(wheels), "--find-links", str(stubs),
            f"--python-version={python}", "--implementation=cp", *platform,
            "--target", str(target), "mlra[ml]",
        )  # fmt: skip
    return "" if got.returncode == 0 else "\n".join(got.stderr.strip().splitlines()[-4:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu_wheels",
        description="The wheels a lent GPU machine needs to install mlra offline.",
    )
    parser.add_argument("--out", type=Path, required=True, help="the wheel folder (emptied)")
    parser.add_argument("--list", action="store_true", help="only say what would be carried")
    parser.add_argument(
        "--python",
        default=device_image.PYTHON,
        help=f"the machine's Python (default {device_image.PYTHON}; this one's for a rehearsal here)",
    )
    args = parser.parse_args(argv)
    pins = needed(args.python)
    if args.list:
        for name, version in pins.items():
            print(f"{name}=={version}")
        return 0
    out: Path = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    failed = fetch(pins, out, args.python)
    size_mb = sum(p.stat().st_size for p in out.iterdir()) / 2**20
    tree_mb = _tree_mb()
    print(
        f"gpu_wheels: {len(pins)} wheels in {out}: {size_mb:.1f} MiB; the checkout {tree_mb:.1f} MiB"
    )
    for line in failed:
        print(f"gpu_wheels: not fetched: {line}", file=sys.stderr)
    unresolved = resolves(out, args.python)
    if unresolved:
        print(
            f"gpu_wheels: mlra[ml] does not install from it offline:\n{unresolved}", file=sys.stderr
        )
        return 1
    if size_mb + tree_mb > CARRY_LIMIT_MB:
        print(
            f"gpu_wheels: {size_mb + tree_mb:.1f} MiB is over the {CARRY_LIMIT_MB:.0f} MiB the device tool carries",
            file=sys.stderr,
        )
        return 1
    return 1 if failed else 0


def _tree_mb() -> float:
    """What the device tool sends of the checkout: tracked files and untracked ones git
    does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.split(b"\0")  # fmt: skip
    files = (ROOT / name.decode() for name in listed if name)
    return sum(p.stat().st_size for p in files if p.is_file()) / 2**20


if __name__ == "__main__":
    sys.exit(main())
