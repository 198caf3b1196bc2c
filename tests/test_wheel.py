"""The wheel built from the tree runs a run: built, installed without `-e` into a fresh
virtual environment, and used from a folder outside the checkout, as on a GPU box or a
Ray node where `pip install .` or a wheel is all there is. An editable install (what the
suite and CI otherwise use) reads every module and data file from the checkout, so
whatever the wheel leaves out is seen here only."""

from __future__ import annotations

import compileall
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from tests.conftest import ANSWER_TASK, SECRET_ENV, bare_venv

REPO = Path(__file__).resolve().parent.parent


def completed(
    argv: list[str | Path], *, cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`argv` from `cwd` with no PYTHONPATH (which would put the checkout's mlra first)."""
    env = {k: v for k, v in os.environ.items() if k not in (*SECRET_ENV, "PYTHONPATH")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")  # pip asks no index
    proc = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"{argv}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def run(argv: list[str | Path], *, cwd: Path, timeout: float = 120) -> str:
    return completed(argv, cwd=cwd, timeout=timeout).stdout


def build_wheel(out: Path, scratch: Path) -> Path:
    """The wheel of a copy of the tree: the checkout's own build/ (setuptools' staging,
    kept between builds) could hold a module since deleted, and the copy leaves the
    checkout untouched. The copy's task folders get the bytecode a checkout that has run
    tests or tasks holds beside their scripts, which the wheel must not ship."""
    src = scratch / "src"
    src.mkdir()
    for entry in REPO.iterdir():
        if entry.is_file():
            shutil.copy2(entry, src / entry.name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(REPO / "mlra", src / "mlra", ignore=ignore)
    assert compileall.compile_dir(src / "mlra" / "tasks", quiet=1)
    pip = [sys.executable, "-m", "pip"]
    built = completed(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", src, "-w", out], cwd=scratch
    )
    # `pip install .` shows the build's warnings even when quiet: the task folders are
    # data, and setuptools once warned at every install that each was a package left out.
    assert "Warning" not in built.stderr, built.stderr[-3000:]
    (wheel,) = out.glob("mlra-*.whl")
    return wheel


def task_files() -> set[str]:
    """The checkout's built-in and foreign task folders, file by file, as wheel names."""
    tasks = REPO / "mlra" / "tasks"
    return {
        path.relative_to(REPO).as_posix()
        for folder in ("builtin", "foreign")
        for path in (tasks / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_the_wheel_runs_a_run_from_outside_the_checkout(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist", tmp_path)

    # A fresh environment with the wheel alone; the dependencies are the suite's own,
    # seen through a .pth line (quicker than installing them again). A .pth line adds
    # a folder to sys.path without reading the .pth files in it, so the suite's
    # editable install of mlra is not among them, and the wheel's site-packages comes first.
    venv = tmp_path / "venv"
    python, site = bare_venv(venv)
    run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", wheel],
        cwd=tmp_path)  # fmt: skip
    (site / "suite-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")

    where = tmp_path / "elsewhere"
    where.mkdir()
    found = run(
        [python, "-c", "import mlra, mlra.tools.sandbox.image as i; "
         "print(mlra.__file__); print(i.default_dockerfile())"],
        cwd=where,
    ).split()  # fmt: skip
    assert all(Path(p).is_relative_to(site / "mlra") for p in found), found
    assert Path(found[1]).is_file()  # `mlra image build` has its Dockerfile
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "mlra/agent/providers/demo_script.toml" in names  # `--model demo` has its words
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]
    assert {n for n in names if n.startswith("mlra/tasks/")} >= task_files()  # the tasks' data
    looked = run([python, "-c", "from mlra.agent.providers.demo import script; "
                  "print(script()['tasks']['tiny-lm']['look'])"], cwd=where)  # fmt: skip
    assert "train.py" in looked

    mlra = venv / "bin" / "mlra"
    assert "usage: mlra" in run([mlra, "--help"], cwd=where)

    # The test task, copied out of the checkout. No bubblewrap: the sandbox shows the
    # environment's own folders, not the suite's that the .pth line borrows from
    # (the sandbox's own tests hold what it confines).
    task = shutil.copytree(ANSWER_TASK, where / "answer")
    runs = where / "runs"
    out = run(
        [mlra, "run", task, "--model", "baseline", "--no-tui", "--isolation", "none",
         "--runs-dir", runs],
        cwd=where,
    )  # fmt: skip
    assert "run finished (submitted)" in out, out
    (run_dir,) = runs.iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "finished" and result["evaluation_error"] is None
    assert result["score"] == 1.0
