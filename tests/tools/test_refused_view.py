"""A sandbox whose uid's view cannot be bound (the kernel refuses a bind of what the uid
cannot reach by path) fails its start and leaves no claim behind.

The trial command as the new uid is staged before the sandbox holds the claim; its refusal
is the start's error, not the host's setting (no `root_outside` fallback). It used to be
raised past the one place that gave the claim back, so the claim file stayed locked, its
fd open and its view's folder made, until mlra exited, with the workspace the uid's: a
later sandbox given that uid could read and change it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlra.tools.fetch import box as fetch_box
from mlra.tools.sandbox import run_uid
from mlra.tools.sandbox.base import SandboxError
from tests.tools.test_cancelled_start import PROBLEM, _box, _claims, _left_of
from tests.tools.test_cancelled_start import workspace as workspace  # the fixture

pytestmark = pytest.mark.skipif(
    PROBLEM is not None or not run_uid.wanted(), reason=PROBLEM or "a uid is claimed as root"
)


@pytest.fixture
def refused_binds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every bind of a view refused, as a kernel that forbids it would."""

    def refused(source: str, target: str, flags: int) -> None:
        raise OSError(errno.EPERM, f"could not bind {source} for the sandbox: refused")

    monkeypatch.setattr(run_uid, "_mount", refused)
    yield


async def test_a_start_whose_view_is_refused_fails_and_gives_its_uid_back(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, refused_binds: None
) -> None:
    claims = _claims(monkeypatch)
    box = _box(workspace)
    with pytest.raises(SandboxError, match="could not bind"):
        await box.start()
    assert box.root_outside is None  # the start failed: not run as root outside
    assert claims and _left_of(claims) == []
    assert os.stat(workspace).st_uid == 0  # root's again, for no later uid to be handed
    await box.close()


async def test_a_fetch_step_whose_view_is_refused_fails_and_gives_its_uid_back(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, refused_binds: None
) -> None:
    monkeypatch.setattr(fetch_box, "_ROOT_OUTSIDE", {})  # the trial command is run once
    claims = _claims(monkeypatch)
    staging = workspace.parent / ".fetch-x"
    staging.mkdir(mode=0o700)
    step = fetch_box.FetchBox(staging, bwrap=fetch_box.confinement(allow_unconfined=False))
    with pytest.raises(SandboxError, match="could not bind"):
        await step.run(["true"], timeout_s=60)
    assert claims and _left_of(claims) == []
    assert os.stat(staging).st_uid == os.geteuid()
