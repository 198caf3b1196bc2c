"""Replay of recorded runs: the console over a real recorded scripted run (Pilot),
the headless replay through the real command line, `mlra runs`, and snapshots of
the replay console over a fixed recorded run."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from rich.text import Text
from textual.widgets import Static, Tree

from mlra import events as ev
from mlra.agent.record.eventlog import EventLog, LogDamage, read_events
from mlra.agent.record.snapshots import SnapshotStore
from mlra.agent.record.state import fold
from mlra.console.apps import replay_app
from mlra.console.apps.replay_app import DiffScreen, ReplayApp
from mlra.console.cli import replay_cli
from mlra.console.cli.cli import main
from mlra.console.panes.files import FilesPane
from mlra.console.panes.transcript import TranscriptPane
from mlra.console.panes.transcript_entries import MATCH_STYLE, NoteEntry, ThoughtEntry, ToolEntry
from mlra.console.screens.screens import ConfirmScreen, HelpScreen, PromptScreen
from mlra.console.text import replay
from mlra.console.text.args import UsageError
from mlra.console.text.replay import ReplayModel
from tests.conftest import ANSWER_TASK, mlra_cli
from tests.console.console_fixtures import EPOCH, recorded_run
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn

WORKER = [
    turn("Write the first notes.", call("write_file", path="notes.txt", content="alpha\n")),
    turn("Answer the question.", call("bash", command="echo 42 > answer.txt")),
    turn("Revise the notes.", call("write_file", path="notes.txt", content="alpha\nbeta\n")),
    turn("Look for a file that is not there.", call("bash", command="cat missing.txt")),
    turn("", call("report", summary="answer.txt holds 42")),
]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run: the real CLI, the real SDK, a scripted model server on loopback."""
    root = tmp_path_factory.mktemp("replay")
    script = {"supervisor": supervisor_answering(), "worker": WORKER}
    with ScriptedModelServer(script) as server:
        proc = mlra_cli(
            [
                "run",
                str(ANSWER_TASK),
                "--model",
                "openai/test-model",
                "--base-url",
                server.url_for("openai"),  # type: ignore[arg-type]
                "--no-tui",
                "--runs-dir",
                str(root / "runs"),
                "--isolation",
                "none",
            ],
            cwd=root,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (root / "runs").iterdir()
    return run_dir


# --- the model ------------------------------------------------------------------------


def test_the_state_at_every_event_is_the_fold_of_the_events_up_to_it(recorded: Path) -> None:
    """Checkpoints skip streamed events; the state at any point must not differ for it."""
    events = read_events(recorded / "events.jsonl")
    model = ReplayModel.open(recorded)
    for i in range(len(events)):
        got, want = model.state_at(i), fold(events[: i + 1])
        assert (got.steps, got.plan, got.tool_calls, got.tool_errors, got.events) == (
            want.steps,
            want.plan,
            want.tool_calls,
            want.tool_errors,
            want.events,
        ), i
        assert (got.cost_usd, got.elapsed_s, got.finished, got.subtask) == (
            want.cost_usd,
            want.elapsed_s,
            want.finished,
            want.subtask,
        ), i


def test_a_torn_tail_is_dropped_with_a_note(recorded: Path, tmp_path: Path) -> None:
    lines = (recorded / "events.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "events.jsonl").write_bytes(b"".join(lines) + b'{"v":1,"seq":99,"ty')
    notes: list[str] = []
    model = ReplayModel.open(tmp_path, on_torn_tail=notes.append)
    assert len(model.events) == len(lines) and "half-written last line" in notes[0]
    model.last()
    assert model.state.finished is not None


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("forged", "not a valid event: "),
        ("removed", "seq 7 where 6 was due: seq 6 is missing"),
        ("repeated", "seq 5 where 6 was due: a repeated or moved line"),
        ("not json", "not a valid event"),
    ],
)
def test_replay_refuses_a_damaged_log_naming_file_and_line(
    recorded: Path, tmp_path: Path, damage: str, problem: str
) -> None:
    lines = (recorded / "events.jsonl").read_bytes().splitlines(keepends=True)
    if damage == "forged":
        lines[5] = b'{"v":1,"seq":6,"type":"no_such_event"}\n'
    elif damage == "removed":
        del lines[5]
    elif damage == "repeated":
        lines.insert(5, lines[4])
    else:
        lines[5] = b"rm -rf /\n"
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"".join(lines))
    where = f"{log}:6: {problem}"

    with pytest.raises(LogDamage) as raised:
        ReplayModel.open(tmp_path)  # what the replay console opens
    assert str(raised.value).startswith(where) and raised.value.line == 6
    with pytest.raises(UsageError, match=r"events\.jsonl:6: "):
        replay_cli._open_model(tmp_path)
    for mode in ("--no-tui", "--json"):
        proc = mlra_cli(["replay", str(tmp_path), mode], cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith(f"mlra: {where}") and proc.stderr.count("\n") == 1


def test_a_forged_event_is_damage_naming_its_line(recorded: Path, tmp_path: Path) -> None:
    """Numbered right but not an event this mlra writes: every full read refuses it."""
    lines = (recorded / "events.jsonl").read_bytes().splitlines(keepends=True)
    lines[5] = b'{"v":1,"seq":6,"type":"tool_result","tool":"bash","ok":true}\n'
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"".join(lines))
    with pytest.raises(LogDamage) as raised:
        read_events(log)
    assert raised.value.line == 6 and "Field required (call_id)" in raised.value.problem


