"""A grading shows its counts rising while it runs, and the log stays small.

The progress reader (tasks/evaluators/progress.py) is run over a real evaluation
process (the real sandbox, runner and script evaluator) whose script draws a real tqdm
bar into a pipe, as lm-eval does: "\\r" + line, so the latest count is ended only by
the next redraw. The script waits, at each count, until the test has seen that count
logged: a count the reader held back until the next redraw would never come.
The pace itself is checked on the reader's own clock, stepped by hand.
"""

from __future__ import annotations

import io
import itertools
import time
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.console.text.headless import TranscriptDisplay
from mlra.tasks.evaluators.base import run_evaluation
from mlra.tasks.evaluators.progress import EVERY_S, ProgressReader, progress_words
from mlra.tasks.spec import load_task
from tests.conftest import answer_copy
from tests.readme_runs import ReadmeRun

STEPPED_BAR = '''
"""Four answers scored under a real tqdm bar; at each count it waits (60 s at most)
until `seen-N` appears in the task folder: the test saw that count logged."""
import json, sys, time
from pathlib import Path
from tqdm import tqdm

artifact, task_root, out = (Path(a) for a in sys.argv[1:4])
bar = tqdm(total=4, desc="Scoring answers", mininterval=0, file=sys.stderr)
for n in range(1, 4):
    bar.update(1)
    deadline = time.monotonic() + 60
    while not (task_root / f"seen-{n}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
bar.update(1)
bar.close()
out.write_text(json.dumps({"score": 1.0, "metrics": {}}))
'''


async def test_a_real_tqdm_bar_in_a_real_evaluation_logs_each_count_in_order(
    tmp_path: Path,
) -> None:
    folder = answer_copy(tmp_path / "task", files={"hidden/check.py": STEPPED_BAR})
    artifact = tmp_path / "answer.txt"
    artifact.write_text("42\n")
    logged: list[tuple[float, ev.EvaluationProgress]] = []

    def seen(progress: ev.EvaluationProgress) -> None:
        logged.append((time.monotonic(), progress))
        if progress.done:
            (folder / f"seen-{progress.done}").touch()  # the script goes on to the next

    outcome = await run_evaluation(load_task(folder), artifact, tmp_path / "eval", on_progress=seen)
    assert outcome.ok and outcome.score == 1.0, outcome.error
    progress = [p for _, p in logged]
    # Every count, in order, the last one (4/4) logged once the script ended.
    assert [p.done for p in progress] == [0, 1, 2, 3, 4], [p.line for p in progress]
    assert {(p.what, p.total) for p in progress} == {("Scoring answers", 4)}
    assert progress_words(progress[2]) == "50% (2/4) Scoring answers"
    # (The pace, two a second at most, is checked on a stepped clock below: measured
    # here by the wall clock it would depend on how the machine schedules the test.)


def _reader() -> tuple[list[float], list[ev.EvaluationProgress], ProgressReader]:
    now = [0.0]
    logged: list[ev.EvaluationProgress] = []
    return now, logged, ProgressReader(logged.append, clock=lambda: now[0])


def _bar(n: int, total: int = 1720, what: str = "Running loglikelihood requests: ") -> str:
    """A bar as tqdm draws it into a pipe: a carriage return, then the line."""
    return f"\r{what}{100 * n // total:3d}%|#  | {n}/{total} [00:01<00:02, 555.86it/s]"


def test_the_latest_count_shows_at_once_and_later_ones_twice_a_second_at_most() -> None:
    now, logged, reader = _reader()
    reader.feed("loading lm-eval and its tasks\n")  # the first line: at once
    now[0] = 0.1
    reader.feed(_bar(0))  # not yet ended by a redraw, but a whole bar: taken
    reader.feed(_bar(65))
    now[0] = 0.4
    reader.flush()
    assert [p.done for p in logged] == [None]
    now[0] = 0.5
    reader.flush()  # 0.5 s after the first: the latest count, never a stale 0%
    assert [p.done for p in logged] == [None, 65]
    reader.feed(_bar(225)[:-10])  # a bar cut by the pipe: not a count yet
    now[0] = 1.2
    reader.flush()
    assert [p.done for p in logged] == [None, 65]
    reader.feed(_bar(225)[-10:])
    assert [p.done for p in logged] == [None, 65, 225]
    reader.feed(_bar(225) + "  ")  # the same bar redrawn, padded: nothing new
    reader.feed(_bar(225).replace("555.86it/s", "601.2it/s"))  # redrawn at close: nor this
    now[0] = 3.0
    reader.flush()
    assert len(logged) == 3
    reader.feed(_bar(1720) + "\n")
    reader.close()  # the evaluator has ended: its last count, whatever the wait
    assert [p.done for p in logged] == [None, 65, 225, 1720]
    assert progress_words(logged[-1]) == "100% (1,720/1,720) Running loglikelihood requests"
    # The evaluator's words are data: shown escaped, never obeyed by the terminal.
    assert progress_words(ev.EvaluationProgress(line="loading \x1b[2Jx")) == "loading \\x1b[2Jx"


