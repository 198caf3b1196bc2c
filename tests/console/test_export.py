"""`mlra export`: a run (with its attempt) and a batch of two runs written into MLflow's
file store, TensorBoard event files and an offline W&B run, each read back with the
tracker's own reader: what a researcher opening them would find. Runs are grouped by
task: a second run of the task exported later joins the first's experiment (project,
folder), the attempts are its run's children, and a batch of two tasks makes two."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from mlra.console.cli.cli import main
from tests.batch.metrics_runs import metrics_run, started_ts
from tests.conftest import mlra_cli

LOSSES = (2.5, 1.5, 0.9, 0.6)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run r1 (job j1's loss over steps, metrics.jsonl's acc over time, two validations,
    score 0.5) with one attempt a1 of its own (loss 3.0, 2.0)."""
    root = tmp_path_factory.mktemp("runs")
    run = metrics_run(root, "r1", losses=LOSSES, score=0.5, seed=7, search="greedy")
    metrics_run(run / "attempts", "a1", losses=(3.0, 2.0), score=0.25)
    return run


@pytest.fixture(scope="module")
def second_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run r2 of the same task, elsewhere: exported on its own, after r1."""
    return metrics_run(tmp_path_factory.mktemp("more"), "r2", losses=(1.0, 0.5), score=0.7)


@pytest.fixture(scope="module")
def batch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    batch = tmp_path_factory.mktemp("batch") / "mybatch"
    metrics_run(batch / "runs", "answer__m__s1", seed=1, score=0.4)
    metrics_run(batch / "runs", "answer__m__s2", seed=2, score=0.6, losses=(2.0, 1.0))
    metrics_run(batch / "runs", "other__m__s1", task="other", score=0.9)
    (batch / "batch.json").write_text("{}", encoding="utf-8")
    return batch


def _export(path: Path, target: str, dest: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["export", str(path), "--to", target, "--dest", str(dest)]) == 0
    return capsys.readouterr().out


# --- MLflow --------------------------------------------------------------------------


def _mlflow(dest: Path) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=dest.resolve().as_uri())


def test_mlflow_holds_params_curves_validations_score_and_artifacts(
    run_dir: Path, second_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "mlruns"
    said = _export(run_dir, "mlflow", dest, capsys)
    assert "experiment 'mlra/answer', 2 runs" in said
    # The way to look at it works with what is installed: mlflow-skinny has no UI.
    import importlib.metadata

    ui = "MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri file://"
    needs_full = all(d.metadata["Name"] != "mlflow" for d in importlib.metadata.distributions())
    assert (f"pip install mlflow, then {ui}" in said) == needs_full and ui in said, said
    client = _mlflow(dest)
    experiment = client.get_experiment_by_name("mlra/answer")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"r1", "r1/a1"}
    run = runs["r1"]
    params = run.data.params
    assert params["task"] == "answer" and params["model"] == "m"
    assert params["seed"] == "7" and params["search"] == "greedy"
    assert params["time_limit_s"] == "3600.0" and params["max_steps"] == "50"
    loss = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in loss] == [(100, 2.5), (200, 1.5), (300, 0.9), (400, 0.6)]
    start = started_ts(run_dir)
    assert [m.timestamp for m in loss] == [int((start + 10 * i) * 1000) for i in (1, 2, 3, 4)]
    acc = client.get_metric_history(run.info.run_id, "acc")  # no steps: numbered in order
    assert [(m.step, round(m.value, 6)) for m in acc] == [(0, 0.2), (1, 0.4), (2, 0.6)]
    validations = client.get_metric_history(run.info.run_id, "validation/accuracy")
    assert [m.value for m in validations] == [0.3, 0.45]
    assert run.data.metrics["score"] == 0.5 and run.data.metrics["normalized_score"] == 0.5
    assert run.info.status == "FINISHED"
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert names == {"result.json", "transcript.txt", "events.jsonl"}
    local = Path(client.download_artifacts(run.info.run_id, "result.json", str(tmp_path)))
    assert json.loads(local.read_text())["score"] == 0.5
    transcript = Path(client.download_artifacts(run.info.run_id, "transcript.txt", str(tmp_path)))
    assert "answer" in transcript.read_text()  # the replay's header names the task
    attempt = runs["r1/a1"]
    assert attempt.data.tags["mlflow.parentRunId"] == run.info.run_id
    assert [m.value for m in client.get_metric_history(attempt.info.run_id, "loss")] == [3.0, 2.0]

    _export(second_run, "mlflow", dest, capsys)  # the task's next run joins the experiment
    _export(run_dir, "mlflow", dest, capsys)  # again: replaces, never doubles
    assert {e.name for e in client.search_experiments()} == {"mlra/answer", "Default"}
    again = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(again) == ["r1", "r1/a1", "r2"]
    assert again["r1/a1"].data.tags["mlflow.parentRunId"] == again["r1"].info.run_id
    assert "mlflow.parentRunId" not in again["r2"].data.tags
    assert again["r2"].data.metrics["score"] == 0.7


def test_a_batch_is_one_mlflow_experiment_with_a_run_per_run(
    batch_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "mlruns"
    said = _export(batch_dir, "mlflow", dest, capsys)
    assert "experiment 'mlra/answer', 2 runs" in said and "'mlra/other', 1 run " in said
    client = _mlflow(dest)
    experiment = client.get_experiment_by_name("mlra/answer")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"answer__m__s1", "answer__m__s2"}
    assert {r.data.tags["mlra.batch"] for r in runs.values()} == {"mybatch"}
    other = client.get_experiment_by_name("mlra/other")
    (run,) = client.search_runs([other.experiment_id])
    assert run.info.run_name == "other__m__s1" and run.data.metrics["score"] == 0.9
    assert {r.data.params["seed"] for r in runs.values()} == {"1", "2"}
    assert runs["answer__m__s2"].data.metrics["score"] == 0.6
    history = client.get_metric_history(runs["answer__m__s2"].info.run_id, "loss")
    assert [m.value for m in history] == [2.0, 1.0]


def test_a_plain_folder_of_runs_exports_as_compare_report_and_share_take_it(
    batch_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`./runs` (run folders, no batch around them): refused as neither a run nor a
    batch folder, while `mlra compare`, `report` and `share` took it."""
    dest = tmp_path / "mlruns"
    said = _export(batch_dir / "runs", "mlflow", dest, capsys)
    assert "experiment 'mlra/answer', 2 runs" in said and "'mlra/other', 1 run " in said
    client = _mlflow(dest)
    experiment = client.get_experiment_by_name("mlra/answer")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"answer__m__s1", "answer__m__s2"}
    assert all("mlra.batch" not in r.data.tags for r in runs.values())  # it is no batch
    a_file = mlra_cli(["export", str(batch_dir / "batch.json"), "--to", "mlflow"], cwd=tmp_path)
    assert a_file.returncode == 2 and a_file.stderr.count("\n") == 1
    assert "batch.json is not a folder" in a_file.stderr


