"""Shared fixtures: offline Hugging Face settings, the test task, a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

# Nothing may reach the Hugging Face Hub: this machine has no network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TESTS = Path(__file__).resolve().parent
ANSWER_TASK = TESTS / "data" / "tasks" / "answer"
SECRET_ENV = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "MLRA_MODEL")


@pytest.fixture
def answer_task() -> Path:
    return ANSWER_TASK


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Mapping[str, str]:
    """The process environment without any model keys or defaults."""
    for name in SECRET_ENV:
        monkeypatch.delenv(name, raising=False)
    return os.environ


def mlra_cli(
    args: list[str], *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the real `mlra` command line in a child process."""
    base = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "mlra", *args],
        cwd=cwd,
        env=base,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