def test_an_event_from_a_newer_mlra_is_kept_and_shown_as_unknown(
    recorded: Path, tmp_path: Path
) -> None:
    lines = (recorded / "events.jsonl").read_bytes().splitlines(keepends=True)
    newer = b'{"v":2,"seq":6,"ts":1.0,"t":0.5,"type":"gpu_throttled","gpu":0}\n'
    lines.insert(5, newer)

    def moved(event: dict) -> dict:
        # References to earlier events (`text_of`, `arguments_of`) move with them.
        refs = {k: v + 1 for k, v in event.items() if k.endswith("_of") and v >= 6}
        return {**event, **refs}

    renumbered = [
        json.dumps({**moved(json.loads(line)), "seq": n}).encode() + b"\n"
        for n, line in enumerate(lines, start=1)
    ]
    (tmp_path / "events.jsonl").write_bytes(b"".join(renumbered))
    events = read_events(tmp_path / "events.jsonl")
    unknown = events[5]
    assert isinstance(unknown, ev.UnknownEvent)
    assert (unknown.original_type, unknown.fields, unknown.seq) == ("gpu_throttled", {"gpu": 0}, 6)
    assert len(events) == len(lines)
    # Written back (a fork copies it) as the line it was, under its own type.
    assert json.loads(unknown.model_dump_json()) == json.loads(newer)
    mangled = b'{"v":1,"seq":6,"ts":"x","t":0,"type":"tool_resulv"}'
    with pytest.raises(ValidationError):
        ev.parse_event(mangled)
    proc = mlra_cli(["replay", str(tmp_path), "--no-tui"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "unknown event 'gpu_throttled' (written by a newer mlra" in proc.stdout


# --- the console over a recorded run (Pilot) ------------------------------------------


def transcript_text(app: ReplayApp) -> str:
    parts = []
    for widget in app.query("#transcript > *"):
        if isinstance(widget, ToolEntry | ThoughtEntry):
            parts.append(str(widget.render_entry()))
        elif isinstance(widget, NoteEntry):
            parts.append(str(widget.content))
    return "\n".join(parts)


def static_text(app: ReplayApp, selector: str) -> str:
    return str(app.query_one(selector, Static).content)


def tree_paths(app: ReplayApp) -> set[str]:
    tree = app.query_one("#files-tree", Tree)
    found: set[str] = set()
    stack = list(tree.root.children)
    while stack:
        node = stack.pop()
        if node.data is not None:
            found.add(node.data.path)
        stack.extend(node.children)
    return found


async def goto(app: ReplayApp, pilot: Any, step: int) -> None:
    await pilot.press("g")
    assert isinstance(app.screen, PromptScreen)
    await pilot.press(*str(step), "enter")
    await settle(app, pilot)


async def settle(app: ReplayApp, pilot: Any) -> None:
    await pilot.pause()
    await app.query_one(FilesPane).refresh_tree()
    await pilot.pause()


async def select_file(app: ReplayApp, pilot: Any, path: str) -> None:
    tree = app.query_one("#files-tree", Tree)
    node = next(n for n in _nodes(tree) if n.data is not None and n.data.path == path)
    tree.move_cursor(node)
    await pilot.pause()
    await app.query_one(FilesPane).show_preview(node.data)
    await pilot.pause()


def _nodes(tree: Tree[Any]) -> list[Any]:
    out, stack = [], list(tree.root.children)
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children)
    return out


def events_until(model: ReplayModel, kind: type[object]) -> int:
    """How many events on from the cursor the next event of `kind` is."""
    return next(
        i - model.cursor
        for i in range(model.cursor + 1, len(model.events))
        if isinstance(model.events[i], kind)
    )


def preview_text(app: ReplayApp) -> str:
    content = app.query_one("#preview", Static).content
    return getattr(content, "code", str(content))


async def test_replay_shows_plan_transcript_and_files_as_they_were_at_each_step(
    recorded: Path,
) -> None:
    app = ReplayApp(ReplayModel.open(recorded))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        # A finished run opens on its ending: the verdict, what it took, no time left.
        events = len(app.model.events)
        assert f"event {events} of {events}" in static_text(app, "#status")
        verdict = app.query_one("#verdict", Static)
        assert verdict.display
        summary = static_text(app, "#verdict")
        assert "FINISHED" in summary and "submitted" in summary
        assert "exact_match = 1" in summary and "success" in summary
        assert "cost $" in summary and "time " in summary and "0 notes" in summary
        resources = static_text(app, "#resources")
        assert "in all" in resources and "left" not in resources

        # Home goes to the start: event 1, nothing recorded yet, the verdict put away.
        await pilot.press("home")
        await settle(app, pilot)
        assert "replay: step 0 of 5, event 1 of" in static_text(app, "#status")
        assert not verdict.display
        assert tree_paths(app) == set()  # before the starter files were recorded

        # Worker step 3 starts: notes.txt holds its first version, answer.txt exists.
        await goto(app, pilot, 3)
        status = static_text(app, "#status")
        assert "replay: step 3 of 5" in status
        plan = static_text(app, "#plan-steps")
        assert "Answer the question" in plan and "✓" not in plan
        text = transcript_text(app)
        assert "Answer the question." in text and "echo 42 > answer.txt" in text
        assert "Revise the notes" not in text
        assert {"notes.txt", "answer.txt", "question.txt"} <= tree_paths(app)
        await select_file(app, pilot, "notes.txt")
        assert preview_text(app) == "alpha"

        # After step 3's write: the new content, and the diff against the step before.
        await pilot.press("t")  # to step 3's tool call
        # ... on event by event to the snapshot after it: its result, and any resource
        # samples, which come as time passes (a loaded machine logs some in between).
        await pilot.press(*["right"] * events_until(app.model, ev.WorkspaceSnapshot))
        await settle(app, pilot)
        assert isinstance(app.model.event, ev.WorkspaceSnapshot)
        assert "Revise the notes" in transcript_text(app)
        await select_file(app, pilot, "notes.txt")
        assert preview_text(app) == "alpha\nbeta"
        await pilot.press("d")
        assert isinstance(app.screen, DiffScreen)
        assert "changed at step 3" in app.screen.title_text
        assert "+beta" in app.screen.diff and "-alpha" not in app.screen.diff
        await pilot.press("escape")

        # One event back: the snapshot is not there yet, so neither is the new content.
        await pilot.press("left")
        await settle(app, pilot)
        await select_file(app, pilot, "notes.txt")
        assert preview_text(app) == "alpha"

        # The next error is step 4's failed command; the plan changes when the subtask ends.
        await pilot.press("e")
        await settle(app, pilot)
        event = app.model.event
        assert isinstance(event, ev.ToolResult) and not event.ok
        assert "missing.txt" in transcript_text(app)
        await pilot.press("l")
        await settle(app, pilot)
        assert "✓" in static_text(app, "#plan-steps")

        # Back a whole step, then to the very end.
        await pilot.press("left_square_bracket")
        await pilot.pause()
        assert isinstance(app.model.event, ev.StepStarted)
        await pilot.press("end")
        await settle(app, pilot)
        assert "score: exact_match = 1" in static_text(app, "#status")


def shown_entries(app: ReplayApp) -> list[str]:
    return [str(w.render_entry()) for w in app.query_one(TranscriptPane).children]  # type: ignore[attr-defined]


def fresh_entries(model: ReplayModel) -> list[str]:
    """What a console opened afresh at the model's cursor shows in its transcript."""
    pane = TranscriptPane()
    for event in model.window_events():
        pane.feed(event)
    pane._trim()
    return [str(entry.render_entry()) for entry in pane._entries]


@pytest.mark.parametrize("window_steps", [4, 1])
async def test_moving_back_and_forth_shows_what_a_fresh_console_would(
    recorded: Path, monkeypatch: pytest.MonkeyPatch, window_steps: int
) -> None:
    """A move keeps the widgets of entries still shown, and on a jump (no entry still
    shown: with a window of one step, most moves here) reuses them for the new ones;
    none may linger, go missing, show what they showed before, or keep an output the
    user opened open for another call."""
    monkeypatch.setattr(replay_app, "INCREMENTAL_MAX", 3)  # so a jump ahead rebuilds too
    monkeypatch.setattr(replay, "WINDOW_STEPS", window_steps)
    model = ReplayModel.open(recorded)
    app = ReplayApp(model)
    last = len(model.events) - 1
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        carried = 0
        for target in [last, last - 1, *range(last - 3, 0, -4), last // 2, 0, last, 3]:
            pane = app.query_one(TranscriptPane)
            shown = list(pane.query(ToolEntry))
            if shown and not shown[-1].expanded:
                shown[-1].action_toggle_expanded()  # the user opens a tool call's output
            opened = {entry.call.call_id for entry in shown if entry.expanded}
            model.go(target)
            app.show_cursor()  # back, or ahead by more than 3: the transcript is rebuilt
            await pilot.pause()
            assert shown_entries(app) == fresh_entries(model), target
            for entry in pane.query(ToolEntry):  # open while it stays in view, else folded
                assert entry.expanded == (entry.call.call_id in opened), target
                carried += entry.expanded
            await pilot.press("right", "right")  # then on, fed onto what was rebuilt
            await pilot.pause()
            assert len(pane.children) == pane.entry_count()
        assert carried >= 2


async def test_search_finds_text_in_thoughts_arguments_and_output(recorded: Path) -> None:
    app = ReplayApp(ReplayModel.open(recorded))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("slash")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press(*"BETA", "enter")
        await pilot.pause()
        first = app.model.event
        assert isinstance(first, ev.ToolCall) and "beta" in first.arguments["content"]  # type: ignore[index]
        assert "replay: step 3 of 5" in static_text(app, "#status")
        await pilot.press("m")  # the next match wraps round to the first
        assert app.model.event is first or len(app.model.matches) > 1
        await pilot.press("slash", *"no such file", "enter")
        await pilot.pause()
        output = app.model.event  # the command's streamed output, then its result
        assert isinstance(output, ev.ToolOutput) and "No such file" in output.text
        assert "replay: step 4 of 5" in static_text(app, "#status")
        await pilot.press("m")
        result = app.model.event
        assert isinstance(result, ev.ToolResult) and "No such file" in result.output
        await pilot.press("M")
        assert app.model.event is output
        await pilot.press("slash", *"zebra crossing", "enter")
        await pilot.pause()
        assert app.model.event is output  # no match: the cursor stays


async def test_play_moves_forward_and_fork_key_names_the_step(recorded: Path) -> None:
    app = ReplayApp(ReplayModel.open(recorded), at_step=2)
    async with app.run_test(size=(160, 48)) as pilot:
        start = app.model.cursor
        assert "replay: step 2 of 5" in static_text(app, "#status")
        await pilot.press("minus", "minus", "minus")  # 2 events a second
        await pilot.press("plus")
        await pilot.press("space")
        assert "playing 5 events/s" in static_text(app, "#status")
        deadline = time.monotonic() + 60  # a bound for a broken play, not a speed test
        while app.model.cursor == start:
            assert time.monotonic() < deadline, "play never moved"
            await pilot.pause(0.05)
        await pilot.press("space")
        await pilot.pause()
        assert "playing" not in static_text(app, "#status")
        await pilot.press("home")
        await goto(app, pilot, 4)
        await pilot.press("f")  # asks first; n keeps the replay open
        assert isinstance(app.screen, ConfirmScreen) and "worker step 4" in app.screen.question
        await pilot.press("n")
        assert app.fork_at is None and app.is_running
        await pilot.press("f", "y")
    assert app.fork_at == 4
    assert app.return_value == 0


async def test_the_fork_dialog_numbers_steps_as_the_status_line(recorded: Path) -> None:
    app = ReplayApp(ReplayModel.open(recorded), at_step=3)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("right", "right")  # past step 3's start: its action is shown
        await settle(app, pilot)
        assert "replay: step 3 of 5" in static_text(app, "#status")
        await pilot.press("f")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question == "Fork a new run after worker step 3?"
        assert "--at 4` starts a new run from the state after step 3" in app.screen.detail
        await pilot.press("y")
    assert app.fork_at == 4


async def test_the_files_tree_is_one_key_away_and_home_and_end_move_in_it(
    recorded: Path,
) -> None:
    app = ReplayApp(ReplayModel.open(recorded))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("end")
        await settle(app, pilot)
        tree = app.query_one("#files-tree", Tree)
        at = app.model.cursor
        await pilot.press("F")  # one key to the tree
        await pilot.pause()
        assert app.focused is tree
        await pilot.press("end")
        last = tree.cursor_node
        assert last is not None and last is _lines(tree)[-1]
        await pilot.press("home")
        assert tree.cursor_node is _lines(tree)[0]
        assert app.model.cursor == at  # the keys moved the tree, not the replay
        await pilot.press("F")  # and back
        await pilot.pause()
        assert isinstance(app.focused, TranscriptPane)
        await pilot.press("home")
        assert app.model.cursor == 0  # from the transcript Home moves the replay


def _lines(tree: Tree[Any]) -> list[Any]:
    return [tree.get_node_at_line(i) for i in range(tree.last_line + 1)]


async def test_a_search_marks_its_match_and_opens_the_entry_holding_it(recorded: Path) -> None:
    app = ReplayApp(ReplayModel.open(recorded))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("slash", *"no such FILE", "enter")
        await pilot.pause()
        event = app.model.event
        assert isinstance(event, ev.ToolOutput)
        entry = app.query_one(TranscriptPane).tool_entry(event.call_id)
        assert entry is not None and entry.expanded
        shown = entry.content
        assert isinstance(shown, Text)
        marked = [
            shown.plain[span.start : span.end] for span in shown.spans if span.style == MATCH_STYLE
        ]
        assert marked and all(m.lower() == "no such file" for m in marked)


async def test_a_fork_says_it_is_one(recorded: Path, tmp_path: Path) -> None:
    from mlra.agent.run.resume import fork_run, load_run
    from mlra.tasks.spec import load_task

    forked = fork_run(
        load_run(recorded),
        load_task(ANSWER_TASK),
        at_step=3,
        run_dir=tmp_path / "fork",
        model="openai/other-model",
        message="try 43",
    )
    source = load_run(recorded).started.run_id
    app = ReplayApp(ReplayModel.open(forked.run_dir))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        assert f"fork of {source}@3" in static_text(app, "#status")
        text = transcript_text(app)
        assert f"this run is a fork of {source} at step 3, with openai/other-model" in text
        assert text.count("try 43") == 1  # the message, said once (it was said twice)
        assert "to the worker: try 43" in text


def test_the_fork_key_forks_through_the_server_the_replay_was_given(
    recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`mlra replay RUN --base-url URL`, then f: the fork talks to URL, as
    `mlra fork RUN --at STEP --base-url URL` would (the recorded run used a local server)."""
    source = tmp_path / "runs" / recorded.name
    shutil.copytree(recorded, source)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    monkeypatch.chdir(tmp_path)
    with ScriptedModelServer({"supervisor": [], "worker": [], "default": []}) as server:
        server.set_fallback("worker", turn("", call("report", summary="stopping here")))
        server.set_fallback("supervisor", turn("", call("submit", path="answer.txt")))
        url = server.url_for("openai")
        code = replay_cli._fork(source, 4, base_url=url)
        asked = server.requests_for("worker")
    assert code in (0, 1), capsys.readouterr()
    assert f"mlra fork {source} --at 4 --base-url {url}" in capsys.readouterr().out
    assert asked  # the forked run's worker went on through that server
    (fork,) = [p for p in (tmp_path / "runs").iterdir() if p != source]
    assert fold(read_events(fork / "events.jsonl")).finished is not None


def test_the_replay_console_binds_no_steering_key(recorded: Path) -> None:
    keys = {b.action for b in ReplayApp._merge_bindings().key_to_bindings.get("s", [])}
    actions = {b.action for bs in ReplayApp._merge_bindings().key_to_bindings.values() for b in bs}
    assert not keys
    assert not actions & {
        "pause",
        "resume",
        "step",
        "approve",
        "reject",
        "edit",
        "inject('worker')",
        "stop",
    }


# --- headless replay through the real command line --------------------------------------


def test_headless_replay_prints_the_transcript_and_json(recorded: Path) -> None:
    proc = mlra_cli(["replay", str(recorded), "--no-tui"], cwd=recorded.parent)
    assert proc.returncode == 0, proc.stderr
    assert "worker: Revise the notes." in proc.stdout
    assert "$ cat missing.txt" in proc.stdout
    assert "score: exact_match = 1" in proc.stdout

    # `--at` prints from the step on, after the run's header: it printed from the start.
    at = mlra_cli(["replay", str(recorded), "--no-tui", "--at", "3"], cwd=recorded.parent)
    lines = at.stdout.splitlines()
    assert at.returncode == 0 and lines[0].startswith("▶ answer"), at.stderr
    assert lines[2] == "── from worker step 3; the steps before it are not printed ──"
    said = next(line for line in lines[3:] if "worker: " in line)
    assert said.endswith("worker: Revise the notes."), lines
    assert "cat missing.txt" in at.stdout and "echo 42 > answer.txt" not in at.stdout
    assert "score: exact_match = 1" in at.stdout
    at_json = mlra_cli(["replay", str(recorded), "--json", "--at", "3"], cwd=recorded.parent)
    first = ev.parse_event(at_json.stdout.splitlines()[0])
    assert isinstance(first, ev.StepStarted) and (first.agent, first.step) == ("worker", 3)

    as_json = mlra_cli(["replay", str(recorded), "--json"], cwd=recorded.parent)
    lines = as_json.stdout.strip().splitlines()
    assert [ev.parse_event(line) for line in lines] == read_events(recorded / "events.jsonl")

    bad = mlra_cli(["replay", str(recorded.parent / "nope"), "--no-tui"], cwd=recorded.parent)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    no_step = mlra_cli(["replay", str(recorded), "--no-tui", "--at", "99"], cwd=recorded.parent)
    assert no_step.returncode == 2 and "no worker step 99" in no_step.stderr


# --- mlra runs ------------------------------------------------------------------------


def test_runs_lists_status_score_and_filters(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copytree(recorded, runs / "a-finished")
    # A run killed mid-way: its log ends without run_finished, and no result.json.
    killed = runs / "b-killed"
    killed.mkdir()
    lines = (recorded / "events.jsonl").read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if '"type":"submission"' in line)
    (killed / "events.jsonl").write_text("\n".join(lines[:cut]) + "\n")
    # A run being written by a live process holds its log's lock.
    live = runs / "c-live"
    live.mkdir()
    (live / "events.jsonl").write_text("\n".join(lines[:cut]) + "\n")
    (runs / "d-damaged").mkdir()
    (runs / "d-damaged" / "events.jsonl").write_text('{"type": "nonsense"}\n{}\n')
    (runs / "not-a-run").mkdir()

    log = EventLog(live / "events.jsonl", start_seq=cut)
    try:
        assert main(["runs", "--runs-dir", str(runs), "--json"]) == 0
    finally:
        log.close()
    rows = {r["id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(rows) == {"a-finished", "b-killed", "c-live", "d-damaged"}
    assert rows["a-finished"]["status"] == "finished"
    assert rows["a-finished"]["score"] == 1.0 and rows["a-finished"]["normalized_score"] == 1.0
    assert rows["a-finished"]["task"] == "answer"
    assert rows["a-finished"]["model"] == "openai/test-model"
    assert rows["b-killed"]["status"] == "interrupted" and rows["b-killed"]["score"] is None
    assert rows["c-live"]["status"] == "running"
    assert rows["d-damaged"]["status"] == "damaged"

    assert main(["runs", "--runs-dir", str(runs), "--status", "interrupted"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["id", "task", "model", "status"]
    assert [line.split()[0] for line in out[1:]] == [
        "b-killed",
        "c-live",
    ]  # c-live's log is closed now

    assert main(["runs", "--runs-dir", str(runs), "--task", "answer", "--model", "test"]) == 0
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert ids == ["a-finished", "b-killed", "c-live"]
    assert main(["runs", "--runs-dir", str(runs), "--model", "claude"]) == 0
    assert "no runs" in capsys.readouterr().out

    assert main(["runs", "--runs-dir", str(tmp_path / "missing")]) == 2
    assert "is not a folder of runs" in capsys.readouterr().err


def test_runs_before_any_run_is_an_empty_list_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./runs: nothing has run here yet
    assert main(["runs"]) == 0
    assert capsys.readouterr().out.startswith("no runs yet: ./runs does not exist")
    assert main(["runs", "--json"]) == 0 and capsys.readouterr().out == ""


# --- snapshots of the replay console over a fixed recorded run -------------------------


@pytest.fixture
def _utc(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


FIXED_FILES = {
    0: {
        "README.md": "# tiny-lm\n\nTrain a small causal LM on data/train.txt.\n",
        "train.py": "import argparse\n\nprint('baseline')\n",
        "data/train.txt": "It is a truth universally acknowledged...\n" * 40,
    },
    8: {"train_big.sh": "python train.py --layers 4 --d-model 256 --steps 1400\n"},
    9: {
        "train_big.sh": "python train.py --layers 4 --d-model 256 --steps 1400 --out submission\n",
        "submission/config.json": '{"model_type": "llama", "num_hidden_layers": 4}\n',
    },
}


def fixed_replay(tmp_path: Path) -> ReplayModel:
    """The console fixtures' finished run, with workspace snapshots after its steps."""
    store = SnapshotStore(tmp_path)
    events: list[ev.Event] = []
    after = {0: "run_started", 8: "call_0008", 9: "call_0009"}
    for event in recorded_run("finished"):
        starts = isinstance(event, ev.WorkerThought) and event.step == 8
        starts |= isinstance(event, ev.ToolCall) and event.call_id == "call_0009"
        if starts:  # the fixture records step 7's start only
            step = 8 if isinstance(event, ev.WorkerThought) else 9
            started = ev.StepStarted(agent="worker", step=step, turn=step)
            started.t, started.ts = event.t, event.ts
            events.append(started)
        events.append(event)
        for step, marker in after.items():
            hit = (isinstance(event, ev.RunStarted) and marker == "run_started") or (
                isinstance(event, ev.ToolResult) and event.call_id == marker
            )
            if hit:
                changed = []
                for path, text in FIXED_FILES[step].items():
                    data = text.encode()
                    sha = hashlib.sha256(data).hexdigest()
                    store.path(sha).parent.mkdir(parents=True, exist_ok=True)
                    store.path(sha).write_bytes(data)
                    changed.append(ev.FileChange(path=path, size=len(data), sha256=sha))
                snap = ev.WorkspaceSnapshot(step=step, changed=changed)
                snap.t, snap.ts = event.t, event.ts
                events.append(snap)
    for seq, event in enumerate(events, start=1):
        event.seq = seq
    assert events[0].ts == EPOCH
    return ReplayModel(events, store)


@pytest.mark.usefixtures("_utc")
@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_snapshot_replay_opens_on_the_verdict(
    snap_compare: Any, tmp_path: Path, size: tuple[int, int]
) -> None:
    """The first screen of a finished run's replay: how it ended, at the end."""

    async def opened(pilot: Any) -> None:
        await settle(pilot.app, pilot)

    app = ReplayApp(fixed_replay(tmp_path))
    assert snap_compare(app, terminal_size=size, run_before=opened)


@pytest.mark.usefixtures("_utc")
def test_snapshot_replay_mid_run(snap_compare: Any, tmp_path: Path) -> None:
    async def to_step_8(pilot: Any) -> None:
        app = pilot.app  # from the end, where it opens: the transcript rebuilt there
        app.model.goto_step(8)
        app.model.next_mark("tool")
        app.model.forward(2)  # the write's result and the snapshot after it
        app.show_cursor()
        await settle(app, pilot)

    app = ReplayApp(fixed_replay(tmp_path))
    assert snap_compare(app, terminal_size=(160, 48), run_before=to_step_8)


@pytest.mark.usefixtures("_utc")
def test_snapshot_replay_diff_of_a_file(snap_compare: Any, tmp_path: Path) -> None:
    async def diff(pilot: Any) -> None:
        app = pilot.app
        app.model.last()
        app.show_cursor()
        await settle(app, pilot)
        await select_file(app, pilot, "train_big.sh")
        await pilot.press("d")
        while not isinstance(app.screen, DiffScreen):
            await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    app = ReplayApp(fixed_replay(tmp_path))
    assert snap_compare(app, terminal_size=(160, 48), run_before=diff)


@pytest.mark.usefixtures("_utc")
def test_snapshot_replay_help(snap_compare: Any, tmp_path: Path) -> None:
    app = ReplayApp(fixed_replay(tmp_path))

    async def open_help(pilot: Any) -> None:
        # Wait for the screen itself, not for time: a busy machine renders late.
        await pilot.press("question_mark")
        while not isinstance(pilot.app.screen, HelpScreen):
            await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(160, 48), run_before=open_help)
