"""Attacks on the user's terminal: what a run says is shown as text, never obeyed.

An agent, the model, a command's output, a file's name, a note, a job's name, a task
file or an evaluator can hold terminal control: an OSC 52 clipboard write, an OSC 8
link whose text lies about its target, CSI sequences that clear or recolour the
screen, their 8-bit C1 forms (U+009B is CSI), the Unicode bidirectional overrides
that make a line read other than it is, and (in the console) Textual markup with
`@click` actions. Every display must show them escaped (`\\x1b]52;...`) and the event
log must keep them byte for byte.

The whole-run attack drives `mlra run` with a scripted model through the attack
suite's host (tests/tools/test_sandbox_attacks.py) and reads every way a person
looks at the run afterwards: the transcript, `-v`, `--json`, `mlra replay`, `mlra runs`
and `mlra report`. The console's attacks render the live console and the replay over
hostile events and read what would be written to the terminal.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.text import Text
from textual.widgets import OptionList, Static

from mlra import events as ev
from mlra.agent.record.eventlog import read_events
from mlra.batch.progress import PlainProgress
from mlra.batch.report_rows import RunRow, summarize
from mlra.batch.report_tables import markdown
from mlra.batch.runner import Progress
from mlra.console.apps.app import MlraApp
from mlra.console.apps.replay_app import ReplayApp
from mlra.console.panes.files import FilesPane
from mlra.console.screens.screens import StopJobScreen
from mlra.console.text.headless import JsonDisplay, TranscriptDisplay
from mlra.console.text.replay import ReplayModel
from mlra.terminal_text import printable, printable_json, printable_line, without_controls
from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox
from tests.conftest import mlra_cli
from tests.console.console_fixtures import EPOCH
from tests.fakes.model_server import ScriptedModelServer
from tests.scripts import call, supervisor_answering, turn
from tests.tools.test_sandbox_attacks import Scene, _make_scene

OSC52 = "\x1b]52;c;cHduZWQ=\x07"
"""Write "pwned" to the clipboard."""
OSC8 = "\x1b]8;;http://evil.example/\x1b\\docs\x1b]8;;\x1b\\"
"""A link whose text says `docs`."""
CSI = "\x1b[2J\x1b[31m"
C1 = "\x9b2J\x9d0;title\x9c"
"""The 8-bit CSI and OSC (with its 8-bit string terminator)."""
BIDI = "\u202eevil\u2066x\u2069\u202c"
MARKUP = "[@click=app.pwned]x[/]"
HOSTILE = f"{OSC52}{OSC8}{CSI}{C1}{BIDI}{MARKUP}"

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""What must never reach a terminal from a run (a line break and a tab may)."""


def assert_shown_not_obeyed(text: str, where: str) -> None:
    found = sorted({hex(ord(c)) for c in RAW.findall(text)})
    assert not found, f"{where}: raw control characters {found}"
    assert "\ufffd" not in text, f"{where}: undecodable bytes (a raw C1 byte, say)"


# --- the sanitizer ------------------------------------------------------------------------


def test_every_control_is_escaped_visibly_and_text_stays() -> None:
    shown = printable(f"a\tb\nc{HOSTILE}\r\x7f\x00\udcff")
    assert shown.startswith("a\tb\nc\\x1b]52;c;cHduZWQ=\\x07\\x1b]8;;http://evil.example/")
    for escaped in ("\\x9b2J", "\\x9d0;title\\x9c", "\\u202eevil\\u2066", "\\r\\x7f\\x00\\udcff"):
        assert escaped in shown
    assert MARKUP in shown  # markup is the console's to escape; the text keeps it
    assert_shown_not_obeyed(shown, "printable")
    assert printable(shown) == shown  # escaping twice changes nothing
    plain = "loss 2.31 — 训练 ✓ ümlaut 🙂 emoji\u200d joined"
    assert printable(plain) is plain


def test_one_line_escapes_line_breaks_and_tabs_too() -> None:
    assert printable_line("a\tb\nc\r") == "a\\tb\\nc\\r"
    assert_shown_not_obeyed(printable_line(HOSTILE + "\udc9b"), "printable_line")


