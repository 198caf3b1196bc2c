"""`mlra run <MLAgentBench folder> --sandbox docker` for a folder that declares Python
requirements: what the user reads names the commands to run, in order, in one line.

Before, with mlra's image missing it said only "build it with `mlra image build`"; that
done, the run went on with a warning that its commands lacked the task's packages and
"build one with them: mlra image build --task PATH, then --image mlra-task-...": the
steps came one refusal at a time, the last with its image's name cut off, and where the
task's image was built already, it still asked for mlra's."""

from __future__ import annotations

import secrets
import shlex
from pathlib import Path

import pytest

from mlra.agent.setup.run_setup import environment_notice
from mlra.tasks.foreign.common import CACHE_VAR
from mlra.tasks.spec import load_task
from mlra.tools.sandbox.docker_preflight import DEFAULT_IMAGE, TaskImage, missing_image
from tests.conftest import docker_address, docker_problem, mlra_cli
from tests.tasks.folders import write_tree


def _folder(parent: Path, name: str = "tiny-mab") -> Path:
    """An MLAgentBench folder whose environment.yml names a conda package (the test
    engine's image has no pip, and no registry is reachable: nothing is installed)."""
    files = {
        "env/train.py": 'open("submission.csv", "w").write("0.5\\n")\n',
        "scripts/research_problem.txt": "Improve the score train.py writes to submission.csv.",
        "scripts/eval.py": (
            "import os\n\n"
            'def get_score(submission_folder="../env"):\n'
            '    with open(os.path.join(submission_folder, "submission.csv")) as f:\n'
            "        return float(f.read().split()[0])\n"
        ),
        "scripts/environment.yml": "dependencies:\n  - python=3.11\n",
    }
    return write_tree(parent / "benchmarks with space" / name, files)


def test_the_line_names_each_command_in_order(tmp_path: Path) -> None:
    folder = tmp_path / "MLAgentBench" / "cifar10"
    task = TaskImage("mlra-task-mlagentbench-cifar10:latest", folder)
    build = f"`mlra image build --task {folder}`"

    def only(*names: str):  # what the engine has
        return lambda name: name in names

    line = str(missing_image(DEFAULT_IMAGE, task, only()))
    assert line == (
        "neither mlra:latest nor the task's own image mlra-task-mlagentbench-cifar10:latest "
        "(its Python requirements on mlra:latest) is on this engine; run `mlra image build`, "
        f"then {build}, then this command again with "
        "`--image mlra-task-mlagentbench-cifar10:latest`"
    )
    # The task's image is built: mlra's is not needed, only the run's --image.
    line = str(missing_image(DEFAULT_IMAGE, task, only(task.tag)))
    assert line == (
        "the Docker image mlra:latest is not on this engine; the task's Python requirements "
        "are in its own image mlra-task-mlagentbench-cifar10:latest; run this command again "
        "with `--image mlra-task-mlagentbench-cifar10:latest`"
    )
    # Its image named, not built, mlra's there: only the task's to build.
    line = str(missing_image(task.tag, task, only(DEFAULT_IMAGE)))
    assert line == (
        "the task's own image mlra-task-mlagentbench-cifar10:latest is not on this engine; "
        f"run {build}, then this command again"
    )
    # Another image, or a task that needs none of its own: as before.
    assert str(missing_image("other:1", task)).endswith("build or pull it (docker pull other:1)")
    assert str(missing_image(DEFAULT_IMAGE)).endswith("build it with `mlra image build`")


def test_a_run_on_mlras_image_is_told_the_commands_that_give_it_the_tasks_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mlra's image on the engine: the run goes on with a warning, which names the
    task's image whole (it said `--image mlra-task-...`)."""
    monkeypatch.setenv(CACHE_VAR, str(tmp_path / "cache"))
    folder = _folder(tmp_path)
    notice = environment_notice(load_task(folder), "docker", None)
    assert notice is not None and notice.endswith(
        f"its own image has them: run `mlra image build --task {shlex.quote(str(folder))}` "
        "(once), then this command again with `--image mlra-task-mlagentbench-tiny-mab:latest`"
    )


def test_mlra_run_names_the_steps_on_a_real_engine(tmp_path: Path) -> None:
    """On the test engine (docker/test-engine.sh), which has no mlra:latest: the refusal
    names mlra's image, the task's and the run's --image, in that order; once the task's
    image is built (here on the test engine's base), only the --image."""
    import docker

    problem = docker_problem()
    if problem is not None:
        pytest.skip(problem)
    host = docker_address()
    assert host is not None
    client = docker.DockerClient(base_url=host, timeout=30)
    if any(DEFAULT_IMAGE in image.tags for image in client.images.list(name="mlra")):
        pytest.skip(f"the engine has {DEFAULT_IMAGE}: the line leaves its build out")
    name = f"tiny-mab-{secrets.token_hex(3)}"  # an image of its own on a shared engine
    folder = _folder(tmp_path, name)
    tag = f"mlra-task-mlagentbench-{name}:latest"
    env = {"DOCKER_HOST": host, CACHE_VAR: str(tmp_path / "cache")}
    run = ["run", str(folder), "--sandbox", "docker", "--model", "baseline", "--no-tui"]
    run += ["--runs-dir", str(tmp_path / "runs")]

    refused = mlra_cli(run, cwd=tmp_path, env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.splitlines() == [
        f"mlra: --sandbox docker: neither mlra:latest nor the task's own image {tag} (its "
        "Python requirements on mlra:latest) is on this engine; run `mlra image build`, then "
        f"`mlra image build --task {shlex.quote(str(folder))}`, then this command again with "
        f"`--image {tag}`"
    ]
    assert not (tmp_path / "runs").exists()  # refused before any run folder

    base = ["--base", "mlra-test:latest"]  # the test engine's stand-in for mlra's image
    built = mlra_cli(["image", "build", "--task", str(folder), *base], cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    try:
        assert f"built {tag} (run with --sandbox docker --image {tag})" in built.stdout
        refused = mlra_cli(run, cwd=tmp_path, env=env)
        assert refused.returncode == 2
        assert refused.stderr.splitlines() == [
            "mlra: --sandbox docker: the Docker image mlra:latest is not on this engine; the "
            f"task's Python requirements are in its own image {tag}; run this command again "
            f"with `--image {tag}`"
        ]
    finally:
        client.images.remove(tag)
