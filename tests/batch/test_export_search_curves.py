"""`mlra export` of a search: its own log holds no training points and no validations
(its attempts trained and validated, each in its own folder), so the search's run in
TensorBoard (and MLflow, W&B) had no curves and no `validation/...` series, only its
attempts' runs did. It now carries those of the attempt it submitted (or graded), on the
search's clock, as `mlra compare` draws a search, and says whose they are. A real search
of the baseline's recipe variants, each printing its loss; read back with TensorBoard's
own reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.record.eventlog import read_events
from mlra.batch.export.source import read_experiment
from mlra.console.cli.cli import main
from mlra.tasks.spec import load_task
from tests.agent.test_search import greedy_search
from tests.conftest import answer_task_as


def _loss_variant_task(answer_task: Path, tmp_path: Path) -> Path:
    """Variants answering {n} (41 scores 0.0 on the validation split, 42 0.5), each
    printing two losses that end in its own {n}: whose curve is shown tells."""
    return answer_task_as(
        answer_task,
        tmp_path,
        "answer-losses",
        (
            'submit = "answer.txt"',
            'submit = "answer.txt"\nvars = { n = "41" }\nvariants = [{}, { n = "42" }]',
        ),
        (
            'python -c \\"print(6 * 7)\\" > answer.txt',
            "echo step 100 loss 3.{n}; echo step 200 loss 2.{n}; echo {n} > answer.txt",
        ),
    )


async def test_a_searchs_export_carries_its_submitted_attempts_curves(
    tmp_path: Path, answer_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    task = load_task(_loss_variant_task(answer_task, tmp_path))
    controller = greedy_search(task, tmp_path, 2)
    result = await controller.run(agent_for)
    assert result.attempts is not None and result.attempts.submitted == "a2", result
    run = controller.run_dir
    a2_started = next(
        e.t
        for e in read_events(run / "events.jsonl")
        if isinstance(e, ev.AttemptStarted) and e.attempt == "a2"
    )

    dest = tmp_path / "tb"
    assert main(["export", str(run), "--to", "tensorboard", "--dest", str(dest)]) == 0
    capsys.readouterr()
    folder = dest / "answer-losses" / run.name
    search = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    search.Reload()
    attempt = EventAccumulator(str(folder / "attempts" / "a2"), size_guidance={"scalars": 0})
    attempt.Reload()
    loss = search.Scalars("loss")
    assert [(s.step, round(s.value, 6)) for s in loss] == [(100, 3.42), (200, 2.42)]
    assert [(s.step, s.value) for s in search.Scalars("validation/exact_match")] == [(1, 0.5)]
    assert [s.value for s in attempt.Scalars("validation/exact_match")] == [0.5]
    # on the search's clock: a2's own points, later by when the search started it
    own = [s.wall_time for s in attempt.Scalars("loss")]
    shifted = [s.wall_time for s in loss]
    start_gap = started_ts(run) - started_ts(run / "attempts" / "a2")
    assert shifted == pytest.approx([w + start_gap + a2_started for w in own], abs=1e-3)
    said = search.Tensors("curves")[0].tensor_proto.string_val[0].decode()
    assert said == "The curves and validations are those of the search's submitted attempt a2."

    tags = {r.name: r.tags for r in read_experiment(run).runs}
    assert tags[run.name]["curves_of"] == "submitted attempt a2"
    assert "curves_of" not in tags[f"{run.name}/a2"]


def started_ts(run_dir: Path) -> float:
    return read_events(run_dir / "events.jsonl")[0].ts