def test_the_wait_grows_to_five_seconds_so_an_hour_of_grading_logs_some_750_events() -> None:
    now, logged, reader = _reader()
    for tenth in range(36_000):  # an hour of a bar redrawn ten times a second
        now[0] = tenth / 10
        reader.feed(_bar(tenth, total=36_000))
        if tenth % 2 == 0:
            reader.flush()
    assert reader.wait_s() == EVERY_S
    assert 700 < len(logged) < 760
    assert [p.done for p in logged] == sorted(p.done or 0 for p in logged)
    assert sum(len(p.model_dump_json()) for p in logged) < 250_000


def test_an_unnamed_bar_is_named_by_the_step_before_it() -> None:
    """lm-eval's bars for building requests and rolling windows have no description;
    its log line before each says what they count."""
    _, logged, reader = _reader()
    reader.feed("lm-eval: Building contexts for tiny_lm_agreement on rank 0...\n")
    reader.close()
    reader.feed(_bar(0, total=125, what=""))
    reader.close()
    reader.feed("\nlm-eval: Running loglikelihood_rolling requests\n")
    reader.feed(_bar(3, total=8, what=""))
    reader.close()
    assert [progress_words(p) for p in logged] == [
        "lm-eval: Building contexts for tiny_lm_agreement on rank 0...",
        "0% (0/125) lm-eval: Building contexts for tiny_lm_agreement on rank 0...",
        "37% (3/8) lm-eval: Running loglikelihood_rolling requests",
    ]


def test_a_bar_after_a_bar_is_named_as_the_next_so_the_grading_never_reads_as_going_back() -> None:
    """lm-eval draws one bar after another: 100% of the loglikelihood requests, then 5%
    of the generations. A bar of another name says by its name that it is the next
    step; one of the same name whose count falls (one task's requests, then the next
    task's) is its next part, so a percentage that starts again never reads as the
    grading going back. No "bar 2": a count of bars means nothing to a reader."""
    now, logged, reader = _reader()
    reader.feed(_bar(1000, total=1000) + "\n")
    reader.close()
    now[0] = 1.0
    reader.feed(_bar(10, total=200, what="Running generate_until requests: "))
    reader.close()
    now[0] = 2.0
    reader.feed(_bar(3, total=200, what="Running generate_until requests: "))
    reader.close()
    assert [progress_words(p) for p in logged] == [
        "100% (1,000/1,000) Running loglikelihood requests",
        "5% (10/200) Running generate_until requests",
        "1% (3/200) Running generate_until requests, part 2",
    ]
    # A bar counted though none of its lines was logged (held back by the pace).
    reader.feed(_bar(5, total=7, what="Scoring: "))
    reader.feed(_bar(1, total=7, what="Scoring: "))
    reader.feed(_bar(4, total=7, what="Filtering: "))
    reader.close()
    assert progress_words(logged[-1]) == "57% (4/7) Filtering"
    reader.feed(_bar(2, total=7, what="Scoring: "))
    reader.close()
    assert progress_words(logged[-1]) == "28% (2/7) Scoring, part 3"


