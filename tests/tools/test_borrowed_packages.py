"""A venv that borrows another's packages through a `.pth` line, confined by bubblewrap
(tools/sandbox/bwrap.py `python_roots`): mlra's wheel in an environment of its own
beside a GPU machine's CUDA torch, as docs/getting-started.md installs it offline.
Before, the sandbox showed only the venv and its base Python, so every command's
`import torch` failed inside while mlra itself, outside, had it.

A real venv made here, its `.pth` naming this environment's packages (mlra, pydantic)
and a borrowed folder holding one module, and a real sandbox started from it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import mlra
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.local import LocalSandbox
from tests.conftest import bare_venv

BWRAP_PROBLEM = isolation_problem()
pytestmark = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or "")

IN_THE_VENV = """
import asyncio, sys
from pathlib import Path
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox

async def main():
    box = LocalSandbox(Path(sys.argv[1]), SandboxSpec(), isolation_mode="bwrap")
    await box.start()
    try:
        got = await box.exec(["python", "-c", sys.argv[2]], timeout=60)
        print(got.output.strip())
    finally:
        await box.close()

asyncio.run(main())
"""


def _borrowing_venv(tmp_path: Path, borrowed: Path) -> Path:
    """A venv whose `.pth` names mlra's checkout (mlra itself, outside only), this
    environment's packages and `borrowed`: its python."""
    python, purelib = bare_venv(tmp_path / "venv")
    checkout = Path(mlra.__file__).resolve().parent.parent
    # This environment's packages at their real path, as the sandbox shows them: a
    # venv reached through a link is not there by the link's path (tools/sandbox/env.py).
    packages = Path(sysconfig.get_path("purelib")).resolve()
    lines = [checkout, packages, borrowed]
    (purelib / "borrowed.pth").write_text("".join(f"{line}\n" for line in lines))
    return python


