"""A normalized score reads the same wherever a person meets it: `mlra runs`, `mlra
compare`, report.md (its groups and its per-task tables) and the share pages all write
`+0.482` and `-0.027`. Each had its own (`+0.482`, `0.4819`, `0.09093`, `\\-0.02726`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlra.batch.report import write_report
from mlra.batch.share.batch_page import write_batch_page
from mlra.batch.share.run_page import write_run_page
from mlra.console.cli.cli import main
from mlra.scores import format_normalized
from tests.batch.test_experiments_report import experiment_run


def _batch(tmp_path: Path) -> Path:
    """Two runs whose grading said normalized 0.48186... and -0.02726..."""
    batch = tmp_path / "b1"
    experiment_run(batch / "runs", "r-up", [0.4], score=0.4818626, baseline=0.25, top=1.0)
    experiment_run(batch / "runs", "r-down", [0.4], score=-0.0272634, baseline=0.25, top=1.0)
    (batch / "batch.json").write_text("{}", encoding="utf-8")
    return batch


def test_the_format() -> None:
    assert [format_normalized(v) for v in (0.4818626, -0.0272634, 1.0, -1.373, -0.0001)] == [
        "+0.482", "-0.027", "+1.000", "-1.373", "+0.000",
    ]  # fmt: skip


def test_runs_and_compare_write_it_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = _batch(tmp_path) / "runs"
    assert main(["runs", "--runs-dir", str(runs)]) == 0
    table = capsys.readouterr().out
    assert re.search(r"^r-up .* \+0\.482 ", table, re.M), table
    assert re.search(r"^r-down .* -0\.027 ", table, re.M), table
    assert main(["compare", str(runs / "r-up"), str(runs / "r-down"), "--no-tui"]) == 0
    compared = capsys.readouterr().out
    assert re.search(r"^normalized +\+0\.482 +-0\.027$", compared, re.M), compared


def test_the_report_and_share_pages_write_it_alike(tmp_path: Path) -> None:
    batch = _batch(tmp_path)
    write_report(batch, plots=False)
    md = (batch / "report.md").read_text()
    assert "| normalized | -0.027 | +0.482 |" in md  # no `\-`: a cell begins no line
    assert "| +0.227 ± 0.255 |" in md  # the group's mean ± standard error
    write_batch_page(batch, tmp_path / "batch.html")
    page = " ".join(re.sub(r"<[^>]+>", " ", (tmp_path / "batch.html").read_text()).split())
    assert "normalized -0.027 +0.482 best validation" in page
    write_run_page(batch / "runs" / "r-up", tmp_path / "run.html")
    assert "(normalized +0.482)" in (tmp_path / "run.html").read_text()


def test_markdown_still_escapes_what_would_open_a_block() -> None:
    """A line's leading minus sign opens nothing; a list item, a rule and an underline
    still do, and are escaped where a text begins a line."""
    from mlra.batch.report_text import md_cell, md_text

    assert md_text("-0.027") == "-0.027" and md_text("+0.482") == "+0.482"
    assert [md_text(t) for t in ("- item", "-", "---", "+ item", "# h", "1. x")] == [
        "\\- item", "\\-", "\\---", "\\+ item", "\\# h", "1\\. x",
    ]  # fmt: skip
    assert md_cell("-") == "-" and md_cell("- item") == "- item"
