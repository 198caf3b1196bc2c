"""Near its log budget a run no longer logs what streams of the model's answers, nor long
workspace snapshots (agent/record/log_budget.py): a model that writes at length keeps
its run within a budget it would otherwise have ended at, the live console still
shows its words as they come, and a replay of the log shows what the live console
ended with, a cut-off answer included.

Runs are real (the scripted model server on loopback, the real OpenAI SDK), in the
console as `mlra run` shows them; the budgets are tiny so the tests stay quick.
"""

from __future__ import annotations

import io
from pathlib import Path

from mlra import events as ev
from mlra.agent.agents.run import agent_for
from mlra.agent.providers import resolve_model
from mlra.agent.record.eventlog import read_events
from mlra.agent.record.log_budget import MB, SHORT_SNAPSHOT_BYTES
from mlra.agent.record.snapshots import SnapshotStore, WorkspaceScanner
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.console.apps.app import MlraApp
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.transcript_entries import ThoughtEntry
from mlra.console.text.headless import TranscriptDisplay
from mlra.console.text.replay import ReplayModel
from mlra.tasks.spec import load_task
from tests.console.test_console_controls import ANSWER, REPORT, is_, live, worker
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, turn

PRINTS = (
    "import sys\nfor i in range(1500):\n    sys.stdout.write(f'{i:05d} {N} ' + 'x' * 56 + '\\n')\n"
)
"""About 100 KB of output, a little different each time."""
ANSWER_AND_SUBMIT = [
    turn("", call("bash", command="echo 42 > answer.txt")),
    turn("", call("submit", path="answer.txt", note="the answer")),
]

LINES = "".join(f"{i:03d} thought\n" for i in range(150))
"""About 1.8 KB in 150 lines: streamed, each line is an event of its own."""
BUDGET_MB = 0.2
THOUGHTS = 12
"""Answers enough that their streams alone pass the budget (about 16 KB each streamed
and recorded, 2.5 KB recorded only)."""


def _thoughts(app: MlraApp | ReplayApp) -> list[str]:
    return [str(e.content) for e in app.query(ThoughtEntry)]


async def test_a_model_that_writes_at_length_stays_within_its_log_budget_as_it_was_shown(
    tmp_path: Path, answer_task: Path
) -> None:
    writing = [turn(f"Thought {i}.\n{LINES}", call("bash", command=f"echo {i}")) for i in range(THOUGHTS)]  # fmt: skip
    # Past the budget's point: an answer cut off midway, then asked again.
    cut = {"drop": True, "text": f"Cut short.\n{LINES}"}
    script = worker(*writing, cut, turn("Asked again.", *ANSWER["tool_calls"]), REPORT)
    async with live(tmp_path, answer_task, script, log_budget_mb=BUDGET_MB) as run:
        unlogged: list[ev.Event] = []
        run.controller.tool_step.watch_output(unlogged.append)
        finished = await run.watch.wait(is_(ev.RunFinished), timeout=600)
        await run.pilot.pause()
        await run.shown(lambda app: any("Asked again." in t for t in _thoughts(app)))
        shown_live = _thoughts(run.app)
    assert isinstance(finished, ev.RunFinished) and finished.reason == "submitted", finished
    log = run.controller.run_dir / "events.jsonl"
    assert log.stat().st_size <= BUDGET_MB * MB
    events = read_events(log)
    (notice,) = [e for e in events if isinstance(e, ev.Notice) and e.kind == "log_budget"]
    assert "model's text" in notice.message

    # Past the notice, the log takes no streamed piece but the cut-off answer's text, once,
    # whole; the live console was handed every piece the log did not take.
    later = [e for e in events if isinstance(e, ev.TextDelta) and e.seq > notice.seq]
    (whole,) = later
    assert whole.whole and whole.text == f"Cut short.\n{LINES}"
    (error,) = [e for e in events if isinstance(e, ev.ModelError)]
    assert whole.seq < error.seq
    pieces = [e for e in unlogged if isinstance(e, ev.TextDelta)]
    assert pieces and all(e.seq == 0 for e in pieces)
    handed = [e for e in events if isinstance(e, ev.TextDelta) and not e.whole] + pieces

    def streamed(turn: int) -> str:
        mine = [e for e in handed if isinstance(e, ev.TextDelta) and (e.agent, e.turn) == ("worker", turn)]  # fmt: skip
        return "".join(e.text for e in sorted(mine, key=lambda e: e.t))

    answers = [e for e in events if isinstance(e, ev.ModelCall) and e.agent == "worker"]
    assert len(answers) == THOUGHTS + 2 and all(streamed(a.turn).endswith(a.text) for a in answers)

    # The answers are in the log whole: the headless replay prints each.
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    for event in events:
        display.on_event(event)
    assert all(f"worker: Thought {i}. 000 thought" in out.getvalue() for i in range(THOUGHTS))
    assert sum(len(e.text) for e in events if isinstance(e, ev.ModelCall)) > THOUGHTS * len(LINES)

    # The console's replay shows what the live console ended with, the cut answer too.
    again = next(i for i, e in enumerate(events) if e.seq > error.seq and isinstance(e, ev.ModelCall))  # fmt: skip
    replay = ReplayApp(ReplayModel.open(run.controller.run_dir))
    async with replay.run_test(size=(160, 48)) as pilot:
        replay.model.go(again)  # the answer asked again has come
        replay.show_cursor()
        await pilot.pause()
        cut_replayed = [t for t in _thoughts(replay) if "cut off: " in t]
        replay.model.go(len(events))  # the run's end
        replay.show_cursor()
        await pilot.pause()
        replayed = _thoughts(replay)  # the replay's window of the transcript
    cut_live = [t for t in shown_live if "cut off: " in t]
    assert len(cut_live) == 1 and cut_live[0].endswith(f"cut off: Cut short.\n{LINES}".strip())
    assert cut_replayed == cut_live
    assert replayed and shown_live[-len(replayed) :] == replayed