def _in_the_sandbox(python: Path, tmp_path: Path, probe: str) -> subprocess.CompletedProcess[str]:
    """`probe` run by `python -c` in a bubblewrap sandbox that the venv's python started,
    its workspace tmp_path/workspace."""
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    return subprocess.run(
        [python, "-c", IN_THE_VENV, str(workspace), probe],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip


def test_a_venv_borrowing_packages_through_a_pth_finds_them_in_the_sandbox(
    tmp_path: Path,
) -> None:
    borrowed = tmp_path / "gpu-env" / "lib" / "site-packages"
    borrowed.mkdir(parents=True)
    (borrowed / "borrowed_torch.py").write_text("WHERE = 'borrowed'\n")
    python = _borrowing_venv(tmp_path, borrowed)
    probe = "import borrowed_torch, pydantic; print(borrowed_torch.WHERE)"
    done = _in_the_sandbox(python, tmp_path, probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "borrowed", done.stdout
    # Only package folders are borrowed: not what lies beside them, nor the folder the
    # venv was started in.
    (tmp_path / "gpu-env" / "notes.txt").write_text("beside\n")
    (tmp_path / "here.txt").write_text("cwd\n")
    # Another mlra installed in the borrowed folder: its tasks' hidden data stays hidden.
    answers = borrowed / "mlra" / "tasks" / "builtin" / "classify-finetune" / "hidden"
    answers.mkdir(parents=True)
    (answers / "test.jsonl").write_text('{"label": 1}\n')
    looks = [
        tmp_path / "gpu-env" / "notes.txt",
        tmp_path / "here.txt",
        answers / "test.jsonl",
        borrowed / "borrowed_torch.py",
    ]
    seen = _in_the_sandbox(
        python,
        tmp_path,
        f"import os; print([os.path.exists(p) for p in {[str(p) for p in looks]!r}])",
    )
    assert seen.stdout.strip().splitlines()[-1] == "[False, False, False, True]", (
        seen.stdout + seen.stderr
    )


def test_a_pth_line_naming_the_borrowed_folder_through_a_link_finds_it_in_the_sandbox(
    tmp_path: Path,
) -> None:
    """`/opt/torch -> /opt/torch-2.13`, a `.pth` line naming `/opt/torch/lib/...`: the
    interpreter inside looks the line up as written, so the link must be there too.
    Before, only the real folder was shown and `import torch` failed inside alone."""
    real = tmp_path / "torch-2.13" / "lib" / "site-packages"
    real.mkdir(parents=True)
    (real / "borrowed_torch.py").write_text("WHERE = 'borrowed'\n")
    (tmp_path / "torch-2.13" / "notes.txt").write_text("beside\n")
    (tmp_path / "torch").symlink_to("torch-2.13")  # relative, as `ln -s` often makes it
    python = _borrowing_venv(tmp_path, tmp_path / "torch" / "lib" / "site-packages")
    looks = [tmp_path / "torch" / "notes.txt", tmp_path / "torch-2.13" / "notes.txt"]
    probe = (
        "import os, borrowed_torch, pydantic; "
        f"print(borrowed_torch.WHERE, [os.path.exists(p) for p in {[str(p) for p in looks]!r}])"
    )
    done = _in_the_sandbox(python, tmp_path, probe)
    assert done.returncode == 0, done.stderr
    # Found through the link; what lies beside the borrowed folder stays unseen.
    assert done.stdout.strip().splitlines()[-1] == "borrowed [False, False]", (
        done.stdout + done.stderr
    )


def test_a_relative_pth_line_of_a_venv_reached_through_a_link_finds_it_in_the_sandbox(
    tmp_path: Path,
) -> None:
    """A `.pth` line relative to its folder (`../../../../gpu-env/lib/site-packages`) in a
    venv reached through a link (a project's `.venv` linking to the venv's real folder):
    outside, Python reads the line from the link's path; inside, the interpreter starts
    from the real folder (tools/sandbox/env.py), so the same line named another folder,
    not shown, and the package was missing inside alone."""
    real_venv = tmp_path / "envs" / "real-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(real_venv)], check=True)
    project = tmp_path / "project"
    project.mkdir()
    (project / ".venv").symlink_to(real_venv)
    python = project / ".venv" / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert purelib.startswith(str(project / ".venv"))  # read through the link, outside
    borrowed = project / "gpu-env" / "lib" / "site-packages"  # four folders up, outside
    borrowed.mkdir(parents=True)
    (borrowed / "borrowed_torch.py").write_text("WHERE = 'borrowed'\n")
    checkout = Path(mlra.__file__).resolve().parent.parent
    packages = Path(sysconfig.get_path("purelib")).resolve()
    (Path(purelib) / "borrowed.pth").write_text(
        f"{checkout}\n{packages}\n../../../../gpu-env/lib/site-packages\n"
    )
    outside = subprocess.run(
        [python, "-c", "import borrowed_torch; print(borrowed_torch.WHERE)"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert outside.stdout.strip() == "borrowed", outside.stderr
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    probe = "import borrowed_torch, pydantic; print(borrowed_torch.WHERE)"
    done = subprocess.run(
        [python, "-c", IN_THE_VENV, str(workspace), probe],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "borrowed", done.stdout + done.stderr


async def test_a_task_environments_own_pth_lines_are_shown_in_the_sandbox(
    tmp_path: Path,
) -> None:
    """A task's own environment (tasks/environment.py) borrowing a package folder through
    a `.pth` line of its own: only mlra's path was read for what to show, so the folder
    was missing inside. Another mlra's tasks there stay masked, as in mlra's own."""
    env = tmp_path / "task-env"
    _, site_dir = await asyncio.to_thread(bare_venv, env)
    borrowed = tmp_path / "shared" / "lib" / "site-packages"
    answers = borrowed / "mlra" / "tasks" / "builtin" / "classify-finetune" / "hidden"
    answers.mkdir(parents=True)
    (answers / "test.jsonl").write_text('{"label": 1}\n')
    (borrowed / "task_only.py").write_text("WHERE = 'the task env borrowed it'\n")
    (site_dir / "shared.pth").write_text("../../../../shared/lib/site-packages\n")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    box = LocalSandbox(workspace, SandboxSpec(python_env=env), isolation_mode="bwrap")
    await box.start()
    try:
        got = await box.exec(
            ["python", "-c",
             f"import os, sys, task_only; print(sys.prefix, task_only.WHERE, "
             f"os.path.exists({str(answers / 'test.jsonl')!r}))"],
            timeout=60,
        )  # fmt: skip
    finally:
        await box.close()
    assert got.exit_code == 0, got.output
    assert got.output.strip() == f"{env} the task env borrowed it False", got.output