def test_a_run_that_did_not_search_exports_no_attempts_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every run's config holds `attempts` (4, the default) and `attempts_parallel`; only
    a search reads them. A plain run beside a search of 3 attempts showed `attempts 4` in
    MLflow's columns, as if it had made four (`mlra compare` leaves them out)."""
    batch = tmp_path / "b"
    searched = {"attempts": 3, "attempts_parallel": 1}
    metrics_run(batch / "runs", "plain", config={"attempts": 4, "attempts_parallel": 1})
    metrics_run(batch / "runs", "search", search="greedy", config=searched)
    _export(batch, "mlflow", tmp_path / "mlruns", capsys)
    client = _mlflow(tmp_path / "mlruns")
    experiment = client.get_experiment_by_name("mlra/answer")
    runs = {r.info.run_name: r.data.params for r in client.search_runs([experiment.experiment_id])}
    assert runs["search"]["attempts"] == "3" and runs["search"]["search"] == "greedy"
    assert runs["plain"]["search"] == "none"
    assert not {k for k in runs["plain"] if "attempts" in k}, runs["plain"]


def test_a_batch_is_one_tensorboard_logdir_with_a_folder_per_run(
    batch_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    _export(batch_dir, "tensorboard", tmp_path / "tb", capsys)
    runs = EventMultiplexer().AddRunsFromDirectory(str(tmp_path / "tb" / "answer"))
    runs.Reload()
    assert set(runs.Runs()) == {"answer__m__s1", "answer__m__s2"}
    assert {p.name for p in (tmp_path / "tb").iterdir()} == {"answer", "other"}
    assert [s.value for s in runs.Scalars("answer__m__s2", "loss")] == [2.0, 1.0]


def test_a_tensorboard_export_done_again_replaces_the_first(
    batch_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TensorBoard reads every event file of a run's folder: a second export kept beside
    the first would draw each point twice."""
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    _export(batch_dir, "tensorboard", tmp_path / "tb", capsys)
    _export(batch_dir, "tensorboard", tmp_path / "tb", capsys)
    runs = EventMultiplexer().AddRunsFromDirectory(str(tmp_path / "tb" / "answer"))
    runs.Reload()
    assert [s.value for s in runs.Scalars("answer__m__s2", "loss")] == [2.0, 1.0]


# --- TensorBoard ---------------------------------------------------------------------


def test_tensorboard_event_files_read_back(
    run_dir: Path, second_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    dest = tmp_path / "tb"
    _export(run_dir, "tensorboard", dest, capsys)
    _export(second_run, "tensorboard", dest, capsys)
    task = EventMultiplexer().AddRunsFromDirectory(str(dest / "answer"))
    task.Reload()  # one logdir for the task: its runs, the attempt under its run
    assert set(task.Runs()) == {"r1", "r2", "r1/attempts/a1"}
    assert [s.value for s in task.Scalars("r2", "loss")] == [1.0, 0.5]
    folder = dest / "answer" / "r1"
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    loss = acc.Scalars("loss")
    assert [(s.step, round(s.value, 6)) for s in loss] == [
        (100, 2.5),
        (200, 1.5),
        (300, 0.9),
        (400, 0.6),
    ]
    start = started_ts(run_dir)
    assert [s.wall_time for s in loss] == pytest.approx([start + 10 * i for i in (1, 2, 3, 4)])
    assert [round(s.value, 6) for s in acc.Scalars("validation/accuracy")] == [0.3, 0.45]
    assert acc.Scalars("final/score")[0].value == 0.5
    params = acc.Tensors("params")[0].tensor_proto.string_val[0].decode()
    assert "| seed | 7 |" in params and "| task | answer |" in params
    assert "_hparams_/session_start_info" in acc.PluginTagToContent("hparams")
    assert {p.name for p in folder.iterdir() if "tfevents" not in p.name} == {
        "result.json",
        "transcript.txt",
        "events.jsonl",
        "attempts",
    }
    attempt = EventAccumulator(str(folder / "attempts" / "a1"))
    attempt.Reload()
    assert [s.value for s in attempt.Scalars("loss")] == [3.0, 2.0]


# --- W&B (offline) -------------------------------------------------------------------


def _wandb_records(path: Path) -> list[Any]:
    """The records of a `.wandb` file: W&B's own protobuf `Record`s in the LevelDB log
    framing wandb-core writes (a 7-byte `:W&B` header, 32 KiB blocks, each record a
    crc32, a length and a type). wandb no longer ships a Python reader of the frame."""
    import importlib

    Record: Any = importlib.import_module("wandb.proto.wandb_internal_pb2").Record
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records: list[Any] = []
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the block's tail is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            break
        pending += chunk
        if kind in (1, 4):  # FULL or LAST
            record = Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def test_wandb_offline_run_reads_back_and_no_key_is_read(
    run_dir: Path,
    second_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    monkeypatch.setenv("WANDB_API_KEY", "key-that-must-not-be-read-0123456789abcdef01234")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing answers there
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    dest = tmp_path / "wb"
    said = _export(run_dir, "wandb", dest, capsys)
    assert "project 'mlra-answer', 2 runs" in said
    _export(second_run, "wandb", dest, capsys)
    assert os.environ["WANDB_API_KEY"].startswith("key-that")  # the user's env is restored
    assert list(home.iterdir()) == []  # wandb's own files stayed under the export's folder
    runs = sorted((dest / "wandb").glob("offline-run-*"))
    assert len(runs) == 3
    found: dict[str, Any] = {}
    for folder in runs:
        (log,) = folder.glob("run-*.wandb")
        records = _wandb_records(log)
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        history: list[dict[str, Any]] = []
        for r in records:
            if r.WhichOneof("record_type") == "history":
                history.append(
                    {
                        (i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                        for i in r.history.item
                    }
                )
        config = {  # the run record's config, and any updates after it
            (i.key or "/".join(i.nested_key)): json.loads(i.value_json)
            for update in [run.config]
            + [r.config for r in records if r.WhichOneof("record_type") == "config"]
            for i in update.update
        }
        summary = {
            (i.key or "/".join(i.nested_key)): json.loads(i.value_json)
            for r in records
            if r.WhichOneof("record_type") == "summary"
            for i in r.summary.update
        }
        found[run.display_name] = (run, history, config, summary, folder)
        text = b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())
        assert b"key-that-must-not-be-read" not in text
    run, history, config, summary, folder = found["r1"]
    assert {r.project for r, *_ in found.values()} == {"mlra-answer"}  # one project a task
    assert run.run_group == "r1" and found["r1/a1"][0].run_group == "r1"
    assert run.job_type == "run" and found["r1/a1"][0].job_type == "attempt"
    assert found["r2"][0].run_group == "r2" and found["r2"][0].job_type == "run"
    losses = [(row["mlra/step"], row["loss"]) for row in history if "loss" in row]
    assert losses == [(100, 2.5), (200, 1.5), (300, 0.9), (400, 0.6)]
    assert [row["validation/accuracy"] for row in history if "validation/accuracy" in row] == [
        0.3,
        0.45,
    ]
    assert config["seed"] == 7 and config["task"] == "answer"
    assert summary["score"] == 0.5
    files = {p.name for p in (folder / "files").iterdir()}
    assert {"result.json", "transcript.txt", "events.jsonl"} <= files
    # Exported again: the same three W&B runs (their ids), not three more beside them.
    ids = {p.name.rsplit("-", 1)[-1] for p in runs}
    _export(run_dir, "wandb", dest, capsys)
    again = sorted((dest / "wandb").glob("offline-run-*"))
    assert len(again) == 3 and {p.name.rsplit("-", 1)[-1] for p in again} == ids


# --- bad input -----------------------------------------------------------------------


def test_bad_input_is_one_line_and_exit_2(run_dir: Path, tmp_path: Path) -> None:
    unknown = mlra_cli(["export", str(run_dir), "--to", "neptune"], cwd=tmp_path)
    assert unknown.returncode == 2 and "neptune" in unknown.stderr
    nothing = mlra_cli(["export", str(tmp_path), "--to", "mlflow"], cwd=tmp_path)
    assert nothing.returncode == 2
    assert nothing.stderr.count("\n") == 1 and "neither a run folder" in nothing.stderr
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize(
    ("target", "module", "pip_name"),
    [
        ("wandb", "wandb", "wandb"),
        ("tensorboard", "tensorboard", "tensorboard"),
        ("mlflow", "mlflow", "mlflow-skinny"),
    ],
)
def test_a_missing_tracker_names_its_one_package(
    run_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    module: str,
    pip_name: str,
) -> None:
    """Not `pip install 'mlra[export]'`, which brings mlflow and wandb (some 40
    packages) for TensorBoard alone."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a)
    )
    assert main(["export", str(run_dir), "--to", target, "--dest", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"mlra: --to {target} needs the {module} package: pip install {pip_name}\n"


# --- a real run ----------------------------------------------------------------------

TRAINER = (
    "for i in $(seq 0 19); do "
    'echo "step $i loss $(awk -v i=$i \'BEGIN { printf "%.4f", 5 * exp(-i / 10) }\')"; '
    "done"
)


async def test_a_scripted_run_whose_job_prints_a_falling_loss_exports_it(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The metrics the recorder read from a real job's output, end to end into TensorBoard
    and MLflow: the falling loss at its steps, the validation, the graded score."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mlra.agent.agents.run import agent_for
    from mlra.agent.providers import resolve_model
    from mlra.agent.run.controller import RunController
    from mlra.agent.setup.config import RunConfig
    from mlra.tasks.spec import load_task
    from tests.fakes.model_server import ScriptedModelServer
    from tests.scripts import call, supervisor_answering, turn

    script = {
        "supervisor": supervisor_answering(),
        "worker": [
            turn("", {"name": "job_start", "arguments": {"command": TRAINER, "name": "train"}}),
            turn("", call("job_wait", job="train", timeout=120)),
            turn("", call("bash", command="echo 42 > answer.txt")),
            turn("", call("validate", path="answer.txt")),
            turn("", call("report", summary="answer.txt holds 42")),
        ],
    }
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer", model="openai/test", runs_dir=tmp_path, run_id="real", isolation="none"
        )
        controller = RunController(config, load_task(answer_task), provider)
        controller.prepare()
        await controller.run(agent_for)
    run = tmp_path / "real"

    _export(run, "tensorboard", tmp_path / "tb", capsys)
    acc = EventAccumulator(str(tmp_path / "tb" / "answer" / "real"))
    acc.Reload()
    loss = acc.Scalars("loss")
    assert [s.step for s in loss] == list(range(20))
    assert loss[0].value == 5.0 and [s.value for s in loss] == sorted(
        (s.value for s in loss), reverse=True
    )
    assert [s.value for s in acc.Scalars("validation/exact_match")] == [0.5]
    score = json.loads((run / "result.json").read_text())["score"]
    assert score is not None and acc.Scalars("final/score")[0].value == score

    _export(run, "mlflow", tmp_path / "mlruns", capsys)
    client = _mlflow(tmp_path / "mlruns")
    (exported,) = client.search_runs([client.get_experiment_by_name("mlra/answer").experiment_id])
    assert exported.data.params["task"] == "answer"
    assert exported.data.params["model"] == "openai/test"
    history = client.get_metric_history(exported.info.run_id, "loss")
    assert [m.step for m in history] == list(range(20))
    transcript = client.download_artifacts(exported.info.run_id, "transcript.txt", str(tmp_path))
    assert "validate" in Path(transcript).read_text()
