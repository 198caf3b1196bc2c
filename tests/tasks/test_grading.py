"""Grading: the rules checked before scoring (read from the files, never by running
the submission), the script evaluator in its own sandbox, `mlra eval`, and
whether this machine can run a task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from mlra import events as ev
from mlra.agent.record.eventlog import EventLog, read_events
from mlra.agent.record.state import fold
from mlra.tasks.constraints import ArchitectureFingerprint, Constraints, check
from mlra.tasks.evaluators.base import run_evaluation
from mlra.tasks.readiness import blockers
from mlra.tasks.spec import load_task
from mlra.tools.sandbox.gpu_inventory import Gpu
from mlra.tools.sandbox.time_out import TimeOut
from tests.conftest import BaselineRun, answer_copy, mlra_cli


def _model(folder: Path, tensors: dict[str, torch.Tensor], config: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(
        json.dumps(
            config
            or {
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "vocab_size": 1000,
            }
        )
    )
    return folder


def _weights(n: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    return {
        "model.embed_tokens.weight": torch.zeros(n, dtype=dtype),
        "model.norm.weight": torch.zeros(10, dtype=dtype),
    }


def test_parameters_and_load_memory_are_counted_from_the_headers(tmp_path: Path) -> None:
    model = _model(
        tmp_path / "m",
        {
            **_weights(1_000_000, torch.bfloat16),
            "model.position_ids": torch.zeros(512, dtype=torch.int64),
        },
    )
    ok, facts = check(model, Constraints(max_parameters=1_000_010, max_load_memory_gb=0.002001))
    assert ok == [] and facts["parameters"] == 1_000_010  # position ids are not weights
    assert facts["load_memory_gb"] == 0.002  # 1,000,010 bf16 values, rounded for the report
    broken, _ = check(model, Constraints(max_parameters=999_999, max_load_memory_gb=0.001))
    assert broken[0] == "max_parameters: the model has 1M parameters, more than the 999,999 allowed"
    assert any(
        b.startswith(
            "max_load_memory_gb: the weights need 0.002 GB to load, more than the 0.001 GB allowed"
        )
        for b in broken
    )


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (
            lambda d: _model(
                d, {"w.qweight": torch.zeros(8, dtype=torch.int32), "w.scales": torch.zeros(2)}
            ),
            "2 quantized tensors, e.g. w.",
        ),
        (lambda d: _model(d, _weights(100, torch.int8)), "quantized tensors"),
        (
            lambda d: _model(
                d,
                _weights(100),
                {"model_type": "llama", "quantization_config": {"quant_method": "bitsandbytes"}},
            ),
            "quantization_config (bitsandbytes)",
        ),
        (
            lambda d: (_model(d, _weights(100)), (d / "model.gguf").write_bytes(b"GGUF"))[0],
            "quantized weight files: model.gguf",
        ),
    ],
)
def test_quantized_submissions_are_refused(tmp_path: Path, make, needle: str) -> None:  # type: ignore[no-untyped-def]
    broken, _ = check(make(tmp_path / "m"), Constraints(forbid_quantized=True))
    assert len(broken) == 1 and broken[0].startswith("forbid_quantized:") and needle in broken[0]


def test_pickled_weights_cannot_be_checked(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    torch.save({"w": torch.zeros(3)}, folder / "pytorch_model.bin")
    (folder / "config.json").write_text("{}")
    broken, _ = check(folder, Constraints(max_parameters=10))
    assert broken and "must be in safetensors format" in broken[0]


def test_only_approved_architectures_pass(tmp_path: Path) -> None:
    rules = Constraints(
        allowed_base_models=[
            ArchitectureFingerprint(
                name="base-a", model_type="llama", hidden_size=64, vocab_size=1000
            )
        ]
    )
    assert check(_model(tmp_path / "a", _weights(10)), rules)[0] == []
    other = _model(
        tmp_path / "b", _weights(10), {"model_type": "gpt2", "hidden_size": 64, "vocab_size": 1000}
    )
    broken, _ = check(other, rules)
    assert (
        broken
        and broken[0].startswith("allowed_base_models:")
        and "base-a" in broken[0]
        and "gpt2" in broken[0]
    )


def test_a_file_that_only_pretends_to_be_safetensors_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"not really")
    broken, _ = check(folder, Constraints(max_parameters=10))
    assert broken and "not a safetensors file" in broken[0]


def _ruled_task(answer_task: Path, tmp_path: Path) -> Path:
    """The answer task, asking for a model folder under a parameter limit."""
    check = (
        "import json, sys\nfrom pathlib import Path\n"
        "artifact, root, out = (Path(a) for a in sys.argv[1:4])\n"
        "secret = (root / 'hidden' / 'expected.txt').read_text().strip()\n"
        "out.write_text(json.dumps({'score': 1.0 if (artifact / 'config.json').exists() else 0.0, 'metrics': {'read_hidden': float(secret == '42')}}))\n"
    )
    return answer_copy(
        tmp_path / "ruled",
        ('artifact = "answer.txt"', 'artifact = "model"'),
        ('submit = "answer.txt"', 'submit = "model"'),
        append="\n[constraints]\nmax_parameters = 1000\nforbid_quantized = true\n",
        files={"hidden/check.py": check},
        source=answer_task,
    )


async def test_a_rule_breaking_submission_gets_no_score_and_says_which_rule(
    answer_task: Path, tmp_path: Path
) -> None:
    task = load_task(_ruled_task(answer_task, tmp_path))
    good = _model(tmp_path / "good", _weights(500))
    outcome = await run_evaluation(task, good, tmp_path / "eval-good")
    assert outcome.ok and outcome.score == 1.0 and outcome.metrics["read_hidden"] == 1.0
    assert outcome.details["constraints"]["parameters"] == 510  # type: ignore[index]
    big = _model(tmp_path / "big", _weights(5000))
    outcome = await run_evaluation(task, big, tmp_path / "eval-big")
    assert not outcome.ok and outcome.score is None
    assert outcome.violations == [
        "max_parameters: the model has 5,010 parameters, more than the 1,000 allowed"
    ]


async def test_the_evaluation_script_runs_confined(answer_task: Path, tmp_path: Path) -> None:
    from mlra.tools.sandbox.bwrap import find_bwrap

    if find_bwrap() is None:
        pytest.skip("no bubblewrap, not even the bundled one; the evaluator runs unconfined")
    task = load_task(_ruled_task(answer_task, tmp_path))
    (tmp_path / "neighbour.txt").write_text("beside the submission")
    (task.root / "hidden" / "check.py").write_text(
        "import json, socket, sys\nfrom pathlib import Path\n"
        "out = Path(sys.argv[3])\n"
        "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); net = 1.0\nexcept OSError:\n    net = 0.0\n"
        "try:\n    Path(sys.argv[1], 'tampered').write_text('x'); wrote = 1.0\nexcept OSError:\n    wrote = 0.0\n"
        "near = Path(sys.argv[1]).parent / 'neighbour.txt'\n"
        "out.write_text(json.dumps({'score': 1.0, 'metrics': {'network': net, 'wrote_submission': wrote, 'saw_neighbour': float(near.exists())}}))\n"
    )
    outcome = await run_evaluation(task, _model(tmp_path / "m", _weights(10)), tmp_path / "eval")
    assert outcome.ok, outcome.error
    # No network, the submission read-only, and nothing of the host beyond what it grades.
    assert outcome.metrics == {"network": 0.0, "wrote_submission": 0.0, "saw_neighbour": 0.0}
    assert outcome.details["isolation"] == "bwrap"
    assert not (tmp_path / "m" / "tampered").exists()


async def test_without_isolation_grading_still_runs_and_says_so(
    answer_task: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLRA_BWRAP", str(tmp_path / "no-such-bwrap"))  # none to be had
    task = load_task(answer_task)
    answer = tmp_path / "answer.txt"
    answer.write_text("42\n")
    outcome = await run_evaluation(task, answer, tmp_path / "eval")
    assert outcome.ok and outcome.score == 1.0
    assert outcome.details["isolation"] == "none"


def test_mlra_eval_grades_a_finished_run_again(
    answer_baseline_run: BaselineRun, tmp_path: Path
) -> None:
    run_dir = answer_baseline_run.run_dir
    (run_dir / "workspace" / "answer.txt").write_text("41\n")
    # What was submitted is graded again, whatever the workspace holds now.
    again = mlra_cli(["eval", str(run_dir)], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (
        "grading the copy of answer.txt frozen at submission, in the run folder's submission/"
        in again.stdout
    )
    assert "exact_match = 1" in again.stdout
    # --path grades the workspace as it is now, and says so.
    changed = mlra_cli(["eval", str(run_dir), "--path", "answer.txt"], cwd=tmp_path)
    assert changed.returncode == 0  # scored (zero is a score)
    assert "grading the workspace as it is now" in changed.stdout
    assert "exact_match = 0" in changed.stdout
    events = read_events(run_dir / "events.jsonl")
    started = [e for e in events if isinstance(e, ev.EvaluationStarted)][-1]
    assert started.graded == "evaluation-artifact/answer.txt"  # relative, as at the run's end
    assert isinstance(events[-1], ev.EvaluationFinished) and events[-1].score == 0.0
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    # Each is recorded as a re-grade (what, when, by whom) beside the run's own score,
    # which it never replaces.
    assert started.regrade_by and "@" in started.regrade_by
    assert "re-grade recorded beside the run's own result" in changed.stdout
    result = json.loads((run_dir / "result.json").read_text())
    assert result["score"] == 1.0 and result["reason"] == "submitted"
    frozen, path = result["regrades"]
    assert frozen["graded"] == "submission/answer.txt" and frozen["score"] == 1.0
    assert path["artifact"] == "answer.txt" and path["score"] == 0.0
    assert path["by"] == started.regrade_by and path["at"] >= frozen["at"]
    listed = mlra_cli(["runs", "--runs-dir", str(run_dir.parent), "--json"], cwd=tmp_path)
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["score"] == 1.0 and row["reason"] == "submitted"
    assert row["regrade_score"] == 0.0 and row["regrade_artifact"] == "answer.txt"
    table = mlra_cli(["runs", "--runs-dir", str(run_dir.parent)], cwd=tmp_path).stdout
    header, line = table.splitlines()
    assert "reason" in header and "re-graded" in header
    assert "submitted" in line and " 0 (answer.txt)" in line
    # A replay tells the run's own grading from the re-grades appended after its end.
    replayed = mlra_cli(["replay", str(run_dir), "--no-tui"], cwd=tmp_path).stdout.splitlines()
    said = [
        ln.split("] ", 1)[1]
        for ln in replayed
        if ln.startswith("[")
        and any(w in ln for w in ("grad", "score", "evaluating"))
        and "grading:" not in ln
    ]
    by = started.regrade_by
    again_by = f"with script (mlra eval by {by}, after the run)…"
    heads = [line.split(" (", 1)[0] if line.startswith(("score", "re-graded")) else line
             for line in said]  # fmt: skip
    assert heads == [
        "evaluating answer.txt with script…",
        "score: exact_match = 1",
        f"re-grading answer.txt {again_by}",
        "re-graded: exact_match = 1",
        f"re-grading answer.txt {again_by}",
        "re-graded: exact_match = 0",
    ], said

    # A link the agent made inside its sandbox is read as the sandbox read it.
    sandbox = fold(events).sandbox
    assert sandbox is not None
    (run_dir / "workspace" / "linked.txt").symlink_to(f"{sandbox.workdir}/answer.txt")
    linked = mlra_cli(["eval", str(run_dir), "--path", "linked.txt"], cwd=tmp_path)
    assert linked.returncode == 0, linked.stdout
    assert "exact_match = 0" in linked.stdout

    # A run whose log another process holds is not graded under it.
    holder = EventLog(
        run_dir / "events.jsonl", start_seq=read_events(run_dir / "events.jsonl")[-1].seq
    )
    try:
        busy = mlra_cli(["eval", str(run_dir)], cwd=tmp_path)
    finally:
        holder.close()
    assert busy.returncode == 2 and "being written by another mlra process" in busy.stderr

    # A frozen copy changed after the run is not what was submitted: it is not graded.
    (run_dir / "submission" / "answer.txt").write_text("42 \n")
    forged = mlra_cli(["eval", str(run_dir)], cwd=tmp_path)
    assert forged.returncode == 2 and "no longer matches the sha256" in forged.stderr

    # One that cannot even be read is refused in one line, not a traceback.
    (run_dir / "submission" / "answer.txt").unlink()
    (run_dir / "submission" / "answer.txt").symlink_to("answer.txt")
    unreadable = mlra_cli(["eval", str(run_dir)], cwd=tmp_path)
    assert unreadable.returncode == 2, unreadable.stderr
    assert len(unreadable.stderr.strip().splitlines()) == 1
    assert "the frozen copy submission/answer.txt cannot be read" in unreadable.stderr


async def test_a_workspace_graded_again_reads_links_as_the_sandbox_did(
    answer_task: Path, tmp_path: Path
) -> None:
    from mlra.tasks.grading import grade

    task = load_task(answer_task)
    workspace = tmp_path / "run" / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "real.txt").write_text("42\n")
    # Made inside the sandbox, where the workspace is /workspace.
    (workspace / "answer.txt").symlink_to("/workspace/real.txt")
    out_dir = tmp_path / "run" / "evaluation"
    started, finished = await grade(
        task, workspace, "answer.txt", out_dir, workdir="/workspace", isolation="none"
    )
    assert finished.ok and finished.score == 1.0, finished.error
    assert started.graded == "evaluation-artifact/answer.txt"
    # Read as a host path, the same link leads out of the workspace.
    _, refused = await grade(task, workspace, "answer.txt", out_dir, isolation="none")
    assert not refused.ok and "outside the workspace" in (refused.error or "")


def test_machine_readiness_names_what_is_missing(
    answer_task: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlra.tasks import readiness

    task = load_task(answer_task)
    assert blockers(task) == []
    gpu_task = task.model_copy(
        update={
            "resources": task.resources.model_copy(
                update={"gpus": 1, "gpu_memory_gb": 40, "network": True}
            )
        }
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    readiness.network.cache_clear()
    monkeypatch.setattr(readiness, "gpus", lambda: ())
    problems = blockers(gpu_task)
    assert problems == [
        "needs 1 GPU; this machine has none",
        "needs the network for its data and models; HF_HUB_OFFLINE=1 is set",
    ]
    monkeypatch.setattr(readiness, "gpus", lambda: (Gpu("0", "NVIDIA A10", 24.0),))
    assert blockers(gpu_task)[0] == "needs 40 GB of GPU memory; the largest GPU here has 24 GB"
    readiness.network.cache_clear()


def test_the_script_evaluator_called_directly_runs_unconfined_and_says_so(
    answer_task: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlra.tasks.evaluators.base import ISOLATION_VAR
    from mlra.tasks.evaluators.script import ScriptEvaluator

    check = (
        "import json, os, sys\nfrom pathlib import Path\n"
        "artifact, out = Path(sys.argv[1]), Path(sys.argv[3])\n"
        "secret = float('OPENAI_API_KEY' in os.environ)\n"
        "score = float(artifact.read_text().strip() == '42')\n"
        "out.write_text(json.dumps({'score': score, 'metrics': {'saw_key': secret}}))\n"
    )
    folder = answer_copy(tmp_path / "task", files={"hidden/check.py": check}, source=answer_task)
    monkeypatch.delenv(ISOLATION_VAR, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-graders")
    answer = tmp_path / "answer.txt"
    answer.write_text("42\n")
    outcome = ScriptEvaluator(load_task(folder)).evaluate(answer, work_dir=tmp_path / "work")
    assert outcome.ok and outcome.score == 1.0, outcome.error
    assert outcome.details["isolation"] == "none"
    assert outcome.metrics == {"saw_key": 0.0}


async def test_grading_that_needs_more_disk_than_the_task_gives_says_so(
    answer_task: Path, tmp_path: Path
) -> None:
    """The grader's scratch quota is the task's disk_gb (not half the disk): an evaluator
    that writes past it fails with the quota and where it came from named."""
    check = (
        "import sys\nfrom pathlib import Path\nout = Path(sys.argv[3])\n"
        "out.with_name('big').write_bytes(b'x' * 60_000_000)\nout.write_text('{\"score\": 1.0}')\n"
    )
    task_dir = answer_copy(
        tmp_path / "task",
        ("network = false", "network = false\ndisk_gb = 0.02"),
        files={"hidden/check.py": check},
        source=answer_task,
    )
    answer = tmp_path / "answer.txt"
    answer.write_text("42\n")
    outcome = await run_evaluation(load_task(task_dir), answer, tmp_path / "eval")
    assert not outcome.ok and outcome.error is not None
    assert outcome.error.startswith(
        "grading needed more disk than its scratch quota of 20 MB (the task's [resources] disk_gb)"
    ), outcome.error
    limits = outcome.details["limits"]
    assert isinstance(limits, dict) and limits["disk_mb"] == 20


async def test_a_validations_time_out_keeps_the_evaluators_own_limit(
    answer_task: Path, tmp_path: Path
) -> None:
    """A validation's time-out (a `TimeOut` its run may raise) was taken as it was: one
    longer than the evaluator's own let the grading run on past the task's limit."""
    check = (
        "import sys, time\nfrom pathlib import Path\ntime.sleep(60)\n"
        "Path(sys.argv[3]).write_text('{\"score\": 1.0}')\n"
    )
    task_dir = answer_copy(
        tmp_path / "task",
        ('timeout = "1m"\nsettings', 'timeout = "2s"\nsettings'),
        files={"hidden/check.py": check},
        source=answer_task,
    )
    answer = tmp_path / "answer.txt"
    answer.write_text("42\n")
    limit = TimeOut(600, wanted=3600)  # the run has far longer left, and may raise it
    outcome = await run_evaluation(load_task(task_dir), answer, tmp_path / "eval", timeout_s=limit)
    assert outcome.timed_out and outcome.error == "evaluation timed out after 2s", outcome
    assert limit.raise_by(3600) is False  # no raise of the run's takes it past it either
