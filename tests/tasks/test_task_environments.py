"""A task's own Python environment (issue 26): a task that names an old version of a
small pure-Python package (tabulate 0.8.10, where mlra's environment has a newer one)
runs with the baseline agent in a real bubblewrap sandbox whose `python` is the task's
environment, and is graded by a script that runs in it too; in mlra's task.toml
(`[environment]`) and in MLAgentBench's layout (`scripts/requirements.txt`, with the
benchmark's `numpy<2` pin); the second build is a cache hit; a build that fails is one
line naming its log (exit 2); a task that declares nothing runs as it always did.

The requirements come from PyPI (through uv, as a user's would; the machine's own
index at /opt/pypi holds only today's tabulate and numpy 1.26 beside numpy 2): CI
reaches PyPI, and uv's cache makes every build after the first a local one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.agent.setup.config import RunConfig
from mlra.agent.setup.run_setup import task_environment
from mlra.tasks import env_build
from mlra.tasks.env_build import env_key
from mlra.tasks.environment import built_environment, requirements_of, task_python
from mlra.tasks.foreign.common import CACHE_VAR
from mlra.tasks.spec import load_task
from mlra.tasks.task_requirements import (
    ERA_PINS,
    RequirementsError,
    foreign_environment,
    requirement_lines,
)
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.bwrap import isolation_problem
from mlra.tools.sandbox.env import sandbox_env
from tests.conftest import mlra_cli
from tests.tasks.folders import write_tree

BWRAP_PROBLEM = isolation_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=BWRAP_PROBLEM or "")

OLD = "0.8.10"
assert metadata.version("tabulate") != OLD  # mlra's own environment has another one

CHECK_VERSION = f"""\
import sys
from importlib import metadata

import tabulate

found = metadata.version("tabulate")
if found != "{OLD}" or tabulate.__version__ != "{OLD}":
    sys.exit(f"tabulate {{found}} ({{tabulate.__file__}}), not {OLD}")
"""

TASK_TOML = """\
name = "old-tabulate"
title = "A task written for tabulate 0.8.10"

[prompt]
task = "Run answer.py; it writes answer.txt. Submit answer.txt."

[files]
starter = ["starter"]
hidden = ["hidden"]

[metric]
name = "right"
baseline = 0.0
top = 1.0

[evaluator]
kind = "script"
artifact = "answer.txt"
timeout = "1m"
settings = { script = "hidden/check.py" }

[resources]
time_limit = "5m"

[environment]
requirements = ["tabulate == 0.8.10"]

[baseline]
submit = "answer.txt"

[[baseline.steps]]
title = "Run the starter"
command = "python answer.py"
timeout = "2m"
"""

ANSWER_PY = (
    CHECK_VERSION
    + 'open("answer.txt", "w").write(f"{found} {sys.prefix}\\n")\n'
    + 'print("python:", sys.executable)\n'
)

GRADER = (
    CHECK_VERSION
    + """
import json
from pathlib import Path