def test_lm_eval_s_grading_reads_in_its_own_words_after_many_bars() -> None:
    """tiny-lm's grading as lm-eval writes it: a context bar a task, the tokenizing, then
    the requests' bar, then the rolling requests' bars; headless said `grading: bar 11 ·
    1% (30/1,720)`, the "bar 11" counting bars a reader never saw, and then `Running
    loglikelihood requests, pass 4` for lm-eval's rolling requests, which draw bars of
    that plain name, a batch of windows each: as if the 1,720 requests had begun again."""
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    started = ev.EvaluationStarted(evaluator="lm-eval", artifact="submission", t=9.0, ts=1000.0)
    display.on_event(started)
    now, logged, reader = _reader()
    for task in ("anaphor", "word_order", "heldout"):
        reader.feed(f"lm-eval: Building contexts for {task} on rank 0...\n")
        reader.feed(_bar(125, total=125, what="") + "\n")
    reader.feed(_bar(1720, total=1720, what="Tokenizing inputs: ") + "\n")
    reader.feed(_bar(30, total=1720))
    reader.close()
    now[0] = 5.0
    reader.feed("\nlm-eval: Running loglikelihood_rolling requests\n")
    for _batch in range(2):  # a bar a batch of windows, each from 0
        reader.feed(_bar(0, total=32) + _bar(32, total=32) + "\n")
    reader.feed(_bar(16, total=32))
    reader.close()
    for progress in logged:
        progress.ts = 1004.0
        display.on_event(progress)
    lines = out.getvalue().splitlines()[1:]
    shown = [line.split("] ", 1)[1] for line in lines if "%" in line]
    assert shown == [
        "grading: 1% (30/1,720) Running loglikelihood requests",
        "grading: 50% (16/32) Running loglikelihood_rolling requests, part 3",
    ]


def test_the_transcript_says_how_long_the_grading_has_run() -> None:
    """The run clock stands still while the run is graded: the progress lines count
    the grading's own seconds beside it."""
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    started = ev.EvaluationStarted(evaluator="lm-eval", artifact="submission", t=48.7, ts=1000.0)
    display.on_event(started)
    for ts, done in ((1004.2, 65), (1004.9, 781)):
        display.on_event(
            ev.EvaluationProgress(
                line="...",
                what="Running loglikelihood requests",
                done=done,
                total=1720,
                t=48.7,
                ts=ts,
            )
        )
    lines = out.getvalue().splitlines()
    assert lines[1:] == [
        "[49s +4s] grading: 3% (65/1,720) Running loglikelihood requests",
        "[49s +5s] grading: 45% (781/1,720) Running loglikelihood requests",
    ]


@pytest.mark.slow
def test_lm_eval_grading_tiny_lm_names_its_steps_and_ends_on_its_last(
    readme_baseline_run: ReadmeRun,
) -> None:
    """Real lm-eval grading the tiny-lm recipe's model (the README's baseline run, made
    once for the session: tests/readme_runs.py): every bar's counts rise, unnamed bars
    carry lm-eval's step, and the last line logged says what it does after."""
    run = readme_baseline_run.run_dir
    progress = [
        e for e in read_events(run / "events.jsonl") if isinstance(e, ev.EvaluationProgress)
    ]
    lines = [p.line for p in progress]
    assert progress and progress[-1].line == (
        "lm-eval has finished; computing the score from its results"
    ), lines
    # Every bar lm-eval drew is named, read back from its whole output at no pace.
    ticks = itertools.count(step=10.0)
    every: list[ev.EvaluationProgress] = []
    reader = ProgressReader(every.append, clock=lambda: next(ticks))
    reader.feed((run / "evaluation" / "evaluation.log").read_text())
    reader.close()
    bars = [p for p in every if p.total]
    assert bars and all(p.what for p in bars), [p.line for p in every]
    named = {p.what for p in bars}
    assert "lm-eval: Building contexts for tiny_lm_pairs_word_order on rank 0..." in named
    assert "lm-eval: Running loglikelihood_rolling requests" in named
    assert "Running loglikelihood requests" in named


def test_lm_eval_asks_git_nothing_so_no_git_warning_reaches_the_grading_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """lm-eval's `git describe` probe wrote `Stopping at filesystem boundary...` (or
    `not a git repository`) to the grading's stderr; mlra's lm-eval grading answers it
    without running git."""
    pytest.importorskip("lm_eval")
    import lm_eval.evaluator

    from mlra.tasks.evaluators.lm_eval import quiet_git_probe

    monkeypatch.chdir(tmp_path)  # no repository here: git would say so on stderr
    monkeypatch.setattr(
        lm_eval.evaluator, "get_git_commit_hash", lm_eval.evaluator.get_git_commit_hash
    )
    quiet_git_probe()
    assert lm_eval.evaluator.get_git_commit_hash() is None
    assert "git" not in capfd.readouterr().err
