"""What a benchmark's folder needs is found out before a run, not hours into it (issue
26): a folder this machine cannot grade (no eval.py, an evaluator importing a module
that is not installed, a dataset it would download with no network, a test phase
scored online) is refused in one line, exit 2, unless run `--ungraded`; what the
starter lacks is said; a prepare.py that exits 0 without data is a failed prepare,
never cached. Folders in both layouts, written here."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.cli.cli import main as mlra_main
from mlra.tasks.foreign.common import CACHE_VAR
from mlra.tasks.foreign.loader import marker
from mlra.tasks.foreign.prepare import prepare_log, prepared
from mlra.tasks.spec import load_task
from tests.tasks.folders import write_tree

MISSING = "mlra_surely_absent_module"
"""A module no interpreter here has."""

EVAL_PY = (
    "import os\n\n"
    'def get_score(submission_folder="../env"):\n'
    '    with open(os.path.join(submission_folder, "submission.csv")) as f:\n'
    "        return float(f.read().split()[0])\n"
)


def mab_folder(
    parent: Path, name: str = "tiny", files: dict[str, str | None] | None = None
) -> Path:
    """An MLAgentBench folder: train.py writes submission.csv, eval.py reads it. `files`
    replace the defaults; one given as None is left out."""
    chosen: dict[str, str | None] = {
        "env/train.py": 'import json\nopen("submission.csv", "w").write("0.5\\n")\n',
        "scripts/research_problem.txt": "Raise the number train.py writes.",
        "scripts/eval.py": EVAL_PY,
    }
    chosen.update(files or {})
    return write_tree(
        parent / "benchmarks" / name, {k: v for k, v in chosen.items() if v is not None}
    )


def mlrc_folder(parent: Path, name: str = "tiny-mlrc", evaluation: str = "") -> Path:
    """An MLRC-Bench folder: main.py runs a method, evaluation.py (read-only, so part of
    the grader) scores it."""
    return write_tree(
        parent / "benchmarks_base" / name,
        {
            "env/main.py": (
                "import argparse\nfrom evaluation import score\nfrom methods import "
                "all_method_handlers\nfrom MLAgentBench.utils import save_evals\n"
            ),
            "env/evaluation.py": evaluation + "def score(m):\n    return 0.5\n",
            "env/constants.py": "SCALE = 1\n",
            "env/methods/__init__.py": "def all_method_handlers():\n    return {}\n",
            "env/methods/MyMethod.py": "import math\n",
            "scripts/research_problem.txt": "Do better than my_method.",
            "scripts/read_only_files.txt": "./main.py\n./evaluation.py\n",
            "scripts/test_constants.py": "SCALE = 2\n",
        },
    )


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_VAR, str(folder))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no dataset cached but the test's
    return folder


def _run(source: Path, runs: Path, *more: str) -> int:
    return mlra_main(
        ["run", str(source), "--model", "baseline", "--no-tui", "--runs-dir", str(runs), *more]
    )


def _refused(capsys: pytest.CaptureFixture[str], code: int, runs: Path) -> str:
    """The one line a refusal is, with nothing started."""
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("mlra: "), err
    assert "cannot be graded here" in err[0] and "--ungraded runs it anyway" in err[0]
    assert not runs.exists() or not any(runs.iterdir())
    return err[0]


def test_a_folder_without_eval_py_is_refused_and_runs_ungraded(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mab_folder(
        tmp_path, files={"scripts/eval.py": None, "scripts/prepare.py": "print('hi')\n"}
    )
    runs = tmp_path / "runs"
    line = _refused(capsys, _run(source, runs), runs)
    assert "no scripts/eval.py" in line
    assert not (cache / "prepared").exists()  # refused before its prepare.py ran
    assert mlra_main(["tasks", "show", str(source)]) == 0
    out = capsys.readouterr().out
    assert "this machine: cannot run it now: cannot be graded here: no scripts/eval.py" in out
    assert "ready" not in out.replace("already", "")
    # --ungraded: it runs, said in the log and in result.json.
    _run(source, runs, "--ungraded")
    (run_dir,) = runs.iterdir()
    notices = [e.message for e in read_events(run_dir / "events.jsonl") if isinstance(e, ev.Notice)]
    assert any(
        n.startswith("run ungraded (--ungraded)") and "no scripts/eval.py" in n for n in notices
    )
    result = json.loads((run_dir / "result.json").read_text())
    assert "no scripts/eval.py" in result["ungraded"] and result["score"] is None


def test_a_prepare_that_exits_0_without_data_is_not_cached(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """babylm's prepare.py runs wget and unzip and ignores their failures."""
    source = mab_folder(
        tmp_path,
        files={
            "scripts/prepare.py": (
                "import os\n"
                'print("--2026-11-26--  https://example.invalid/babylm_data.zip")\n'
                "print(\"wget: unable to resolve host address 'example.invalid'\")\n"
                'print("unzip:  cannot find or open babylm_data.zip")\n'
            )
        },
    )
    assert mlra_main(["tasks", "prepare", str(source)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("preparing tiny: running scripts/prepare.py once")
    (line,) = err[1:]
    assert (
        "scripts/prepare.py exited 0 but its download failed: it could not reach its server, "
        "and prepare.py needs the network"
    ) in line
    assert "unable to resolve host address" in line
    log = Path(line.rsplit("(its whole output: ", 1)[1].rstrip(")"))
    assert log.is_file() and "cannot find or open" in log.read_text()
    prepared_dir = cache / "prepared"
    assert not [p for p in prepared_dir.iterdir() if p.is_dir()]  # nothing kept, no .partial
    # The first run's prepare is checked the same way: refused, nothing cached.
    runs = tmp_path / "runs"
    assert _run(source, runs) == 2
    assert "its download failed" in capsys.readouterr().err
    assert not [p for p in prepared_dir.iterdir() if p.is_dir()]
    # A data folder left empty is a failed prepare too.
    (source / "scripts" / "prepare.py").write_text('import os\nos.makedirs("../env/data")\n')
    assert mlra_main(["tasks", "prepare", str(source)]) == 2
    assert "left an empty data folder: env/data" in capsys.readouterr().err
    assert not [p for p in prepared_dir.iterdir() if p.is_dir()]


def test_a_copy_cached_before_the_check_is_checked_again_and_made_afresh(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mab_folder(
        tmp_path,
        files={
            "scripts/prepare.py": (
                'import os\nos.makedirs("../env/data")\nopen("../env/data/x.csv", "w").write("1\\n")\n'
            )
        },
    )
    first = prepared(load_task(source), echo=lambda _: None)
    (first.root / "env" / "data" / "x.csv").unlink()  # as a failed download left it
    assert mlra_main(["tasks", "prepare", str(source)]) == 0
    captured = capsys.readouterr()
    assert f"{first.root}: removed: the scripts/prepare.py that made it exited 0 but left " in (
        captured.err
    )
    assert str(prepare_log(first.root)) in captured.err
    assert (first.root / "env" / "data" / "x.csv").is_file()  # prepared afresh
    assert marker(first.root) is not None
    out = captured.out.splitlines()
    assert out[0] == f"prepared:   {first.root} (from {source.resolve()})"
    assert "evaluator:  imports all found" in out and "starter:    imports all found" in out
    assert "downloads:  none needed" in out
    # A copy that holds its data is kept as it is.
    assert mlra_main(["tasks", "prepare", str(source)]) == 0
    assert "removed" not in capsys.readouterr().err


HF_RETRY = (
    "'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
    "exceeded with url: /x (Caused by NewConnectionError('Failed to establish a new "
    "connection: [Errno 111] Connection refused'))\"))' thrown while requesting HEAD "
    "https://huggingface.co/x; Retrying in 1s [Retry 1/5]."
)
PIP_RETRY = (
    "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) "
    "after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection."
    "HTTPSConnection object>: Failed to establish a new connection: [Errno 101] Network is "
    "unreachable')': /simple/torch/"
)


def test_a_prepare_that_retried_and_succeeded_is_prepared_and_kept(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """huggingface_hub and pip print a line for each retry, naming a server they could
    not reach, and then succeed: the prepare was called failed, and `mlra tasks prepare`
    removed the good copy it had cached."""
    source = mab_folder(
        tmp_path,
        files={
            "scripts/prepare.py": (
                f"print({HF_RETRY!r})\nprint({PIP_RETRY!r})\n"
                'import os\nos.makedirs("../env/data")\n'
                'open("../env/data/x.csv", "w").write("1\\n")\n'
            )
        },
    )
    assert mlra_main(["tasks", "prepare", str(source)]) == 0
    err = capsys.readouterr().err
    assert "failed" not in err and "removed" not in err
    copy = prepared(load_task(source), echo=lambda _: None).root
    assert marker(copy) is not None and "Retrying in 1s" in prepare_log(copy).read_text()
    # Checked again by the next `mlra tasks prepare`: kept, not prepared afresh.
    (copy / "kept").write_text("")
    assert mlra_main(["tasks", "prepare", str(source)]) == 0
    assert "removed" not in capsys.readouterr().err
    assert (copy / "kept").is_file()
    # The same line explains a failure found: the data folder left empty.
    failing = mab_folder(
        tmp_path,
        "failing",
        files={
            "scripts/prepare.py": f'print({HF_RETRY!r})\nimport os\nos.makedirs("../env/data")\n'
        },
    )
    assert mlra_main(["tasks", "prepare", str(failing)]) == 2
    assert (
        "exited 0 but its download failed: it could not reach its server" in capsys.readouterr().err
    )


def test_an_evaluator_importing_a_missing_module_is_refused(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mab_folder(tmp_path, files={"scripts/eval.py": f"import {MISSING}.sub\n" + EVAL_PY})
    runs = tmp_path / "runs"
    line = _refused(capsys, _run(source, runs), runs)
    assert f"its evaluator imports {MISSING} (scripts/eval.py), not installed" in line
    assert mlra_main(["tasks", "show", str(source)]) == 0
    out = capsys.readouterr().out
    assert f"evaluator:  imports {MISSING} (scripts/eval.py), not installed" in out
    assert "this machine: cannot run it now: cannot be graded here" in out
    # The grader's code is what eval.py imports of the folder's own, not every hidden file.
    (source / "scripts" / "eval.py").write_text("import scoring\n" + EVAL_PY)
    write_tree(
        source / "scripts", {"scoring.py": f"import {MISSING}\n", "unused.py": "import nope_x\n"}
    )
    line = _refused(capsys, _run(source, runs), runs)
    assert f"its evaluator imports {MISSING} (scripts/scoring.py)" in line
    assert "nope_x" not in line
    # The same in MLRC-Bench's layout: its read-only evaluation.py is the grader's code.
    mlrc = mlrc_folder(tmp_path, evaluation=f"from {MISSING} import thing\n")
    line = _refused(capsys, _run(mlrc, runs), runs)
    assert f"its evaluator imports {MISSING} (env/evaluation.py)" in line


def test_the_starters_missing_modules_are_reported(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reported, not refused: the agent may write the starter anew. The folder's own
    modules, relative imports, `__future__` and imports guarded by `except ImportError`
    are not needs."""
    train = (
        "from __future__ import annotations\nimport helper\nfrom . import sibling\n"
        f"try:\n    import {MISSING}_optional\nexcept ImportError:\n    pass\n\n"
        f"def main():\n    import {MISSING}\n\n"
        'open("submission.csv", "w").write("0.5\\n")\n'
    )
    source = mab_folder(tmp_path, files={"env/train.py": train, "env/helper.py": "X = 1\n"})
    assert mlra_main(["tasks", "show", str(source)]) == 0
    out = capsys.readouterr().out
    assert f"starter:    imports {MISSING} (env/train.py), not installed: its first run" in out
    assert f"{MISSING}_optional" not in out and "helper" not in out
    assert f"this machine: can run and grade it, but the starter imports {MISSING}" in out
    runs = tmp_path / "runs"
    _run(source, runs)
    capsys.readouterr()
    assert mlra_main(["tasks", "prepare", str(source)]) == 0
    assert f"starter:    imports {MISSING} (env/train.py)" in capsys.readouterr().out
    (run_dir,) = runs.iterdir()
    notices = [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, ev.Notice)]
    told = [n for n in notices if f"the starter imports {MISSING}" in n.message]
    assert len(told) == 1 and told[0].level == "warning"
    assert json.loads((run_dir / "result.json").read_text())["ungraded"] is None


def test_a_module_the_starter_imports_in_many_files_is_named_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """MLAgentBench's CLRS imports jax in 15 files: `tasks show` named each pair,
    "jax (env/a.py), jax (env/b.py), ...", a 2,000-character line."""
    files = {f"env/part{i}.py": f"import {MISSING}\nimport {MISSING}_two\n" for i in range(5)}
    files["env/train.py"] = "import part0\nopen('submission.csv', 'w').write('0.5\\n')\n"
    source = mab_folder(tmp_path, files=files)
    assert mlra_main(["tasks", "show", str(source)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("starter:")]
    assert line.count(f"{MISSING} (") == 1 and line.count(f"{MISSING}_two (") == 1
    assert f"{MISSING} (env/part0.py and 4 more files)" in line


def test_an_evaluator_downloading_a_dataset_offline_is_refused(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = mab_folder(
        tmp_path,
        files={
            "scripts/eval.py": (
                "from datasets import load_dataset\n" + EVAL_PY + "\n"
                "def labels():\n    return load_dataset('some-name', split='test')\n\n"
                "def local():\n    return load_dataset('csv', data_files='answers.csv')\n"
            ),
            "env/train.py": (
                "import torchvision\n"
                "def data():\n"
                "    return torchvision.datasets.CIFAR10(root='./data', download=True)\n"
            ),
        },
    )
    runs = tmp_path / "runs"
    line = _refused(capsys, _run(source, runs), runs)
    assert 'grading would download load_dataset("some-name") (scripts/eval.py) with no' in line
    assert "csv" not in line
    # The starter's download is said; a copy in the Hugging Face cache lets grading run.
    write_tree(tmp_path / "hf" / "datasets" / "some-name" / "default", {"data.arrow": "x"})
    assert mlra_main(["tasks", "show", str(source)]) == 0
    out = capsys.readouterr().out
    assert 'downloads:  the starter downloads CIFAR10(root="./data", download=True)' in out
    assert "grading would" not in out and "cannot be graded" not in out


def test_an_mlrc_bench_test_phase_scored_online_is_refused(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """MLRC-Bench's llm-merging and machine_unlearning score their test phase on Kaggle;
    the loader says so in `evaluator.cannot_grade`."""
    from mlra.tasks.foreign import mlrcbench

    online = "its test phase is scored by submitting to Kaggle (online)"
    spec_data = mlrcbench.spec_data

    def said(folder: Path, **kwargs: Any) -> dict[str, Any]:
        data = spec_data(folder, **kwargs)
        data["evaluator"]["cannot_grade"] = data["evaluator"].get("cannot_grade") or online
        return data

    monkeypatch.setattr(mlrcbench, "spec_data", said)
    source = mlrc_folder(tmp_path)
    runs = tmp_path / "runs"
    line = _refused(capsys, _run(source, runs), runs)
    assert online in line
    assert mlra_main(["batch", "--tasks", str(source), "--models", "baseline",
                      "--out", str(tmp_path / "b")]) == 2  # fmt: skip
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("mlra: batch: cannot be graded here: mlrcbench-tiny-mlrc (")
    assert not (tmp_path / "b").exists()


def test_tasks_dir_marks_what_cannot_be_graded(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mab_folder(tmp_path, "a-good")
    mab_folder(tmp_path, "b-no-eval", files={"scripts/eval.py": None})
    mab_folder(tmp_path, "c-starter", files={"env/train.py": f"import {MISSING}\n"})
    assert mlra_main(["tasks", str(tmp_path / "benchmarks")]) == 0
    lines = capsys.readouterr().out.splitlines()
    by_task = {lines[i].split()[0]: lines[i + 1] for i in range(0, len(lines), 2)}
    assert "cannot" not in by_task["mlagentbench-a-good"]
    assert by_task["mlagentbench-b-no-eval"].endswith(
        " · cannot be graded here: no scripts/eval.py"
    )
    assert by_task["mlagentbench-c-starter"].endswith(
        f" · the starter imports {MISSING} (env/train.py), not installed"
    )


KAGGLE_PREPARE = (
    "import subprocess\n"
    'input("Consent to the competition at https://www.kaggle.com/competitions/x/data; '
    'Press any key")\n'
    'subprocess.run(["kaggle", "competitions", "download", "-c", "x"], cwd="../env")\n'
    'subprocess.run(["unzip", "-n", "x.zip"], cwd="../env")\n'
)


def test_a_kaggle_prepare_is_said_before_it_runs(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    """MLAgentBench's house-price, on a machine without `kaggle`: `tasks show` said
    "this machine: ready" and nothing of its prepare.py's download, and the run then
    failed at once in prepare.py."""
    source = mab_folder(tmp_path, "kaggled", files={"scripts/prepare.py": KAGGLE_PREPARE})
    monkeypatch.setenv("PATH", str(tmp_path / "no-commands"))
    assert mlra_main(["tasks", "show", str(source)]) == 0
    out = capsys.readouterr().out
    lacking = "its scripts/prepare.py runs `kaggle`, which is not installed (pip install kaggle"
    assert f"this machine: cannot run it now: {lacking}" in out
    assert (
        "prepared:   not yet; `mlra run` runs scripts/prepare.py first, once; it downloads "
        "with `kaggle`, which needs the network, Kaggle credentials and the competition's "
        "rules accepted on its page"
    ) in out
    assert mlra_main(["tasks", str(tmp_path / "benchmarks")]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("mlagentbench-kaggled") and lacking in listed[1]


def test_a_prepare_applying_a_patch_with_git_is_no_download(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`git apply` reads a patch in the folder: `tasks show` said it downloads with git."""
    prepare = 'import subprocess\nsubprocess.run(["git", "apply", "fix.patch"])\n'
    source = mab_folder(tmp_path, "patched", files={"scripts/prepare.py": prepare})
    assert mlra_main(["tasks", "show", str(source)]) == 0
    out = capsys.readouterr().out
    assert "prepared:   not yet; `mlra run` runs scripts/prepare.py first, once\n" in out


def test_an_imported_kaggle_task_is_not_held_back_by_its_prepare(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    """`mlra tasks import` prepares the task and copies scripts/ as its hidden files,
    prepare.py with them, and the imported folder's run never runs it: `tasks show`
    said "cannot run it now: ... runs `kaggle`, which is not installed"."""
    zipped = "import zipfile; zipfile.ZipFile('x.zip', 'w').writestr('train.csv', '1')"
    commands = write_tree(
        tmp_path / "bin", {"kaggle": f'#!/bin/sh\nexec {sys.executable} -c "{zipped}"\n'}
    )
    (commands / "kaggle").chmod(0o755)
    monkeypatch.setenv("PATH", f"{commands}:{os.environ['PATH']}")
    source = mab_folder(tmp_path, "kaggled", files={"scripts/prepare.py": KAGGLE_PREPARE})
    imported = tmp_path / "imported"
    assert mlra_main(["tasks", "import", str(source), str(imported)]) == 0
    assert (imported / "scripts" / "prepare.py").is_file()
    capsys.readouterr()
    monkeypatch.setenv("PATH", str(tmp_path / "no-commands"))
    assert mlra_main(["tasks", "show", str(imported)]) == 0
    out = capsys.readouterr().out
    assert "`kaggle`" not in out
    assert "this machine: ready" in out


def test_a_batch_runs_ungraded_tasks_only_when_told(tmp_path: Path, cache: Path) -> None:
    from mlra.batch.run_ids import run_names
    from mlra.batch.spec import expand, parse_spec, run_command

    source = mab_folder(tmp_path, files={"scripts/eval.py": None})
    batch = parse_spec({"tasks": [str(source)], "models": ["baseline"], "ungraded": True})
    (run,) = expand(batch, run_names(tmp_path / "b"))
    assert run_command(run, batch, tmp_path, python="python")[-1] == "--ungraded"


def mlra_task(parent: Path, grade: str, environment: str = "") -> Path:
    """An mlra task folder whose evaluator script is `grade`."""
    toml = (
        'name = "needs-demo"\ntitle = "Needs demo"\n\n[prompt]\ntask = "Write 0.5."\n\n'
        '[files]\nstarter = ["starter"]\nhidden = ["hidden"]\n\n'
        '[metric]\nname = "score"\n\n'
        '[evaluator]\nkind = "script"\nartifact = "out.txt"\n'
        '[evaluator.settings]\nscript = "hidden/grade.py"\n' + environment
    )
    return write_tree(
        parent / "needs-demo",
        {
            "task.toml": toml,
            "starter/run.py": "import hidden_helper_is_not_imported_here\n",
            "starter/hidden_helper_is_not_imported_here.py": "",
            "hidden/grade.py": grade,
            "hidden/helper.py": "",
        },
    )


def test_an_mlra_tasks_evaluator_script_is_checked_in_its_environment(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An mlra task's evaluator script is read too (its own helpers are its modules).
    A task whose own environment is not built yet and may bring the module is not
    refused on mlra's interpreter's word: said, and judged once it is built."""
    grade = f"import json\nimport helper\nimport {MISSING}\n"
    source = mlra_task(tmp_path, grade)
    runs = tmp_path / "runs"
    line = _refused(capsys, _run(source, runs), runs)
    assert f"its evaluator imports {MISSING} (hidden/grade.py), not installed" in line
    assert "helper" not in line.replace(MISSING, "")
    pending = mlra_task(
        tmp_path / "env",
        grade,
        environment='\n[environment]\nrequirements = ["mlra-surely-absent-dist==1.0"]\n',
    )
    assert mlra_main(["tasks", "show", str(pending)]) == 0
    out = capsys.readouterr().out
    assert (
        f"evaluator:  imports {MISSING} (hidden/grade.py), not in mlra's interpreter: "
        "judged once its environment is built"
    ) in out
    assert "this machine: ready" in out