def test_json_escapes_are_the_same_value() -> None:
    value = {"text": HOSTILE + "\u2028\x85\udcff", "n": 1}
    for encoded in (json.dumps(value, ensure_ascii=False), json.dumps(value, indent=2)):
        shown = printable_json(encoded)
        assert json.loads(shown) == value
        assert_shown_not_obeyed(shown.replace("\n", " "), "printable_json")


def test_the_last_pass_keeps_the_width() -> None:
    assert without_controls("a\x1b[31mb\u202ec\udcffd\x9b") == "a[31mbc\ufffdd"


# --- the headless displays, in process -----------------------------------------------------


def _hostile_events() -> list[ev.Event]:
    """A run's events, every text in them hostile."""
    events: list[ev.Event] = [
        ev.RunStarted(
            run_id="r1", task=f"task{OSC52}", task_title="T", model=f"model{BIDI}",
            limits=ev.Limits(time_limit_s=600),
            sandbox=ev.SandboxInfo(kind="local", isolation="bwrap", network=False,
                                   workdir="/w", workspace=f"/w{CSI}"),
        ),
        ev.PlanUpdated(steps=[ev.PlanStep(id="1", title=f"step {HOSTILE}", note=OSC8)],
                       reason=f"plan {C1}"),
        ev.SupervisorMessage(text=f"supervisor {HOSTILE}"),
        ev.SubtaskStarted(subtask=1, step_id="1", instructions=f"do {HOSTILE}"),
        ev.WorkerThought(turn=1, text=f"thinking {HOSTILE}"),
        ev.ToolCall(call_id="c1", agent="worker", tool="bash",
                    arguments={"command": f"printf '{HOSTILE}'"}),
        ev.ToolOutput(call_id="c1", text=f"out {HOSTILE}\nfile \udcffname\r{OSC52}\n"),
        ev.ToolResult(call_id="c1", agent="worker", tool="bash", ok=True, exit_code=0,
                      output=f"out {HOSTILE}\nfile \udcffname\n"),
        ev.ToolCall(call_id="c2", agent="worker", tool=f"read_file{CSI}",
                    arguments={"path": f"evil{OSC52}\nname"}),
        ev.JobStarted(job="job-1", name=f"{MARKUP}{CSI}", command=f"echo {OSC52}",
                      log=f"jobs/{C1}.log"),
        ev.JobEnded(job="job-1", end="stopped", reason=f"why {BIDI}", duration_s=1.0),
        ev.Notice(level="warning", message=f"notice {HOSTILE}"),
        ev.Submission(path=f"answer{OSC52}.txt", by="agent", note=f"note {HOSTILE}"),
        ev.EvaluationFinished(ok=False, metric=f"acc{CSI}", error=f"evaluator says {HOSTILE}",
                              violations=[f"bad {OSC8}"]),
        ev.RunFinished(status="finished", reason="submitted", message=f"done {HOSTILE}"),
    ]  # fmt: skip
    for i, event in enumerate(events):
        event.seq = i + 1
    return events


@pytest.mark.parametrize("verbose", [False, True])
@pytest.mark.parametrize("rich", [False, True])
def test_the_transcript_shows_every_text_escaped(rich: bool, verbose: bool) -> None:
    out = io.StringIO()
    display = TranscriptDisplay(out, rich=rich, verbose=verbose)
    for event in _hostile_events():
        display.on_event(event)
    display.close()
    text = out.getvalue()
    assert_shown_not_obeyed(text, "transcript")
    assert "\\x1b]52;c;cHduZWQ=\\x07" in text  # shown, not dropped
    assert "\\udcffname" in text  # a name that was not UTF-8 shows, as its escape
    assert MARKUP in text  # as it is: rich reads no markup here


def test_json_lines_are_the_events_exactly_and_obey_nothing() -> None:
    out = io.StringIO()
    display = JsonDisplay(out)
    events = _hostile_events()
    for event in events:
        display.on_event(event)
    lines = out.getvalue().splitlines()
    assert_shown_not_obeyed(out.getvalue().replace("\n", " "), "--json")
    assert [ev.parse_event(line.encode()) for line in lines] == events


