"""MLAgentBench and MLRC-Bench task folders run as they are (issue 17): tiny folders in
both layouts, built here (no network), run by the baseline agent and by a scripted
agent; prepare.py run once into the cache (a failure is one line, exit 2); a
read-only file the agent tries to change; the dev phase validated, the test phase
graded with the hidden test constants; `mlra tasks show` and `mlra tasks import`."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.cli.cli import main as mlra_main
from mlra.tasks.foreign.common import BASELINE_FILE, CACHE_VAR
from mlra.tasks.foreign.loader import detect, marker
from mlra.tasks.foreign.prepare import prepared
from mlra.tasks.spec import TaskError, check_task, load_task
from tests.conftest import docker_address, docker_problem, mlra_cli
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, plan, turn
from tests.tasks.folders import write_tree


def mlagentbench_task(parent: Path, *, prepare: str | None = None) -> Path:
    """An MLAgentBench folder: train.py writes submission.csv, eval.py's get_score reads
    it; prepare.py adds data to env/ and a hidden answer to scripts/."""
    files = {
        "env/train.py": 'open("submission.csv", "w").write("0.5\\n")\n',
        "env/data.csv": "x\n1\n",
        "scripts/research_problem.txt": "Improve the score train.py writes to submission.csv.",
        "scripts/read_only_files.txt": "data.csv\n",
        "scripts/eval.py": (
            "import os\n\n"
            'def get_score(submission_folder="../env"):\n'
            '    with open(os.path.join(submission_folder, "submission.csv")) as f:\n'
            "        return float(f.read().split()[0])\n"
        ),
        "scripts/prepare.py": prepare
        if prepare is not None
        else (
            'open("../env/prepared.csv", "w").write("ready\\n")\n'
            'open("answer.csv", "w").write("hidden\\n")\n'
        ),
    }
    return write_tree(parent / "benchmarks" / "tiny-mab", files)


MLRC_MAIN = """\
import argparse
import os
import time

from evaluation import evaluate_model, get_score
from methods import all_method_handlers
from MLAgentBench.utils import save_evals

TASK_NAME = "meta-learning"

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", "--method", type=str)
    parser.add_argument("-p", "--phase", type=str, default="dev", choices=["dev", "test"])
    args = parser.parse_args()
    os.makedirs("output", exist_ok=True)
    methods = all_method_handlers()
    method = methods[args.method](args.method)
    start = time.time()
    evaluate_model(method, args.phase)
    runtime = time.time() - start
    score = get_score(method, args.phase)
    save_evals(task_name=TASK_NAME, method_name=args.method, method_class=methods[args.method],
               base_class=methods["my_method"], score=score, phase=args.phase, runtime=runtime)
"""

MLRC_EVALUATION = """\
import json
import shutil
import os

from constants import *  # replaced by the hidden test constants in the test phase


def evaluate_model(method, phase):
    with open(os.path.join("data", DATA)) as f:
        out = [method.predict(float(x)) for x in f.read().split()]
    os.makedirs(os.path.join("output", method.get_name()), exist_ok=True)
    with open(os.path.join("output", method.get_name(), phase + ".json"), "w") as f:
        json.dump(out, f)


def get_score(method, phase):
    with open(os.path.join("output", method.get_name(), phase + ".json")) as f:
        out = json.load(f)
    return SCALE * sum(out) / len(out)
"""


def mlrc_task(parent: Path) -> Path:
    """An MLRC-Bench folder named as one whose scores MLRC-Bench publishes (meta-learning:
    baseline 0.1728, top human 0.699). A method predicts a constant; the dev score is it,
    the test score twice it (test_constants.py's SCALE, on scripts/test_data)."""
    files = {
        "env/main.py": MLRC_MAIN,
        "env/evaluation.py": MLRC_EVALUATION,
        "env/constants.py": 'SCALE = 1.0\nDATA = "dev.txt"\n',
        "env/data/dev.txt": "1 2 3\n",
        "env/methods/__init__.py": (
            "from methods.MyMethod import MyMethod\n\n\n"
            'def all_method_handlers():\n    return {"my_method": MyMethod}\n'
        ),
        "env/methods/BaseMethod.py": (
            "class BaseMethod:\n"
            "    def __init__(self, name):\n        self.name = name\n\n"
            "    def get_name(self):\n        return self.name\n"
        ),
        "env/methods/MyMethod.py": (
            "from methods.BaseMethod import BaseMethod\n\n\n"
            "class MyMethod(BaseMethod):\n    def predict(self, x):\n        return 0.1\n"
        ),
        "scripts/research_problem.txt": "Merge models better than my_method does.",
        "scripts/background.txt": "Model merging combines fine-tuned models.",
        "scripts/read_only_files.txt": "./main.py\n./evaluation.py\nmethods/BaseMethod.py\ndata/*\n",
        "scripts/test_constants.py": 'SCALE = 2.0\nDATA = "test.txt"\n',
        "scripts/test_data/test.txt": "4 5\n",
        "scripts/environment.yml": (
            "name: meta-learning\ndependencies:\n  - python=3.10\n  - cudatoolkit=11.8\n"
            "  - pip\n  - pip:\n    - pydantic>=2\n    - surely-not-installed-pkg==1.0\n"
        ),
    }
    return write_tree(parent / "benchmarks_base" / "meta-learning", files)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_VAR, str(folder))
    return folder


