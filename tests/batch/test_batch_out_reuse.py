"""A batch folder holds one batch: `mlra batch --out X` that leaves out tasks, models or
seeds X was made for is refused in one line, exit 2 (a newcomer's `--models baseline
--seeds 3` on a folder of two models' runs said `batch: 3/3 finished` over a report.md
of 5 runs, the earlier ones mixed in unsaid). The real CLI, a real baseline run."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import mlra_cli


def test_another_spec_in_the_same_out_is_refused_naming_the_difference(
    tmp_path: Path, answer_task: Path
) -> None:
    (tmp_path / "answer_task").symlink_to(answer_task)
    out = tmp_path / "b"
    first = ["batch", "--tasks", "answer_task", "--models", "baseline", "--out", str(out)]
    first += ["--isolation", "none", "--no-tui"]
    proc = mlra_cli(first, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    first_two = [*first, "--seeds", "2"]  # grown by a seed: carried on
    grown = mlra_cli(first_two, cwd=tmp_path, timeout=180)
    assert grown.returncode == 0, grown.stdout + grown.stderr
    made = (out / "batch.json").read_text()

    other = [*first, "--seeds", "1"]
    refused = mlra_cli(other, cwd=tmp_path, timeout=60)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = refused.stderr.strip()
    assert len(said.splitlines()) == 1, said
    assert f"{out} holds runs this batch leaves out (seeds 2 -> 1)" in said, said
    assert "another --out" in said
    assert (out / "batch.json").read_text() == made  # the folder's spec is kept

    # The same spec carries it on (its runs already finished).
    again = mlra_cli(first_two, cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2/2 finished (2 already were" in again.stdout
    assert json.loads((out / "batch.json").read_text())["seeds"] == 2