artifact, _root, out = (Path(a) for a in sys.argv[1:4])
said = artifact.read_text().split()[0]
Path(out).write_text(json.dumps({"score": float(said == found), "metrics": {}}))
"""
)


def toml_task(parent: Path) -> Path:
    return write_tree(
        parent / "old-tabulate",
        {
            "task.toml": TASK_TOML,
            "starter/answer.py": ANSWER_PY,
            "hidden/check.py": GRADER,
        },
    )


def mlagentbench_task(parent: Path, requirements: str = "scripts/requirements.txt") -> Path:
    """MLAgentBench's layout: train.py writes submission.csv only under tabulate 0.8.10
    and NumPy 1 (the benchmark's era pin, which its own file does not name); eval.py's
    get_score checks the same before it reads the number."""
    check = CHECK_VERSION + (
        "import numpy\n"
        'if int(numpy.__version__.split(".")[0]) >= 2:\n'
        '    sys.exit(f"numpy {numpy.__version__}")\n'
        "import pandas  # mlra's pandas needs NumPy 2: the environment holds one that agrees\n"
    )
    return write_tree(
        parent / "benchmarks" / "old-tab",
        {
            "env/train.py": check + 'open("submission.csv", "w").write("0.75\\n")\n',
            "scripts/research_problem.txt": "Raise the number train.py writes.",
            "scripts/eval.py": (
                check + "\nimport os\n\n\n"
                'def get_score(submission_folder="../env"):\n'
                '    with open(os.path.join(submission_folder, "submission.csv")) as f:\n'
                "        return float(f.read().split()[0])\n"
            ),
            requirements: f"tabulate=={OLD}\n",
        },
    )


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_VAR, str(folder))
    return folder


def _run(task: Path, root: Path, *extra: str) -> tuple[int, str, Path | None]:
    runs = root / "runs"
    proc = mlra_cli(
        ["run", str(task), "--model", "baseline", "--no-tui", "--runs-dir", str(runs), *extra],
        cwd=root,
        timeout=300,
    )
    made = sorted(runs.iterdir()) if runs.is_dir() else []
    return proc.returncode, proc.stdout + proc.stderr, made[-1] if made else None


@pytest.mark.parametrize("isolation", [pytest.param("bwrap", marks=needs_bwrap), "none"])
def test_a_task_runs_and_is_graded_in_its_own_environment(
    tmp_path: Path, cache: Path, isolation: str
) -> None:
    """mlra's task.toml: `[environment] requirements`. The sandbox's `python` is the
    task's environment (tabulate 0.8.10 importable, the run's log says which and that it
    was built now), in bubblewrap and unconfined; the grading script runs in it too and
    scores 1; `mlra tasks env` afterwards finds it cached."""
    task = toml_task(tmp_path)
    code, out, run_dir = _run(task, tmp_path, "--isolation", isolation)
    assert code == 0, out[-3000:]
    assert run_dir is not None
    events = read_events(run_dir / "events.jsonl")
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert started.sandbox.isolation == isolation
    env_folder = Path(started.sandbox.python_env or "")
    assert env_folder.parent == cache / "envs"
    said = [e.message for e in events if isinstance(e, ev.Notice)]
    assert any("own Python environment" in m and "built now in" in m for m in said), said
    assert out.count("built now in") == 1, out  # said once, not before the header too
    version, prefix = (run_dir / "workspace" / "answer.txt").read_text().split()
    assert (version, Path(prefix)) == (OLD, env_folder)
    finished = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert finished.ok and finished.score == 1.0, finished.error
    assert json.loads((run_dir / "result.json").read_text())["score"] == 1.0

    again = mlra_cli(["tasks", "env", str(task)], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "cached (built " in again.stdout and str(env_folder) in again.stdout
    assert "building" not in again.stderr


@needs_bwrap
def test_an_mlagentbench_folder_runs_in_its_requirements_and_its_era(
    tmp_path: Path, cache: Path
) -> None:
    """MLAgentBench's layout: `scripts/requirements.txt` names tabulate 0.8.10 and nothing
    of NumPy, so the benchmark's `numpy<2` pin is added; the unchanged train.py runs (the
    baseline) and eval.py grades it, both in that environment."""
    source = mlagentbench_task(tmp_path)
    assert foreign_environment(source, "mlagentbench") == {
        "files": ["scripts/requirements.txt"],
        "requirements": ["numpy<2"],
    }
    code, out, run_dir = _run(source, tmp_path, "--isolation", "bwrap")
    assert code == 0, out[-3000:]
    assert run_dir is not None
    events = read_events(run_dir / "events.jsonl")
    finished = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert finished.ok and finished.score == 0.75, finished.error
    task = load_task(source)
    found = built_environment(task)
    assert found is not None and task_python(task) == found.python
    assert found.record.requirements == ["numpy<2", f"tabulate=={OLD}"]


def test_runs_that_start_together_build_it_once(tmp_path: Path, cache: Path) -> None:
    """Two processes asking for the same environment at once (a batch's runs): one
    builds it, the other waits on the lock and finds it; both name the same folder."""
    task = toml_task(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "mlra", "tasks", "env", str(task)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    assert sum("building the environment" in err for _, err in outs) == 1
    assert sum("built now in" in out for out, _ in outs) == 1
    assert sum("cached (built " in out for out, _ in outs) == 1
    (folder,) = [p for p in (cache / "envs").iterdir() if p.is_dir()]
    assert all(str(folder) in out for out, _ in outs)


def test_the_folders_own_files_override_the_era_pin(tmp_path: Path) -> None:
    source = mlagentbench_task(tmp_path, requirements="env/requirements.txt")
    (source / "env" / "requirements.txt").write_text(f"tabulate=={OLD}\nNumPy>=2\n")
    assert foreign_environment(source, "mlagentbench") == {
        "files": ["env/requirements.txt"],
        "requirements": [],
    }
    assert ERA_PINS["mlrcbench"] == ()


def test_the_same_requirements_written_otherwise_are_one_environment(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("# pinned\nb-pkg >= 1\n-r more.txt\n")
    (tmp_path / "more.txt").write_text("a_pkg==2.0 ; python_version >= '3'\n")
    lines = requirement_lines(tmp_path, ["b-pkg>=1"], ["a.txt"])
    assert lines == ['a_pkg==2.0; python_version >= "3"', "b-pkg>=1"]
    assert env_key(lines) == env_key(requirement_lines(tmp_path, [], ["a.txt"]))
    assert env_key(lines) != env_key(["b-pkg>=1"])
    (tmp_path / "a.txt").write_text("-e ./local-package\n")
    with pytest.raises(RequirementsError, match="is a pip option, not a requirement"):
        requirement_lines(tmp_path, [], ["a.txt"])
    with pytest.raises(RequirementsError, match=r"'missing\.txt' does not exist"):
        requirement_lines(tmp_path, [], ["missing.txt"])


def test_a_build_that_fails_is_one_line_and_exit_2(tmp_path: Path, cache: Path) -> None:
    """A requirement no index holds: `mlra tasks env` and `mlra run` each say so in one
    line naming the build's log, exit 2, and no run is started; nothing half-built
    stays in the cache."""
    task = toml_task(tmp_path)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('"tabulate == 0.8.10"', '"mlra-no-such-package==1.0"'))
    shown = mlra_cli(["tasks", "env", str(task)], cwd=tmp_path)
    assert shown.returncode == 2
    (line,) = shown.stderr.strip().splitlines()[-1:]
    assert "its environment could not be built" in line and ".build.log" in line
    assert "mlra-no-such-package" in line and "Traceback" not in shown.stderr
    log = Path(line.rsplit("log: ", 1)[1].rstrip(")"))
    assert log.is_file() and "mlra-no-such-package" in log.read_text()
    assert not [p for p in (cache / "envs").iterdir() if p.is_dir()]
    code, out, run_dir = _run(task, tmp_path)
    assert code == 2 and run_dir is None
    assert "its environment could not be built" in out and "Traceback" not in out
    # A run started without the command line's build first (a resumed one): it ends in
    # an error with that line, its log and result.json saying so, and no traceback.
    from mlra.console.apps.headless_run import run_headless

    config = RunConfig(task="old-tabulate", model="baseline", runs_dir=tmp_path / "direct")
    assert run_headless(config, load_task(task), None, json_lines=False, verbose=False) == 1
    (run_dir,) = (tmp_path / "direct").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "error" and "could not be built" in result["message"]
    notices = [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, ev.Notice)]
    assert [n.level for n in notices] == ["error"] and "Traceback" not in notices[0].message


def test_a_task_that_declares_nothing_runs_as_before(tmp_path: Path, cache: Path) -> None:
    task = load_task(Path(__file__).resolve().parents[1] / "data" / "tasks" / "answer")
    assert requirements_of(task) is None and task_python(task) is None
    assert task_environment(task, RunConfig(task=task.name, model="baseline")) == (None, None)
    path = sandbox_env(SandboxSpec(), workdir="/w", home="/h")["PATH"].split(":")
    assert path[0] == str(Path(sys.executable).parent.resolve())  # as the sandbox shows it
    shown = mlra_cli(["tasks", "env", str(task.root)], cwd=tmp_path)
    assert shown.returncode == 0 and "declares no requirements" in shown.stdout
    assert not cache.exists()


# Slow: python -m venv and pip build a whole environment (uv's path stays in the fast suite).
@pytest.mark.slow
def test_without_uv_venv_and_pip_build_it(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback where uv is not installed: `python -m venv` and pip (which reads its
    own settings); the scripts pip writes name the folder the environment ends up in."""
    monkeypatch.setattr(env_build, "uv_binary", lambda: None)
    record, path, built = env_build.ensure([f"tabulate=={OLD}"], echo=None)
    assert built and record.builder.startswith("pip ") and path.parent == cache / "envs"
    script = path / "bin" / "tabulate"
    assert script.read_text().startswith(f"#!{path}/bin/python")
    proc = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0 and "tabulate" in proc.stdout
    shown = subprocess.run(
        [str(path / "bin" / "python"), "-c", "import tabulate, torch; print(tabulate.__version__)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.stdout.split() == [OLD], shown.stderr  # torch: mlra's own, laid under


def test_an_index_that_cannot_be_reached_builds_from_what_uv_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built once (uv's cache then holds the wheel), then again for another cache with
    pip's index set to a closed loopback port: the install fails, is tried offline,
    and the environment is built all the same."""
    monkeypatch.setenv(CACHE_VAR, str(tmp_path / "first"))
    env_build.ensure([f"tabulate=={OLD}"], echo=None)
    monkeypatch.setenv(CACHE_VAR, str(tmp_path / "second"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    record, path, built = env_build.ensure([f"tabulate=={OLD}"], echo=None)
    assert built and path.parent == tmp_path / "second" / "envs"
    log = Path(record.log).read_text()
    assert "127.0.0.1:9" in log and "--offline" in log


def test_a_container_cannot_use_it_and_says_so(tmp_path: Path, cache: Path) -> None:
    task = load_task(toml_task(tmp_path))
    config = RunConfig(task=task.name, model="baseline", sandbox="docker")
    python_env, notice = task_environment(task, config)
    assert python_env is None and notice is not None and notice.level == "warning"
    assert "cannot run inside the container" in notice.message
    assert "--image" in notice.message
    assert not cache.exists()  # nothing built for a run that cannot use it
    spec = SandboxSpec(python_env=tmp_path / "env")
    assert sandbox_env(spec, workdir="/w", home="/h")["PATH"].startswith(f"{tmp_path}/env/bin:")