def test_layouts_are_recognized_and_read_as_tasks(tmp_path: Path, cache: Path) -> None:
    mab = load_task(mlagentbench_task(tmp_path))
    assert (mab.name, mab.files.starter, mab.files.hidden) == (
        "mlagentbench-tiny-mab",
        ["env"],
        ["scripts"],
    )
    assert mab.files.read_only == ["data.csv"]
    assert mab.metric.success_rule == "relative_improvement"
    assert mab.metric.success_improvement == 0.10 and mab.metric.baseline is None
    assert mab.baseline.steps[0].command == "python train.py"
    mrc = load_task(mlrc_task(tmp_path))
    assert detect(mrc.root) == "mlrcbench"
    assert (mrc.metric.baseline, mrc.metric.top) == (0.1727912574, 0.699)
    assert mrc.metric.success_rule == "gap_fraction" and mrc.metric.success_fraction == 0.05
    assert set(mrc.files.read_only) == {
        "main.py",
        "evaluation.py",
        "methods/BaseMethod.py",
        "data/dev.txt",
    }
    assert "Model merging" in mrc.render_prompt() and "method_name.txt" in mrc.render_prompt()
    with pytest.raises(TaskError, match="not an MLAgentBench or MLRC-Bench task folder"):
        load_task(tmp_path)


def test_a_folder_of_read_only_files_is_one_read_only_folder(tmp_path: Path, cache: Path) -> None:
    """fathomnet's `images/*` names thousands of images: one mount per file passed
    bubblewrap's 9000 arguments, and the run went on without isolation. A large folder
    whose every file is read-only is read-only as one path; a small one, or one with a
    writable file, keeps its read-only files one by one."""
    source = mlagentbench_task(tmp_path)
    files = {f"env/images/{i:04d}.png": "x" for i in range(3200)}
    files |= {"env/images/train/a.png": "x", "env/notes/key.csv": "x", "env/notes/todo.txt": ""}
    files |= {"env/small/a.csv": "x", "env/small/b.csv": "x"}
    write_tree(source, files)
    (source / "scripts" / "read_only_files.txt").write_text("images/*\n./notes/key.csv\nsmall/*\n")
    task = load_task(source)
    assert task.files.read_only == ["images", "notes/key.csv", "small/a.csv", "small/b.csv"]
    assert "read-only (a write to one fails): images, notes/key.csv, small/a.csv" in (
        task.render_prompt()
    )
    runs = tmp_path / "runs"
    code = mlra_main(
        ["run", str(source), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    )
    assert code == 0
    (run_dir,) = runs.iterdir()
    notices = [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, ev.Notice)]
    assert not [n for n in notices if "without isolation" in n.message]