def test_the_batch_report_escapes_what_runs_and_tasks_say() -> None:
    row = RunRow(
        run_id=f"r{OSC52}", task=f"task|{HOSTILE}", model=f"m{BIDI}", seed=0, status="error",
        reason=f"why{CSI}", score=None, normalized_score=None, success=False, duration_s=1.0,
        tokens=0, cost_usd=0.0, failure=f"fail{C1}", success_bar=f"bar{OSC8}", started=False,
        detail=f"detail{HOSTILE}", nodes=[f"node{OSC52}"], nodes_lost=[f"node{OSC52}"],
    )  # fmt: skip
    report = markdown(summarize([row]), [row])
    assert_shown_not_obeyed(report, "report.md")
    table = next(line for line in report.splitlines() if line.startswith("| task\\|"))
    assert table.count(" | ") == 14  # the `|` in the task's name stays in its cell


def test_batch_progress_lines_escape_what_they_quote() -> None:
    out = io.StringIO()
    PlainProgress(out)(Progress(total=1, events=[f"failed (usage) r1: {HOSTILE}"]))
    assert_shown_not_obeyed(out.getvalue(), "batch progress")
    assert "\\x1b]52;c;cHduZWQ=" in out.getvalue()


# --- a whole run under attack ------------------------------------------------------------


