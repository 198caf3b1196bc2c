"""`mlra share`'s page in a real browser (Debian's `chromium`, headless; skipped where it
is not installed): opened from file:// with no console message, no policy violation and
no request the page made; the hostile corpus visible as text, nothing in it run; the
page's own script run (its hash is right), its curves and folded steps there. A page
without the policy, with an image and a console message, is opened the same way first,
so the checks are shown to see what they look for.

`MLRA_DOCS_PICTURES=1` also writes the docs' picture, docs/images/share-page.png.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mlra.agent.record.annotations import Annotation, append_annotation
from mlra.console.cli.cli import main
from tests.batch.metrics_runs import metrics_run
from tests.batch.share_corpus import add_demo_steps, add_hostile_events
from tests.batch.test_share_page import Page, check_page_is_ours
from tests.console.docs_screens import IMAGES

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)"),
]
QUIET = [
    "--headless=new",
    "--no-sandbox",  # root in a container; the page's own policy is what is under test
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--enable-logging=stderr",
    "--v=0",
]


def open_in_chromium(page: Path, work: Path, *extra: str) -> tuple[str, list[str], list[str]]:
    """The DOM after the page ran, its console lines and the URLs it asked for."""
    net = work / f"{page.stem}.netlog.json"
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, *QUIET, f"--user-data-dir={work / 'profile'}", f"--log-net-log={net}",
         *extra, "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    log = json.loads(net.read_text(encoding="utf-8"))
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    asked = [
        e["params"]["url"]
        for e in log["events"]
        if e["type"] == start_job
        and e.get("params", {}).get("initiator", "not an origin") != "not an origin"
    ]  # the browser's own (updates, time) have no origin; what a page asks for has one
    return done.stdout, console, asked


def test_the_checks_see_a_request_and_a_console_message(tmp_path: Path) -> None:
    control = tmp_path / "control.html"
    control.write_text(
        "<!DOCTYPE html><html><body><script>console.error('seen')</script>"
        '<img src="http://127.0.0.1:9/x.png"></body></html>',
        encoding="utf-8",
    )
    _, console, asked = open_in_chromium(control, tmp_path)
    assert any("seen" in line for line in console)
    assert "http://127.0.0.1:9/x.png" in asked


def test_the_page_opens_from_a_file_and_nothing_of_the_run_runs(tmp_path: Path) -> None:
    run_dir = metrics_run(tmp_path / "runs", "shown", score=0.8125)
    add_hostile_events(run_dir)
    out = tmp_path / "run.html"
    assert main(["share", str(run_dir), "-o", str(out)]) == 0
    check_page_is_ours(out.read_text(encoding="utf-8"))
    dom, console, asked = open_in_chromium(out, tmp_path)
    assert console == [] and asked == []
    page = Page()
    page.feed(dom)
    attrs = {tag: a for tag, a in reversed(page.tags)}  # each tag's first
    assert attrs["html"].get("data-script") == "ran"  # our script ran: its hash is right
    assert "data-pwned" not in attrs["body"]
    assert "PWNED" not in "".join(page.text[:3])  # the title is ours
    shown = "".join(page.text)
    assert "<img src=x onerror=alert(1)>" in shown and "⟨U+202E⟩" in shown
    assert "</pre></details><script>document.title='PWNED'</script>" in shown
    tags = [t for t, _ in page.tags]
    assert tags.count("details") >= 2 and "polyline" in tags  # folded steps, curves


@pytest.mark.skipif(os.environ.get("MLRA_DOCS_PICTURES") != "1", reason="MLRA_DOCS_PICTURES=1")
def test_the_docs_picture(tmp_path: Path) -> None:
    """docs/images/share-page.png: a run with curves, a note and some agent markup."""
    run_dir = metrics_run(tmp_path / "runs", "20261129-0912-answer-3f2a", score=0.9125)
    append_annotation(run_dir, Annotation(
        step=1, seq=2, tags=["spike"], rating=1, who="ana@lab",
        comment="loss spikes after step 300; the agent printed <img src=x onerror=alert(1)> "
        "and \x1b[31mANSI\x1b[0m: shown as text, never run",
    ))  # fmt: skip
    add_demo_steps(run_dir)
    out = tmp_path / "run.html"
    assert main(["share", str(run_dir), "-o", str(out)]) == 0
    picture = tmp_path / "shot.png"
    open_in_chromium(out, tmp_path, f"--screenshot={picture}", "--window-size=1000,1400",
                     "--hide-scrollbars")  # fmt: skip
    shutil.copyfile(picture, IMAGES / "share-page.png")