def test_a_benchmark_folder_missing_its_problem_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mlagentbench_task(tmp_path)
    (source / "scripts" / "research_problem.txt").unlink()
    assert mlra_main(["tasks", "show", str(source)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"mlra: {source}: not a task folder: no task.toml")
    assert "scripts/research_problem.txt" in line and "env/main.py" in line
    # In a benchmark's folder of tasks it is listed as what it is, not left out.
    whole = mlagentbench_task(tmp_path / "more").parent
    source.rename(whole / "no-problem")
    assert mlra_main(["tasks", str(whole)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("no-problem") and "NOT A TASK: it has env/" in listed[0]
    assert listed[1].startswith("mlagentbench-tiny-mab")


def test_prepare_runs_once_and_its_copy_is_the_task(tmp_path: Path, cache: Path) -> None:
    source = mlagentbench_task(tmp_path)
    said: list[str] = []
    first = prepared(load_task(source), echo=said.append)
    assert len(said) == 1 and "running scripts/prepare.py once" in said[0]
    assert first.root.parent == cache / "prepared" and first.root != source
    assert (first.root / "env" / "prepared.csv").is_file()  # prepare.py wrote into the copy
    assert (first.root / "scripts" / "answer.csv").is_file()
    assert not (source / "env" / "prepared.csv").exists()  # never into the benchmark's folder
    found = marker(first.root)
    assert found is not None and found.prepared and found.source == str(source.resolve())
    # A second run finds the copy: no second preparation, the same task.
    again = prepared(load_task(source), echo=said.append)
    assert len(said) == 1 and again.root == first.root
    assert load_task(first.root).root == first.root  # the evaluator's own load of the copy


def test_a_failing_prepare_is_one_line_and_exit_2(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mlagentbench_task(
        tmp_path, prepare='print("downloading...")\nraise SystemExit("no Kaggle credentials")\n'
    )
    runs = tmp_path / "runs"
    code = mlra_main(
        ["run", str(source), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 2 and err[0].startswith("preparing tiny-mab")  # the notice, the error
    assert err[1].startswith("mlra: ") and "scripts/prepare.py failed (exit 1)" in err[1]
    assert "no Kaggle credentials" in err[1] and ".prepare.log" in err[1]
    assert not runs.exists() or not any(runs.iterdir())  # no run was started
    assert not list((cache / "prepared").glob("*/"))  # no half-prepared copy is kept


def test_a_prepare_running_a_command_this_machine_lacks_names_it(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    """MLAgentBench's Kaggle tasks run `kaggle` from prepare.py: where it is not installed
    the last line was Python's "No such file or directory: 'kaggle'" alone."""
    source = mlagentbench_task(
        tmp_path,
        prepare='import subprocess\nsubprocess.run(["kaggle", "competitions", "download"])\n',
    )
    monkeypatch.setenv("PATH", str(tmp_path / "no-commands"))  # no kaggle, whatever is installed
    code = mlra_main(["tasks", "prepare", str(source)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "No such file or directory: 'kaggle'" in err[-1]
    assert (
        "it runs the command `kaggle`, which is not installed (pip install kaggle, with your "
        "Kaggle API token in ~/.kaggle/kaggle.json)"
    ) in err[-1]


KAGGLE_OFFLINE = (
    "HTTPSConnectionPool(host='api.kaggle.com', port=443): Max retries exceeded with url: "
    "/v1/competitions.CompetitionApiService/DownloadDataFiles (Caused by NameResolutionError"
    "(\"HTTPSConnection(host='api.kaggle.com', port=443): Failed to resolve 'api.kaggle.com'\"))"
)
KAGGLE_NO_TOKEN = "Authentication required to call the Kaggle API."


@pytest.mark.parametrize(
    ("kaggle_says", "cause"),
    [
        (KAGGLE_OFFLINE, "it could not reach its server, and prepare.py needs the network"),
        (KAGGLE_NO_TOKEN, "Kaggle has no credentials here: `kaggle auth login`"),
    ],
)
def test_a_prepare_whose_kaggle_download_failed_names_that_not_the_missing_csv(
    tmp_path: Path,
    cache: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: Any,
    kaggle_says: str,
    cause: str,
) -> None:
    """The real spaceship-titanic prepare.py with `kaggle` installed but offline (or not
    logged in): kaggle fails, unzip finds no zip, and prepare.py ends reading
    ../env/train.csv. The line said only that train.csv was missing."""
    bin_dir = write_tree(
        tmp_path / "bin",
        {"kaggle": f"#!/bin/sh\necho {shlex.quote(kaggle_says)}\nexit 1\n"},
    )
    (bin_dir / "kaggle").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    source = mlagentbench_task(
        tmp_path,
        prepare=(
            "import subprocess\n"
            'input("Consent to the competition at https://www.kaggle.com/competitions/x/data; '
            'Press any key after you have accepted the rules online.")\n'
            'subprocess.run(["kaggle", "competitions", "download", "-c", "x"], cwd="../env")\n'
            'print("unzip:  cannot find or open x.zip, x.zip.zip or x.zip.ZIP.", flush=True)\n'
            'open("../env/train.csv")\n'
        ),
    )
    assert mlra_main(["tasks", "prepare", str(source)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "No such file or directory: '../env/train.csv'" in line  # the last line, still
    assert f"the download failed before it: {cause}" in line
    assert "Press any key" not in line and "rules online" not in line
    # identify-contrails' prepare.py ends without reading what it did not download: it
    # exits 0, and the line named unzip's missing zip.
    script = source / "scripts" / "prepare.py"
    script.write_text(script.read_text().replace('open("../env/train.csv")\n', ""))
    assert mlra_main(["tasks", "prepare", str(source)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"scripts/prepare.py exited 0 but its download failed: {cause}" in line


def test_prepare_passes_the_kaggle_consent_pause(tmp_path: Path, cache: Path) -> None:
    """MLAgentBench's Kaggle tasks' prepare.py waits for a key (`input("Consent to the
    competition at ...; Press any key")`): an empty stdin would end it with EOFError."""
    source = mlagentbench_task(
        tmp_path,
        prepare=(
            'input("Consent to the competition at https://www.kaggle.com/competitions/x/data; '
            'Press any key")\n'
            'open("../env/prepared.csv", "w").write("ready\\n")\n'
        ),
    )
    task = prepared(load_task(source), echo=lambda _: None)
    assert (task.root / "env" / "prepared.csv").is_file()


def test_mlagentbench_baseline_is_measured_and_recorded(tmp_path: Path, cache: Path) -> None:
    """`--model baseline` runs the unchanged train.py; get_score grades the frozen
    workspace host-side, and its score becomes the task's recorded baseline."""
    source = mlagentbench_task(tmp_path)
    proc = mlra_cli(
        [
            "run",
            str(source),
            "--model",
            "baseline",
            "--no-tui",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        env={CACHE_VAR: str(cache)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # The artifact is the workspace, `.`: it read "Submit .", "evaluating . with script".
    assert "[ ] submit. Submit the workspace" in proc.stdout
    assert "submitted the workspace — baseline recipe" in proc.stdout
    assert "evaluating the workspace with script…" in proc.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    workspace = {p.name for p in (run_dir / "workspace").iterdir()}
    assert {"train.py", "data.csv", "prepared.csv", "submission.csv"} <= workspace
    assert "answer.csv" not in workspace and "eval.py" not in workspace  # scripts/ stays hidden
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score"] == 0.5
    task = load_task(source)  # read from the prepared copy now
    assert json.loads((task.root / BASELINE_FILE).read_text())["score"] == 0.5
    assert task.metric.baseline == 0.5


def test_the_baseline_is_the_mean_of_its_measured_runs(tmp_path: Path, cache: Path) -> None:
    """A batch of baseline seeds records the starter's mean, not the seed that finished
    last; a run graded again replaces its own measurement."""
    from mlra.tasks.foreign.baselines import record_measured_baseline

    task = prepared(load_task(mlagentbench_task(tmp_path)), echo=lambda _: None)
    (task.root / BASELINE_FILE).write_text(json.dumps({"score": 0.4, "run": "old"}))
    assert record_measured_baseline(task, 0.5, run_id="s1") is not None
    note = record_measured_baseline(task, 0.7, run_id="s2")
    assert note is not None and "now 0.533333, the mean of 3 runs" in note
    record_measured_baseline(task, 0.6, run_id="s2")
    recorded = json.loads((task.root / BASELINE_FILE).read_text())
    assert [r["run"] for r in recorded["runs"]] == ["old", "s1", "s2"]
    assert load_task(task.root).metric.baseline == pytest.approx(0.5)


def test_submitting_a_file_where_the_workspace_is_graded_is_refused_so_it_can_be_mended(
    tmp_path: Path, cache: Path
) -> None:
    """Qwen2.5-Coder-0.5B on MLAgentBench's vectorization submitted `submission.csv`, the
    file the task says to write: it was frozen alone and graded as the workspace,
    `get_score` found no `submission.csv` in it, and the run ended unscored. Now the call
    is refused, the model submits with no path, and the workspace is graded."""
    source = mlagentbench_task(tmp_path)
    script = {
        "supervisor": [
            turn("Plan.", plan("Run it", "Submit")),
            turn("", call("assign_subtask", step_id="1", instructions="Run train.py.")),
            turn("Done.", plan("Run it", "Submit", done=1)),
            turn("", call("submit", path="submission.csv")),
            turn("", call("submit")),
        ],
        "worker": [
            turn("Run.", call("bash", command="python train.py")),
            turn("Check.", call("validate", path="./submission.csv")),
            turn("", call("report", summary="wrote submission.csv")),
        ],
    }
    with ScriptedModelServer(script) as server:
        proc = mlra_cli(
            [
                *("run", str(source), "--model", "openai/test-model"),
                *("--base-url", server.url_for("openai"), "--no-tui"),
                *("--runs-dir", str(tmp_path / "runs")),
            ],
            cwd=tmp_path,
            env={CACHE_VAR: str(cache)},
            timeout=180,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    events = read_events(run_dir / "events.jsonl")
    results = {e.tool: e for e in events if isinstance(e, ev.ToolResult) and not e.ok}
    said = "this task's evaluator reads the whole workspace, not a path in it, so nothing was"
    assert f"{said} validated; validate with no path" in results["validate"].output
    assert f"{said} submitted; submit with no path takes the workspace, 'submission.csv'" in (
        results["submit"].output
    )
    result = json.loads((run_dir / "result.json").read_text())
    assert result["reason"] == "submitted" and result["score"] == 0.5


def _supervisor_submitting_the_workspace() -> list[dict[str, Any]]:
    return [
        turn("Plan.", plan("Write a better method", "Submit")),
        turn("", call("assign_subtask", step_id="1", instructions="Write a better method.")),
        turn("Done.", plan("Write a better method", "Submit", done=1)),
        turn("", call("submit", note="the better method")),
    ]


BETTER = (
    "printf 'from methods.BaseMethod import BaseMethod\\n\\n\\nclass Better(BaseMethod):\\n"
    "    def predict(self, x):\\n        return 0.3\\n' > methods/Better.py && "
    "printf 'from methods.MyMethod import MyMethod\\nfrom methods.Better import Better\\n\\n\\n"
    'def all_method_handlers():\\n    return {"my_method": MyMethod, "better": Better}\\n\' '
    "> methods/__init__.py && echo better > method_name.txt"
)


def test_mlrc_bench_scripted_run_dev_validated_test_graded(tmp_path: Path, cache: Path) -> None:
    """The agent cannot change a read-only file, adds a method, runs and validates the dev
    phase (0.3), names its method and submits; the test phase, host-side with the test
    constants and test data in place, scores it 0.6: normalized against MLRC-Bench's
    published baseline and top human, a success."""
    source = mlrc_task(tmp_path)
    yml = source / "scripts" / "environment.yml"  # its environment is built before the run:
    yml.write_text(yml.read_text().replace("    - surely-not-installed-pkg==1.0\n", ""))
    script = {
        "supervisor": _supervisor_submitting_the_workspace(),
        "worker": [
            turn("Tamper.", call("bash", command="echo 'SCALE = 9' >> evaluation.py")),
            turn("Write it.", call("bash", command=BETTER)),
            turn("Dev.", call("bash", command="python main.py -m better -p dev")),
            turn("Validate.", call("validate")),
            turn("", call("report", summary="method better, dev 0.3")),
        ],
    }
    with ScriptedModelServer(script) as server:
        proc = mlra_cli(
            [
                "run",
                str(source),
                "--model",
                "openai/test-model",
                "--base-url",
                server.url_for("openai"),
                "--no-tui",
                "--runs-dir",
                str(tmp_path / "runs"),
            ],
            cwd=tmp_path,
            env={CACHE_VAR: str(cache)},
            timeout=180,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    events = read_events(run_dir / "events.jsonl")
    results = [e for e in events if isinstance(e, ev.ToolResult) and e.tool == "bash"]
    tamper, _, dev = results
    # Refused by its read-only bind, or first by its owner (root's, as the sandbox's own
    # uid sees it where mlra runs as root: tools/sandbox/run_uid.py).
    refusals = ("read-only file system", "permission denied")
    assert not tamper.ok and any(r in tamper.output.lower() for r in refusals), tamper.output
    assert "SCALE = 9" not in (run_dir / "workspace" / "evaluation.py").read_text()
    assert "better scores 0.3 on the dev set" in dev.output
    (validation,) = [e for e in events if isinstance(e, ev.Validation)]
    assert validation.ok and validation.score == pytest.approx(0.3)
    finished = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert finished.ok and finished.score == pytest.approx(0.6)  # 2.0 x 0.3: the test phase
    assert finished.normalized == pytest.approx((0.6 - 0.1727912574) / (0.699 - 0.1727912574))
    assert finished.success is True


def test_tasks_show_describes_the_folder(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mlrc_task(tmp_path)
    assert mlra_main(["tasks", "show", str(source)]) == 0
    out = capsys.readouterr().out
    assert "# meta-learning (MLRC-Bench)" in out
    assert "found:      an MLRC-Bench task folder" in out
    assert "prepared:   not yet" in out and "references: published" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("requirements: "))
    # Said in words (it read "pip's installed", which parses as nothing).
    assert "scripts/environment.yml: pip installs them in the task's own environment" in line
    assert "conda's packages are not installed: python=3.10, cudatoolkit=11.8" in line
    # A benchmark's folder of tasks is listed, each with its requirements.
    mlagentbench_task(tmp_path)
    assert mlra_main(["tasks", str(tmp_path / "benchmarks")]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split() == ["mlagentbench-tiny-mab", "tiny-mab", "(MLAgentBench)"]
    assert "baseline unknown · direction unknown (success not judged" in listed[1]
    assert (
        "--direction higher|lower or [metric] higher_is_better in the folder's mlra.toml"
        in (listed[1])
    )
    assert "requirements in its own environment (numpy<2)" in listed[1]


def test_an_eval_py_that_cannot_grade_is_said_before_and_after_a_run(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mlagentbench_task(tmp_path)
    eval_py = source / "scripts" / "eval.py"
    for text, said in [
        ("def get_score(folder):\n    return float(open(folder).read()\n", "line 2: '('"),
        ("def score(folder):\n    return 1.0\n", "defines no get_score"),
        ("from helpers import *\n", None),  # may bind it: the grader will tell
    ]:
        eval_py.write_text(text)
        assert mlra_main(["tasks", "show", str(source)]) == 0
        out = capsys.readouterr().out
        assert "; baseline unknown, top reference unknown" in out  # not None
        lines = [ln for ln in out.splitlines() if ln.startswith("grading:")]
        if said is None:
            assert lines == []
        else:
            assert len(lines) == 1 and said in lines[0] and "cannot be graded" in lines[0]
    eval_py.write_text("def get_score(folder):\n    return float(open(folder).read()\n")
    runs = tmp_path / "runs"
    argv = ["run", str(source), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    assert mlra_main(argv) == 2  # refused before it starts: nothing could grade it
    assert "cannot be graded" in capsys.readouterr().err
    assert not runs.exists() or not any(runs.iterdir())
    code = mlra_main([*argv, "--ungraded"])  # asked for: it runs, and grading says why not
    assert code == 1
    (run_dir,) = runs.iterdir()
    finished = next(
        e for e in read_events(run_dir / "events.jsonl") if isinstance(e, ev.EvaluationFinished)
    )
    assert finished.error is not None
    assert "task error: scripts/eval.py line 2: '(' was never closed" in finished.error
    assert "Traceback" not in finished.error


def test_a_get_score_that_returns_no_number_is_said_as_what_it_returned(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Said as eval.py's answer, not as a traceback of the driver's `float(...)` line."""
    source = mlagentbench_task(tmp_path)
    (source / "scripts" / "eval.py").write_text("def get_score(folder):\n    return 'fast'\n")
    runs = tmp_path / "runs"
    argv = ["run", str(source), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    mlra_main(argv)
    (run_dir,) = runs.iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score"] is None
    assert result["evaluation_error"] == (
        "evaluation script failed (exit 1): get_score returned 'fast', not a number"
    )
    assert "no score (evaluation script failed (exit 1): get_score returned 'fast'" in (
        capsys.readouterr().out
    )


def test_tasks_import_writes_a_folder_that_reloads(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mlrc_task(tmp_path)
    out = tmp_path / "imported"
    assert mlra_main(["tasks", "import", str(source), str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    original, imported = load_task(source), load_task(out)
    assert (out / "task.toml").is_file() and detect(out) is None
    assert imported.files.starter == ["env"] and imported.files.hidden == ["scripts"]
    assert sorted(imported.files.read_only) == sorted(original.files.read_only)
    assert imported.metric == original.metric
    assert imported.prompt == original.prompt
    assert (out / "env" / "MLAgentBench" / "utils.py").is_file()  # the stand-in travels
    assert (out / "scripts" / "test_constants.py").is_file()
    assert (out / imported.evaluator.settings["script"]).is_file()
    assert mlra_main(["tasks", "import", str(source), str(out)]) == 2  # not over a folder


def test_a_starter_without_train_py_loads_checked_and_imports(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """MLAgentBench's llama-inference has inference.py and no train.py: its baseline is
    the starter as it is, a recipe the load-time checks accept (which a foreign folder
    goes through too, but for the baseline its first baseline run measures), so its
    import reloads."""
    source = write_tree(
        tmp_path / "benchmarks" / "llama-inference",
        {
            "env/inference.py": 'print("Average per token generation time:  0.5")\n',
            "scripts/research_problem.txt": "Make inference.py faster.",
            "scripts/eval.py": "def get_score(submission_folder):\n    return 2.0\n",
        },
    )
    task = load_task(source)
    assert task.metric.baseline is None and [s.command for s in task.baseline.steps] == ["true"]
    out = tmp_path / "imported"
    assert mlra_main(["tasks", "import", str(source), str(out)]) == 0
    assert load_task(out).baseline.steps == task.baseline.steps
    # The checks run on a foreign folder: only the baseline to measure is let pass.
    task.metric.baseline, task.metric.top = 1.0, 0.5
    with pytest.raises(TaskError, match=r"\(read as a task\): field metric.top: top 0.5 is not"):
        check_task(task, f"{source} (read as a task)", baseline_measured_later=True)


def test_the_task_image_installs_its_requirements(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mlra image build --task PATH`: the task's pip requirements on the base image;
    conda's own packages named for the base to hold. (Built for real where an engine is.)"""
    from mlra.tasks.foreign.image import write_context

    source = mlrc_task(tmp_path)
    dockerfile = write_context(source, tmp_path / "context", base="mlra:latest")
    text = dockerfile.read_text()
    assert "FROM mlra:latest" in text and "RUN pip install -r /tmp/task-requirements.txt" in text
    assert "cudatoolkit=11.8" in text  # pip cannot install it: the base must hold it
    required = (tmp_path / "context" / "requirements.txt").read_text().split()
    assert required == ["pydantic>=2", "surely-not-installed-pkg==1.0"]
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    assert mlra_main(["image", "build", "--task", str(source)]) == 2
    assert "cannot reach the Docker engine" in capsys.readouterr().err
    assert mlra_main(["image", "build", "--task", str(tmp_path)]) == 2
    assert "not an MLAgentBench or MLRC-Bench task folder" in capsys.readouterr().err


def test_a_batch_takes_foreign_folders_and_yaml_it_cannot_read_is_said(
    tmp_path: Path, cache: Path
) -> None:
    """A batch names foreign folders as it names task folders (each run an ordinary
    `mlra run PATH`); an environment.yml that is no YAML is an unknown requirement."""
    from mlra.batch.run_ids import run_names
    from mlra.batch.spec import expand, parse_spec, run_command
    from mlra.tasks.foreign.requirements import check, summary

    source = mlagentbench_task(tmp_path)
    batch = parse_spec({"tasks": [str(source)], "models": ["baseline"], "seeds": 2})
    runs = expand(batch, run_names(tmp_path / "b"))
    assert [r.task_name for r in runs] == ["mlagentbench-tiny-mab"] * 2
    assert run_command(runs[0], batch, tmp_path, python="python")[3:5] == [
        "run",
        str(source.resolve()),
    ]
    (source / "scripts" / "environment.yml").write_text("dependencies: [unclosed\n")
    (result,) = check(source)
    assert result.status == "unknown" and "not readable YAML" in result.detail
    assert summary([result]).startswith("satisfied as far as known (0 met; 1 unknown")


def test_the_task_image_builds_on_the_engine(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a real engine (docker/test-engine.sh): the task's image is built from the base
    it names. The test image has no pip and no registry is reachable, so the task's
    requirements here are conda's only (named in the Dockerfile, nothing installed)."""
    import secrets

    import docker

    problem = docker_problem()
    if problem is not None:
        pytest.skip(problem)
    host = docker_address()
    assert host is not None
    monkeypatch.setenv("DOCKER_HOST", host)
    source = mlagentbench_task(tmp_path)
    (source / "scripts" / "environment.yml").write_text(
        "dependencies:\n  - python=3.11\n  - cudatoolkit=11.8\n"
    )
    tag = f"mlra-task-test-{secrets.token_hex(3)}:1"
    args = ["image", "build", "--task", str(source), "--base", "mlra-test:latest", "--tag", tag]
    assert mlra_main(args) == 0
    assert f"built {tag} (run with --sandbox docker --image {tag})" in capsys.readouterr().out
    client = docker.DockerClient(base_url=host, timeout=30)
    try:
        assert client.images.get(tag).id == client.images.get("mlra-test:latest").id
    finally:
        client.images.remove(tag)


def test_a_requirement_for_another_python_is_not_counted_against_this_machine(
    tmp_path: Path,
) -> None:
    from mlra.tasks.foreign.requirements import check, summary

    source = mlagentbench_task(tmp_path)
    (source / "scripts" / "requirements.txt").write_text(
        'pytest==0.0.1 ; python_version < "3.0"\npytest\n'
    )
    results = check(source)
    assert [r.status for r in results] == ["ok", "ok"]
    assert summary(results) == "satisfied (2 met)"


def test_a_folder_is_not_recognized_by_its_name(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder named as MLAgentBench's vectorization, with an evaluator of its own, is
    not vectorization: nothing says its score is self-reported or which way it improves
    (tests/tasks/test_true_baselines.py: what is recognized, by content)."""
    source = mlagentbench_task(tmp_path).rename(tmp_path / "benchmarks" / "vectorization")
    task = load_task(source)
    assert (task.metric.self_reported, task.metric.direction_known) == ("", False)
    assert mlra_main(["tasks", "show", str(source)]) == 0
    out = capsys.readouterr().out
    assert not [ln for ln in out.splitlines() if ln.startswith("grading:")]
    assert "success:    not judged: which way the score improves is unknown" in out


def test_eval_py_finds_the_tasks_own_files_where_the_benchmark_put_them(
    tmp_path: Path, cache: Path
) -> None:
    """cifar10's eval.py reads its test set from `./data` (prepare.py put it in env/data):
    graded with no network, it must find the task's own copy there, not download it."""
    source = mlagentbench_task(
        tmp_path,
        prepare='import os\nos.makedirs("../env/data")\nopen("../env/data/labels.txt", "w").write("1")\n',
    )
    (source / "env" / "metric.py").write_text("def plus(a, b):\n    return a + b\n")
    (source / "scripts" / "eval.py").write_text(
        "import os\nimport sys\n\n"
        "# as amp-parkinsons' eval.py imports the starter's train.py\n"
        'sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../env"))\n'
        "from metric import plus\n\n"
        "def get_score(submission_folder):\n"
        '    label = open("./data/labels.txt").read()  # as CIFAR10(root="./data") does\n'
        '    guess = open(os.path.join(submission_folder, "submission.csv")).read().split()[0]\n'
        "    return plus(float(guess), float(label))\n"
    )
    runs = tmp_path / "runs"
    code = mlra_main(
        ["run", str(source), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)]
    )
    assert code == 0
    (run_dir,) = runs.iterdir()
    assert json.loads((run_dir / "result.json").read_text())["score"] == 1.5
    out = tmp_path / "imported"  # the imported folder grades the same way
    assert mlra_main(["tasks", "import", str(source), str(out)]) == 0
    assert load_task(out).evaluator.settings["args"][-2:] == ["--env", "env"]
    code = mlra_main(["run", str(out), "--model", "baseline", "--no-tui", "--runs-dir", str(runs)])
    assert code == 0
    (again,) = [d for d in runs.iterdir() if d != run_dir]
    assert json.loads((again / "result.json").read_text())["score"] == 1.5


def test_the_test_phase_imports_the_tasks_evaluation_not_a_planted_one(
    tmp_path: Path, cache: Path
) -> None:
    """evaluation.py put back is not enough: Python would import an unchecked-hash
    `__pycache__/evaluation.*.pyc` or an `evaluation/` package in its place. The grader
    reads no bytecode from the copy and removes what shadows a read-only module."""
    import py_compile
    import subprocess
    import sys

    from mlra.tasks.foreign.mlrcbench import DRIVER

    task = prepared(load_task(mlrc_task(tmp_path)), echo=lambda _: None)
    forged = tmp_path / "forged.py"
    forged.write_text(
        "def evaluate_model(method, phase):\n    pass\n\n\n"
        "def get_score(method, phase):\n    return 99.0\n"
    )
    for attack in ("pyc", "package", "constants"):
        workspace = tmp_path / f"workspace-{attack}"
        shutil.copytree(task.root / "env", workspace)
        if attack == "pyc":
            py_compile.compile(
                str(forged),
                cfile=str(
                    workspace / "__pycache__" / f"evaluation.{sys.implementation.cache_tag}.pyc"
                ),
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
        elif attack == "package":
            (workspace / "evaluation").mkdir()
            shutil.copy(forged, workspace / "evaluation" / "__init__.py")
        else:  # the test constants shadowed
            (workspace / "constants").mkdir()
            (workspace / "constants" / "__init__.py").write_text(
                'SCALE = 100.0\nDATA = "test.txt"\n'
            )
        scratch = tmp_path / f"scratch-{attack}"
        scratch.mkdir()
        proc = subprocess.run(
            [
                sys.executable,
                str(DRIVER),
                str(workspace),
                str(task.root),
                "out.json",
                "--phase",
                "test",
            ],
            cwd=scratch,
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert json.loads((scratch / "out.json").read_text())["score"] == pytest.approx(0.2), attack
