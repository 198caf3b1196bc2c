"""Series names a run's scripts chose (`a/../../x`, a Markdown image, an HTML tag, a
thousand characters, a newline, a NUL, a lone surrogate) through every export and the
batch report: each tracker's real client takes them under names it accepts, read back
with its own reader, the originals kept beside them; report.md, parsed as Markdown,
forms no image, link or HTML from them; and a run a tracker cannot take is one line
while the others are written.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from mlra import events as ev
from mlra.batch.export.names import MAX_KEY, SafeNames, tracker_name, wandb_name
from mlra.batch.report import write_report
from mlra.batch.report_text import md_text
from mlra.console.cli.cli import main
from mlra.terminal_text import printable_line
from tests.batch.metrics_runs import metrics_run

POISON = (
    "a/../../x",
    "![p](https://host/p.png?d=1)",
    "<img src=x onerror=alert(1)>",
    "n" * 1000,
    "new\nline",
    "nul\x00x",
    "sur\ud800x",
    "_step",
    "mlra/step",
    "glob*",
    "$\\frac{a$",
)


def _poisoned(runs: Path, name: str) -> Path:
    points = [
        ev.MetricPoint(name=n, value=float(k + i), step=k, wall=float(k))
        for i, n in enumerate(POISON)
        for k in (1, 2, 3)
    ]
    once = [ev.MetricPoint(name="[d](https://host/once.png)", value=128.0, wall=1.0)]
    more = (
        ev.Metrics(source="job:j2", job="j2", points=points),
        ev.Metrics(source="job:j3", job="j3", points=once),
    )
    return metrics_run(runs, name, more=more)


@pytest.fixture(scope="module")
def batch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    batch = tmp_path_factory.mktemp("batch") / "poisoned"
    _poisoned(batch / "runs", "r1")
    _poisoned(batch / "runs", "r2")
    (batch / "batch.json").write_text("{}", encoding="utf-8")
    return batch


def _export(path: Path, target: str, dest: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["export", str(path), "--to", target, "--dest", str(dest)]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return out.out


def test_names_are_deterministic_unique_and_kept_to_each_trackers_rules() -> None:
    from mlflow.utils.validation import _validate_metric_name, _validate_param_name

    names = [*POISON, "a/__/__/x", "loss", "n" * 999 + "m", "..x", "/lead", "a//b", ".", ""]
    keys = SafeNames(tracker_name, names)
    again = SafeNames(tracker_name, reversed(names))
    assert all(keys[n] == again[n] for n in names)  # the same names, the same keys
    assert len({keys[n] for n in names}) == len(set(names))  # never two names on one key
    assert keys["loss"] == "loss" and keys["a/__/__/x"] == "a/__/__/x"  # a clean name keeps it
    for name in names:
        key = keys[name]
        _validate_metric_name(key)  # MLflow's own rules: characters, paths
        _validate_param_name(key)
        assert len(key) <= MAX_KEY
    w = SafeNames(wandb_name, names, reserved=("mlra/step", "mlra/wall_s"))
    assert all(not w[n].startswith("_") and "*" not in w[n] for n in names)
    assert w["mlra/step"] != "mlra/step"
    assert keys.renamed(["loss", "a/../../x"]) == {keys["a/../../x"]: "a/../../x"}


def test_mlflow_takes_every_name_and_keeps_the_originals(
    batch_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow.tracking import MlflowClient

    dest = tmp_path / "out" / "mlruns"
    said = _export(batch_dir, "mlflow", dest, capsys)
    assert "2 runs" in said and "not written" not in said
    client = MlflowClient(tracking_uri=dest.resolve().as_uri())
    experiment = client.get_experiment_by_name("mlra/answer")
    assert experiment is not None
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"r1", "r2"}
    run = runs["r1"]
    renamed = json.loads(run.data.tags["mlra.renamed"])
    assert set(renamed.values()) >= {"a/../../x", "n" * 1000, "new\nline", "nul\x00x"}
    assert "sur\ud800x" in renamed.values()  # JSON's escape: the very name
    by_name = {v: k for k, v in renamed.items()}
    history = client.get_metric_history(run.info.run_id, by_name["a/../../x"])
    assert [m.value for m in history] == [1.0, 2.0, 3.0]
    assert by_name["a/../../x"] == "a/__/__/x"
    assert len(by_name["n" * 1000]) <= MAX_KEY
    assert run.data.metrics["loss"] == 0.6  # the clean names as ever
    # Both runs' same name met under one key, so MLflow's charts compare them.
    other = json.loads(runs["r2"].data.tags["mlra.renamed"])
    assert other == renamed
    local = client.download_artifacts(run.info.run_id, "renamed.json", str(tmp_path))
    assert json.loads(Path(local).read_text()) == renamed
    # Nothing written outside the store: `..` made no path out of it.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mlruns"]


def test_tensorboard_takes_every_name_and_its_tables_render_no_image_or_link(
    batch_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugin_util import markdown_to_safe_html

    dest = tmp_path / "out" / "tb"
    said = _export(batch_dir, "tensorboard", dest, capsys)
    assert "2 runs" in said and "not written" not in said
    acc = EventAccumulator(str(dest / "answer" / "r1"), size_guidance={"tensors": 0})
    acc.Reload()
    scalars = acc.Tags()["scalars"]
    assert "a/__/__/x" in scalars and "loss" in scalars
    assert all(len(t) <= MAX_KEY and printable_line(t) == t for t in scalars)
    assert [s.value for s in acc.Scalars("a/__/__/x")] == [1.0, 2.0, 3.0]
    for tag in ("params", "renamed"):
        text = acc.Tensors(tag)[0].tensor_proto.string_val[0].decode()
        html = markdown_to_safe_html(text)  # TensorBoard's own renderer of the text tab
        assert "<img" not in html and "<a " not in html, html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html or tag == "params"
    renamed = acc.Tensors("renamed")[0].tensor_proto.string_val[0].decode()
    assert md_text("a/../../x") in renamed and md_text("sur\ud800x") in renamed
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["tb"]


def _wandb_records(path: Path) -> list[Any]:
    """A `.wandb` file's records (the LevelDB-style framing wandb-core writes)."""
    import importlib

    Record: Any = importlib.import_module("wandb.proto.wandb_internal_pb2").Record
    data, records, pos, pending = path.read_bytes(), [], 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:
            pos += 32768 - pos % 32768
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0 and length == 0:
            break
        pending += chunk
        if kind in (1, 4):
            record = Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def test_wandb_takes_every_name_and_keeps_the_originals_in_its_config(
    batch_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    dest = tmp_path / "wb"
    said = _export(batch_dir / "runs" / "r1", "wandb", dest, capsys)
    assert "1 run)" in said and "not written" not in said
    (log,) = (dest / "wandb").glob("offline-run-*/run-*.wandb")
    records = _wandb_records(log)
    keys: set[str] = set()
    steps: list[int] = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {
                (i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item
            }
            keys.update(k for k in row if not k.startswith("_"))
            if "a/__/__/x" in row:
                steps.append(row["mlra/step"])
    assert "a/__/__/x" in keys and "loss" in keys
    assert steps == [1, 2, 3]  # `mlra/step` is the step, never a series named so
    assert all(len(k) <= MAX_KEY and printable_line(k) == k and "*" not in k for k in keys)
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    config = {
        (i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in run.config.update
    }
    renamed = config["mlra.renamed"]
    assert renamed["a/__/__/x"] == "a/../../x" and renamed["m_step"] == "_step"
    assert printable_line("sur\ud800x") in renamed.values()


def test_a_run_that_cannot_be_written_is_one_line_and_the_others_are_written(
    batch_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "tb"
    (dest / "answer").mkdir(parents=True)
    (dest / "answer" / "r1").write_text("a file where r1's folder would go\n")
    said = _export(batch_dir, "tensorboard", dest, capsys)
    lines = said.splitlines()
    assert "(1 run)" in lines[0]
    assert len(lines) == 2 and lines[1].startswith("run r1 was not written to TensorBoard: ")
    assert list((dest / "answer" / "r2").glob("*tfevents*"))


def _rendered(text: str) -> list[Any]:
    """Every token of `text` parsed as GitHub-flavoured Markdown (tables, strikethrough,
    URLs and e-mail addresses linked where they stand bare, as GitHub links them: not a
    bare domain, which only viewers that guess link), inline tokens opened."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("gfm-like")
    assert md.linkify is not None
    md.linkify.set({"fuzzy_link": False})
    tokens: list[Any] = []
    for token in md.parse(text):
        tokens.append(token)
        tokens += token.children or []
    return tokens


def test_report_md_forms_no_image_link_or_html_from_a_runs_names(batch_dir: Path) -> None:
    write_report(batch_dir, plots=False)
    text = (batch_dir / "report.md").read_text(encoding="utf-8")
    tokens = _rendered(text)
    kinds = {t.type for t in tokens}
    assert not kinds & {"image", "link_open", "html_inline", "html_block"}, kinds
    spans = {t.content for t in tokens if t.type == "code_inline"}
    assert spans <= {"thinned", "d=128"}, spans  # report.md's own words only
    assert "![" not in text and "<img" not in text and "](" not in text
    assert "a/../../x" in text and md_text("<img src=x onerror=alert(1)>") in text


def test_the_reports_plots_draw_any_name(tmp_path: Path) -> None:
    """matplotlib reads text between `$`s as math: a series or a model named with one
    is drawn as written, never a parse error that stops the report."""
    pytest.importorskip("matplotlib")
    batch = tmp_path / "b"
    points = [ev.MetricPoint(name="$\\frac{a$", value=float(k), step=k, wall=k) for k in (1, 2)]
    more = (ev.Metrics(source="job:j2", job="j2", points=points),)
    metrics_run(batch / "runs", "r1", model="m$\\sqrt{$", more=more)
    (batch / "batch.json").write_text("{}", encoding="utf-8")
    write_report(batch)
    for png in ("score.png", "normalized.png", "validation.png", "curves-answer.png"):
        assert (batch / png).read_bytes()[:4] == b"\x89PNG", png


@pytest.mark.parametrize(
    "name",
    [
        *POISON,
        "[x](javascript:alert(1))",
        "`code` and ``more``",
        "*em* _em_ **b** ~~s~~",
        "# heading",
        "1. item",
        "- item",
        "> quote",
        "&lt;img src=x&gt; &#60;",
        "a\\](b)",
        "<https://host/p.png>",
        "answer__m__s1 R&D loss (ema) score >= 0.5",
        "see www.host.example or me@host.example",
    ],
)
def test_markdown_text_renders_as_the_very_text(name: str) -> None:
    """Parsed as CommonMark (report.md's viewers) and as Python-Markdown (TensorBoard's
    text tab), the escaped name is one paragraph of plain text reading as written."""
    import markdown

    tokens = _rendered(md_text(name))
    assert [t.type for t in tokens if t.nesting == 1] == ["paragraph_open"]
    inline = [t for t in tokens if t.type not in ("paragraph_open", "paragraph_close", "inline")]
    assert {t.type for t in inline} <= {"text", "softbreak"}, inline
    assert "".join(t.content for t in inline) == printable_line(name)
    html = markdown.markdown(md_text(name))
    assert "<img" not in html and "<a " not in html and "<code" not in html and "<em" not in html