@pytest.fixture
def scene(monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    """The attack suite's host (canaries, the answer task), cleaned up afterwards."""
    import shutil

    made = _make_scene(monkeypatch)
    yield made
    shutil.rmtree(made.root, ignore_errors=True)


PRINTF = (
    # printf's own escapes: the command's text holds none, its output all of them.
    "printf 'out \\033]52;c;cHduZWQ=\\007 \\033[2J \\302\\2332J \\342\\200\\256evil "
    "\\033]8;;http://evil.example/\\033\\\\docs\\033]8;;\\033\\\\\\n'"
)
FILE_NAME = f"evil{OSC52}{BIDI}[red]x"
JOB_NAME = f"{MARKUP}{CSI}"


def _worker() -> list[dict[str, Any]]:
    return [
        turn(
            f"I will print things {HOSTILE}",
            call("bash", command=f"{PRINTF}; touch '{FILE_NAME}'; echo 42 > answer.txt"),
        ),
        turn("", call("bash", command=f"echo '{HOSTILE}'")),  # the command itself holds them
        turn("", call("list_files")),
        turn("", call("note", hypothesis=f"it works {HOSTILE}", change=f"nothing {OSC8}")),
        turn("", {"name": "job_start", "arguments": {"command": "echo hi", "name": JOB_NAME}}),
        turn("", call("report", summary=f"answer.txt holds 42 {HOSTILE}")),
    ]


def _cli(scene: Scene, *args: str) -> Any:
    return mlra_cli(list(args), cwd=scene.cwd, env={"HOME": str(scene.home)}, timeout=180)


def _run(scene: Scene, *flags: str) -> tuple[Any, Path]:
    runs = scene.root / "runs-terminal" / "-".join(f.strip("-") for f in flags)
    script = {"supervisor": supervisor_answering(f"Answer. {HOSTILE}"), "worker": _worker()}
    with ScriptedModelServer(script) as server:
        proc = mlra_cli(
            [
                "run", str(scene.task), "--model", "openai/test-model",
                "--base-url", server.url_for("openai"), "--runs-dir", str(runs), *flags,
            ],
            cwd=scene.cwd,
            env={"HOME": str(scene.home), "OPENAI_API_KEY": scene.canaries["API key"]},
            timeout=180,
        )  # fmt: skip
    (run_dir,) = runs.iterdir()
    return proc, run_dir


def _logged(run_dir: Path) -> list[ev.Event]:
    events = read_events(run_dir / "events.jsonl")
    outputs = "\n".join(e.output for e in events if isinstance(e, ev.ToolResult))
    # The log keeps the exact bytes: what the command printed, the file's name, the job's.
    assert "out \x1b]52;c;cHduZWQ=\x07 \x1b[2J \x9b2J \u202eevil" in outputs
    assert FILE_NAME in outputs
    assert any(isinstance(e, ev.JobStarted) and e.name == JOB_NAME for e in events)
    assert any(isinstance(e, ev.ExperimentNote) and HOSTILE in e.hypothesis for e in events)
    scored = next(e for e in events if isinstance(e, ev.EvaluationFinished))
    assert scored.ok and scored.score == 1.0  # and the honest answer still scores
    return events


def test_a_run_printing_terminal_control_reaches_no_terminal(scene: Scene) -> None:
    proc, run_dir = _run(scene, "--no-tui")
    assert proc.returncode == 0, proc.stderr
    events = _logged(run_dir)
    assert_shown_not_obeyed(proc.stdout + proc.stderr, "mlra run --no-tui")
    assert "\\x1b]52;c;cHduZWQ=\\x07" in proc.stdout  # the output's tail, escaped

    replayed = _cli(scene, "replay", str(run_dir), "--no-tui", "-v")
    assert replayed.returncode == 0, replayed.stderr
    assert_shown_not_obeyed(replayed.stdout + replayed.stderr, "mlra replay --no-tui -v")
    assert f"job-1 ({printable_line(JOB_NAME)}) started" in replayed.stdout

    as_json = _cli(scene, "replay", str(run_dir), "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert_shown_not_obeyed(as_json.stdout.replace("\n", " "), "mlra replay --json")
    # The same events, byte for byte, once a JSON reader has read the escapes.
    lines = as_json.stdout.splitlines()
    assert [ev.parse_event(line.encode()) for line in lines] == events

    listed = _cli(scene, "runs", "--runs-dir", str(run_dir.parent))
    assert listed.returncode == 0, listed.stderr
    assert_shown_not_obeyed(listed.stdout + listed.stderr, "mlra runs")

    report = _cli(scene, "report", str(run_dir.parent), "--no-plots")
    assert report.returncode == 0, report.stderr
    assert_shown_not_obeyed(report.stdout + report.stderr, "mlra report")
    assert_shown_not_obeyed((run_dir.parent / "report.md").read_text(), "report.md")


@pytest.mark.parametrize("flag", ["-v", "--json"])
def test_verbose_and_json_runs_reach_no_terminal_either(scene: Scene, flag: str) -> None:
    proc, run_dir = _run(scene, "--no-tui", flag)
    assert proc.returncode == 0, proc.stderr
    _logged(run_dir)
    assert_shown_not_obeyed(proc.stdout.replace("\n", " ") + proc.stderr, f"mlra run {flag}")


# --- the console and the replay -----------------------------------------------------------


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """File times are shown in local time; pinned, so the snapshot matches anywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


class _Console(MlraApp):
    """The console, with the action a hostile `@click` would name."""

    CSS_PATH = ReplayApp.CSS_PATH  # absolute: found from this folder too
    pwned = False

    def action_pwned(self) -> None:
        self.pwned = True


async def test_a_job_named_with_markup_shows_literally_and_clicks_nothing() -> None:
    app = _Console(events=_hostile_events()[:1])
    chosen: list[str | None] = []
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        app.push_screen(StopJobScreen([("job-1", f"job-1 ({JOB_NAME})")]), chosen.append)
        await pilot.pause()
        options = app.screen.query_one(OptionList)
        prompt = options.get_option_at_index(0).prompt
        assert isinstance(prompt, Text)
        assert prompt.plain == f"job-1 ({printable_line(JOB_NAME)})"
        assert "[@click=app.pwned]x[/]" in _screen_text(app)
        # Where markup would have put the link: on the `x` after "job-1 (".
        line = next(y for y in range(options.size.height) if "job-1" in _line(options, y))
        column = _line(options, line).index("job-1 (") + len("job-1 (")
        inside = options.content_region.offset - options.region.offset  # border, padding
        await pilot.click(OptionList, offset=(inside.x + column, inside.y + line))
        await pilot.pause()
    assert not app.pwned
    assert chosen == ["job-1"]  # the click chose the job, as any click on its line does


def _line(widget: Any, y: int) -> str:
    return "".join(segment.text for segment in widget.render_line(y))


def _drawn(app: Any) -> tuple[str, str]:
    """What the console would write to the terminal for its whole screen, and the text
    a person would read there."""
    console = Console(
        width=app.size.width, height=app.size.height, file=io.StringIO(),
        force_terminal=True, color_system="truecolor", record=True, legacy_windows=False,
    )  # fmt: skip
    console.print(
        app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    )
    written = console.file.getvalue()
    return written, console.export_text()


def _screen_text(app: Any) -> str:
    return _drawn(app)[1]


SGR_OR_MOVE = re.compile(r"\x1b\[[0-9;]*m|\x1b\[[0-9]+;[0-9]+H|\x1b\[[0-9]*[ABCDK]")
"""What the console itself writes: colours and cursor moves, nothing else."""


def assert_drawn_safely(app: Any, where: str) -> str:
    written, text = _drawn(app)
    assert_shown_not_obeyed(SGR_OR_MOVE.sub("", written).replace("\r", ""), where)
    assert "\\x1b]52;c;cHduZWQ=\\x07" in text, where  # the attempt is shown, escaped
    return text


def _hostile_workspace(root: Path) -> Path:
    for i, name in enumerate([FILE_NAME, "[red]x", "notes.txt"]):
        path = root / name
        path.write_text(f"preview {HOSTILE}\n")
        os.utime(path, (EPOCH + 60 * i, EPOCH + 60 * i))
    return root


def _console_events() -> list[ev.Event]:
    events = _hostile_events()
    note = ev.ExperimentNote(hypothesis=f"bigger {HOSTILE}", change=f"layers {OSC52}")
    note.seq = len(events) + 1
    return [*events[:-3], note]  # running still, with an experiment noted


async def _show_files(pilot: Any) -> None:
    app = pilot.app
    await app.query_one(FilesPane).refresh_tree()
    await pilot.pause()
    tree = app.query_one("#files-tree")
    tree.focus()
    await pilot.press("home")  # the first file, previewed
    await pilot.pause()


async def test_the_console_draws_hostile_text_as_text(tmp_path: Path) -> None:
    files = LocalSandbox(_hostile_workspace(tmp_path), SandboxSpec(), isolation_mode="none")
    app = _Console(events=_console_events(), files=files)
    async with app.run_test(size=(160, 48)) as pilot:
        await _show_files(pilot)
        text = assert_drawn_safely(app, "the console")
        assert "[red]x" in text  # a file named like markup is that name
        # Text no pane escaped (a toast, a widget of tomorrow) is cleaned as it is drawn.
        app.notify(f"toast {HOSTILE}", markup=False)
        await app.screen.mount(Static(Text(f"unescaped {HOSTILE}")))
        await pilot.pause()
        text = assert_drawn_safely(app, "the console with a toast")
        assert "unescaped ]52;c;cHduZWQ=]8;;http://evil.example/" in text
    assert not app.pwned


async def test_the_replay_draws_hostile_text_as_text(tmp_path: Path) -> None:
    events = _hostile_events()
    app = ReplayApp(ReplayModel(events))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        assert_drawn_safely(app, "the replay at its end")
        for _ in range(6):
            await pilot.press("left")
        await pilot.pause()
        assert_drawn_safely(app, "the replay mid-run")


def test_a_hostile_run_in_the_console(snap_compare: Any, tmp_path: Path) -> None:
    """What a person sees of the attack: every sequence spelled out where it was sent, a
    file and a job named like markup shown by their names."""
    files = LocalSandbox(_hostile_workspace(tmp_path), SandboxSpec(), isolation_mode="none")
    app = _Console(events=_console_events(), files=files)
    assert snap_compare(app, terminal_size=(160, 40), run_before=_show_files)


def test_a_task_files_text_is_shown_escaped(tmp_path: Path) -> None:
    """`mlra tasks show`: a task file is as foreign as an agent's output."""
    from tests.conftest import answer_copy

    hostile = json.dumps(HOSTILE)[1:-1]  # TOML reads JSON's \u escapes the same way
    task = answer_copy(
        tmp_path / "task",
        ('title = "Write the answer"', f'title = "Write {hostile}"'),
        ('rules = "Do not', f'rules = "{hostile} Do not'),
    )
    shown = mlra_cli(["tasks", "show", str(task)], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert_shown_not_obeyed(shown.stdout + shown.stderr, "mlra tasks show")
    assert "\\x1b]52;c;cHduZWQ=\\x07" in shown.stdout
