"""`mlra share`: a real recorded run with hostile agent text appended through the typed
events, shared as a page, and the page parsed as a browser's parser reads it: every
element and attribute is mlra's own, the corpus is there only as text, the policy names
the hashes of the page's one script and one style and allows no network, secrets are
redacted and said to be, and a long output is cut with the digest of what was cut.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog, iter_events
from mlra.batch.share.text import Redactor, esc, json_for_script
from mlra.console.cli.cli import main
from mlra.terminal_text import has_controls
from tests.batch.metrics_runs import metrics_run
from tests.batch.share_corpus import (
    ENV_SECRET,
    GITHUB_TOKEN,
    HOSTILE,
    ONE_MB_LINE,
    SECRET_KEY,
    add_hostile_events,
)
from tests.conftest import ANSWER_TASK, mlra_cli, run_baseline

OWN_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "table", "tr", "td", "th",
    "span", "b", "code", "ul", "ol", "li", "p", "pre", "div", "details", "summary", "button",
    "script", "svg", "rect", "text", "polyline", "circle", "figure", "figcaption", "br",
}  # fmt: skip


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.styles: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._in = tag
            if tag == "script":
                self.scripts.append((dict(attrs), ""))
            else:
                self.styles.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "script":
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)
        elif self._in == "style":
            self.styles[-1] += data
        else:
            self.text.append(data)


def _parse(html_text: str) -> Page:
    page = Page()
    page.feed(html_text)
    page.close()
    return page


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def check_page_is_ours(html_text: str) -> Page:
    """What every shared page must be, whatever the run held."""
    page = _parse(html_text)
    assert page.tags[0][0] == "html" and page.tags[1][0] == "head"
    first_in_head = page.tags[2]
    assert first_in_head[0] == "meta" and first_in_head[1]["http-equiv"] == (
        "Content-Security-Policy"
    )
    csp = first_in_head[1]["content"] or ""
    assert csp.startswith("default-src 'none'; ") and "connect-src" not in csp
    assert "img-src data:" in csp and "unsafe" not in csp and "http" not in csp
    for tag, attrs in page.tags:
        assert tag in OWN_TAGS, tag
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert not {"href", "src", "style", "srcdoc", "action"} & set(attrs), (tag, attrs)
    code = [s for s in page.scripts if s[0].get("type") != "application/json"]
    data = [s for s in page.scripts if s[0].get("type") == "application/json"]
    assert len(code) == 1 and len(data) == 1 and len(page.styles) == 1
    script_src = re.search(r"script-src ([^;]*)", csp)
    style_src = re.search(r"style-src ([^;]*)", csp)
    assert script_src and script_src.group(1) == _hash(code[0][1])
    assert style_src and style_src.group(1) == _hash(page.styles[0])
    assert "<" not in data[0][1] and "\u2028" not in data[0][1]
    json.loads(data[0][1])
    for raw in ("\u202e", "\u2028", "\u2029", "\x1b", "\x00", "\x07"):
        assert raw not in html_text, repr(raw)
    return page


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("share")
    run_dir = run_baseline(ANSWER_TASK, root, "--isolation", "none").run_dir
    add_hostile_events(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def shared(hostile_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Page]:
    out = tmp_path_factory.mktemp("page") / "run.html"
    mp = pytest.MonkeyPatch()
    mp.setenv("MY_SERVICE_TOKEN", ENV_SECRET)
    try:
        assert main(["share", str(hostile_run), "-o", str(out)]) == 0
    finally:
        mp.undo()
    text = out.read_text(encoding="utf-8")
    return text, check_page_is_ours(text)


def test_hostile_text_is_only_text(shared: tuple[str, Page]) -> None:
    _, page = shared
    shown = "".join(page.text)
    plain = [h for h in HOSTILE if not has_controls(h) and "redacted" not in Redactor({})(h)]
    assert len(plain) >= 10
    for line in plain:
        assert line in shown, line
    assert "⟨U+202E⟩evil" in shown and "⟨U+001B⟩[31mred" in shown and "⟨U+0000⟩" in shown
    assert "line⟨U+2028⟩sep⟨U+2029⟩para" in shown
    assert "[@click=app.quit]x[/]" in shown  # Rich/Textual markup: plain text, as written
    assert "window.PWNED" not in "".join(s[1] for s in page.scripts)


def test_secrets_are_redacted_and_counted(shared: tuple[str, Page]) -> None:
    html_text, page = shared
    for secret in (SECRET_KEY, GITHUB_TOKEN, ENV_SECRET, SECRET_KEY[:20]):
        assert secret not in html_text
    shown = "".join(page.text)
    assert "[redacted: Anthropic key]" in shown and "[redacted: GitHub token]" in shown
    assert re.search(r"redacted: \d+ × Anthropic key", shown)
    assert re.search(r"redacted: \d+ × value of a secret environment variable", shown)


def test_a_long_output_is_cut_with_the_digest_of_what_was_cut(shared: tuple[str, Page]) -> None:
    html_text, page = shared
    shown = "".join(page.text)
    found = re.search(r"([\d,]+) characters \(([\d,]+) bytes\) cut, SHA-256 ([0-9a-f]{64})", shown)
    assert found is not None
    n = int(found.group(1).replace(",", ""))
    head = shown.index("A" * 1000)
    kept_head = len(shown[head:].split("[…")[0].rstrip())
    assert hashlib.sha256(ONE_MB_LINE[kept_head : kept_head + n].encode()).hexdigest() == (
        found.group(3)
    )
    assert "mid()" not in html_text and len(html_text) < 400_000
    assert "transcript texts cut to head and tail: 1" in shown


def test_the_page_has_header_notes_attempts_curves_plan_and_folded_steps(
    shared: tuple[str, Page],
) -> None:
    _, page = shared
    shown = "".join(page.text)
    for words in ("exact_match = 1", "success", "mlra", "SHA-256", "Notes (1)", "Attempts (2)"):
        assert words in shown, words
    assert "a1 ★" in shown and "Plan, as it changed" in shown
    tags = [t for t, _ in page.tags]
    assert tags.count("details") >= 3 and tags.count("svg") >= 2 and "polyline" in tags
    data = json.loads(next(s[1] for s in page.scripts if s[0].get("type")))
    assert data["score"] == 1.0 and [a["id"] for a in data["attempts"]] == ["a1", "a2"]
    assert "curve points thinned" in shown  # 5000 points kept as bucket extremes


def test_a_batch_page_lists_each_runs_summary_by_task(tmp_path: Path) -> None:
    batch = tmp_path / "b"
    metrics_run(batch / "runs", "r1", task=HOSTILE[1], score=0.25)
    metrics_run(batch / "runs", "r2", task="answer", model=HOSTILE[0])
    metrics_run(batch / "runs", "r3", task="answer", model=HOSTILE[0], seed=2, score=None)
    (batch / "batch.json").write_text("{}", encoding="utf-8")
    out = tmp_path / "batch.html"
    assert main(["share", str(batch), "-o", str(out)]) == 0
    page = check_page_is_ours(out.read_text(encoding="utf-8"))
    shown = "".join(page.text)
    assert HOSTILE[1] in shown and HOSTILE[0] in shown and "r1" in shown and "r2" in shown
    assert "2 task and model groups" in shown
    # A run graded with no score is said to have none, as `mlra compare` says, not "no".
    r3 = page.text.index("r3")
    assert "no score" in page.text[r3 : r3 + 12]
    # The attempt number's column is named for it: "start" over a "1" read as a time.
    assert "try" in page.text and "start" not in page.text
    assert page.text[r3 + page.text.index("try") - page.text.index("run")] == "1"


def test_a_batch_pages_data_is_redacted_as_its_tables_are(tmp_path: Path) -> None:
    """A key in a run's model name (a proxy's model given as `openai/<key>`, say) was
    redacted in the page's tables and written whole in the page's JSON for tools."""
    key = "sk-proj-" + "Q7x" * 8
    batch = tmp_path / "b"
    metrics_run(batch / "runs", "r1", task="answer", model=f"openai/{key}")
    metrics_run(batch / "runs", "r2", task="answer", seed=2)
    (batch / "batch.json").write_text("{}", encoding="utf-8")
    out = tmp_path / "batch.html"
    assert main(["share", str(batch), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert key not in text
    data = json.loads(next(s[1] for s in check_page_is_ours(text).scripts if s[0].get("type")))
    assert data["runs"][0]["model"] == "openai/[redacted: OpenAI-style key]"


def _with_hostile_model_and_curves(run_dir: Path, model: str | None, scale: float) -> None:
    """A recorded run given a model name no provider gives (run_started and result.json
    rewritten, as a hostile or careless writer of a log could) and two curves appended as a run's
    jobs write them: a loss named with markup, and an accuracy."""
    log_path = run_dir / EVENTS_FILE
    lines = log_path.read_text(encoding="utf-8").splitlines(keepends=True)
    if model is not None:
        first = json.loads(lines[0])
        assert first["type"] == "run_started"
        first["model"] = model
        lines[0] = json.dumps(first) + "\n"
        log_path.write_text("".join(lines), encoding="utf-8")
        result = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
        (run_dir / "result.json").write_text(json.dumps({**result, "model": model}))
    last = max(e.seq for e in iter_events(log_path))
    log = EventLog(log_path, start_seq=last)
    try:
        for name, values in (
            (HOSTILE[1], [scale * 3 / (k + 1) for k in range(40)]),
            ("acc", [min(1.0, scale * k / 40) for k in range(40)]),
        ):
            points = [
                ev.MetricPoint(name=name, value=v, step=k, wall=float(k))
                for k, v in enumerate(values)
            ]
            event = ev.Metrics(source="job:j1", job="j1", points=points)
            event.t = 50.0
            log.append(event)
    finally:
        log.close()


def test_a_batch_page_compares_each_tasks_runs(tmp_path: Path) -> None:
    """Two real baseline runs of one task (seeds 1 and 2, one under a hostile model
    name): the page has the matrix with only the differing settings, the paired table
    by model, and the overlaid curves, one line a run in its colour; no run text is an
    element or an attribute."""
    batch = tmp_path / "b"
    (batch / "runs").mkdir(parents=True)
    for seed, model in ((1, None), (2, HOSTILE[0])):
        root = tmp_path / f"r{seed}"
        root.mkdir()
        run = run_baseline(
            ANSWER_TASK, root, "--isolation", "none", "--seed", str(seed), "--run-id", f"s{seed}"
        ).run_dir
        _with_hostile_model_and_curves(run, model, scale=float(seed))
        run.rename(batch / "runs" / run.name)
    out = tmp_path / "batch.html"
    assert main(["share", str(batch), "-o", str(out)]) == 0
    page = check_page_is_ours(out.read_text(encoding="utf-8"))
    shown = "".join(page.text)
    compared = shown[shown.index("Runs compared") :]
    assert "Paired by model" in compared and HOSTILE[0] in compared
    assert re.search(r"\d wins, \d losses, \d ties", compared)
    assert "seed" in compared and "settings alike in every run, not shown" in compared
    assert "* the best" in compared and "observation_limit" not in compared
    heads = [a.get("class") for t, a in page.tags if t == "span" and a.get("class")]
    assert {"c0", "c1"} <= set(heads)  # each run's swatch in its colour
    lines = [a.get("class") for t, a in page.tags if t == "polyline"]
    assert lines.count("line c0") >= 2 and lines.count("line c1") >= 2  # both panels
    assert HOSTILE[1] in compared and "acc" in compared
    data = json.loads(next(s[1] for s in page.scripts if s[0].get("type")))
    assert data["compared"]["paired"][0]["b"] == HOSTILE[0]
    assert data["compared"]["tasks"]["answer"]["runs"] == ["s1", "s2"]


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    for args in (
        [str(tmp_path / "nope"), "-o", str(tmp_path / "x.html")],
        [str(tmp_path / "empty"), "-o", str(tmp_path / "x.html")],
        [str(tmp_path / "empty"), "-o", str(tmp_path / "no" / "x.html")],
    ):
        assert main(["share", *args]) == 2
    with pytest.raises(SystemExit) as exit_:
        main(["share", str(tmp_path / "empty"), "-o", "x.html", "--max-mb", "-1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 4


def test_escaping_helpers() -> None:
    assert esc('<a href="x">') == "&lt;a href=&quot;x&quot;&gt;"
    assert json_for_script({"a": "</script>\u2028&"}) == (
        '{"a": "\\u003c/script\\u003e\\u2028\\u0026"}'
    )
    redact = Redactor({})
    assert redact("AKIAABCDEFGHIJKLMNOP and hf_" + "x" * 30) == (
        "[redacted: AWS access key] and [redacted: Hugging Face token]"
    )
    assert redact("DB_PASSWORD: 'letmein99'") == "DB_PASSWORD: '[redacted: value]'"
    code = "tok = tokenizer = AutoTokenizer.from_pretrained(name); max_tokens: 100000000"
    assert redact(code) == code  # code that names tokens is not a secret


def test_thinning_keeps_each_buckets_extremes() -> None:
    from mlra.batch.share.curves_svg import MAX_BUCKETS, Thinned

    series = Thinned()
    for k in range(100_000):
        value = 1000.0 if k == 77_777 else -5.0 if k == 12_345 else 1.0 / (k + 1)
        series.add(k, float(k), value)
    kept = series.points()
    assert len(kept) <= 2 * (MAX_BUCKETS + 1) and series.read == 100_000
    assert (77_777, 77_777.0, 1000.0) in kept and (12_345, 12_345.0, -5.0) in kept
    assert [p[1] for p in kept] == sorted(p[1] for p in kept)  # still in order


def test_a_call_cut_off_reads_as_one_not_as_a_model_error() -> None:
    """A call the deadline, a stop or a lost connection cut off is no failure of the model
    (the console and headless output say so); the shared page showed it as a red
    "model error"."""
    import io

    from mlra import events as ev
    from mlra.batch.share.text import Redactor
    from mlra.batch.share.transcript import Transcript

    out = io.BytesIO()
    transcript = Transcript(out, 100_000, Redactor({}))
    transcript.feed(ev.StepStarted(step=1, agent="worker", turn=1, t=1.0))
    cut = "worker's call was cut off by the run's deadline (about 900 tokens counted)"
    transcript.feed(ev.ModelError(agent="worker", model="m", error=cut, cut_off="deadline"))
    transcript.feed(ev.ModelError(agent="worker", model="m", error="HTTP 500", fatal=True))
    transcript.close()
    page = out.getvalue().decode()
    assert "call cut off" in page and page.count("model error") == 1
    assert page.index("call cut off") < page.index("model error")


def test_a_progress_bar_shows_its_last_state_and_the_page_has_a_default_name(
    tmp_path: Path,
) -> None:
    """`mlra share RUN` with no -o writes ./RUN.html; a tqdm bar in a command's output
    reads as the console shows it (its last state), not as `⟨U+000D⟩` marks between
    each redraw; a carriage return in a command still shows (it could hide what
    precedes it)."""
    run_dir = run_baseline(ANSWER_TASK, tmp_path, "--isolation", "none").run_dir
    last = max(e.seq for e in iter_events(run_dir / EVENTS_FILE))
    log = EventLog(run_dir / EVENTS_FILE, start_seq=last)
    bar = "".join(f"\rWriting model shards: {p}%|{'#' * (p // 10)}|" for p in (0, 50, 100))
    log.append(
        ev.ToolCall(call_id="bar", agent="worker", tool="bash", arguments={"command": "rm x\rls"})
    )
    log.append(
        ev.ToolResult(
            call_id="bar", tool="bash", agent="worker", ok=True, output=f"valid 4.543\n{bar}\n"
        )
    )
    log.close()
    done = mlra_cli(["share", str(run_dir)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page_file = tmp_path / f"{run_dir.name}.html"
    assert done.stdout.startswith(f"wrote {run_dir.name}.html ("), done.stdout
    shown = "".join(check_page_is_ours(page_file.read_text(encoding="utf-8")).text)
    assert "valid 4.543\nWriting model shards: 100%|##########|" in shown
    assert "shards: 0%" not in shown and "⟨U+000D⟩Writing" not in shown
    assert '"command": "rm x\\rls"' in shown  # the call's JSON, its \r written out