async def test_a_run_past_the_point_lists_fewer_files_a_snapshot_and_its_replay_says_so(
    tmp_path: Path, answer_task: Path
) -> None:
    printing = [turn(f"Print {i}.", call("python", code=PRINTS.replace("{N}", f"{i:02d}"))) for i in range(3)]  # fmt: skip
    many = "mkdir ckpt && for i in $(seq 1 300); do echo $i > ckpt/step-$i.txt; done"
    script = {"worker": [*printing, turn("", call("bash", command=many)), *ANSWER_AND_SUBMIT]}
    with ScriptedModelServer(script) as server:
        provider = resolve_model("openai/test", base_url=server.url_for("openai"), env={})
        config = RunConfig(
            task="answer", model="openai/test", runs_dir=tmp_path, run_id="r", isolation="none",
            agent="worker", log_budget_mb=0.25,
        )  # fmt: skip
        result = await RunController(config, load_task(answer_task), provider).run(agent_for)
        await provider.aclose()
    assert (result.reason, result.score) == ("submitted", 1.0)
    events = read_events(tmp_path / "r" / "events.jsonl")
    (notice,) = [e for e in events if isinstance(e, ev.Notice) and e.kind == "log_budget"]
    (snapshot,) = [e for e in events if isinstance(e, ev.WorkspaceSnapshot) and e.seq > notice.seq and len(e.changed) > 1]  # fmt: skip
    assert snapshot.log_budget_bytes == SHORT_SNAPSHOT_BYTES and snapshot.left_out is not None
    assert len(snapshot.changed) + snapshot.left_out.changed == 300
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=False)
    for event in events:
        display.on_event(event)
    assert "near its size budget, so one snapshot event lists at most 8 KiB" in out.getvalue()


def test_a_snapshot_near_the_log_budget_lists_fewer_files_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for i in range(200):
        (workspace / f"checkpoint-{i:03d}.txt").write_text(str(i))
    scanner = WorkspaceScanner(workspace, SnapshotStore(tmp_path / "run"))
    snapshot = scanner.scan(1, listed_bytes=SHORT_SNAPSHOT_BYTES)
    assert snapshot is not None and snapshot.left_out is not None
    assert snapshot.log_budget_bytes == SHORT_SNAPSHOT_BYTES
    assert 20 < len(snapshot.changed) < 60
    assert len(snapshot.changed) + snapshot.left_out.changed == 200
    assert "near its size budget" in snapshot.left_out.notes[0]
    assert len(snapshot.model_dump_json()) < 2 * SHORT_SNAPSHOT_BYTES
    # A step that changes few files lists them all, and says nothing of the budget.
    (workspace / "checkpoint-000.txt").write_text("again")
    small = scanner.scan(2, listed_bytes=SHORT_SNAPSHOT_BYTES)
    assert small is not None and small.log_budget_bytes is None and small.left_out is None
    assert [c.path for c in small.changed] == ["checkpoint-000.txt"]
