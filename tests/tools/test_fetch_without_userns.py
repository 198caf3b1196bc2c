"""A host where bubblewrap cannot start as an unprivileged uid (user namespaces off for
them: a kernel setting, or AppArmor's restriction on Ubuntu 24.04) still clones and reads
for the agent: the fetch step runs as root outside, confined by bubblewrap as before, as
the agent's own sandbox does there. Here a bubblewrap that refuses every uid but root's
stands for that host."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from mlra.tools.sandbox import bwrap as bw
from mlra.tools.sandbox import run_uid
from mlra.tools.sandbox.env import shown_interpreter
from tests.tools.refusing_bwrap import refusing_bwrap

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or bw.find_bwrap() is None or not run_uid.CLAIMS_DIRS,
    reason="needs root and bubblewrap (a uid of its own is claimed only as root)",
)


def test_a_fetch_step_runs_where_bubblewrap_refuses_unprivileged_uids() -> None:
    from mlra.tools.fetch.box import FetchBox

    root = Path(tempfile.mkdtemp(prefix="mlra-no-userns-", dir="/var/tmp"))
    try:
        refusing = refusing_bwrap(root)
        told: list[str] = []
        for n in (1, 2):  # the second learns it from the first, without a trial
            staging = root / f".fetch-{n}"
            staging.mkdir(mode=0o700)
            box = FetchBox(staging, bwrap=str(refusing), on_root_outside=told.append)
            script = "from pathlib import Path; Path('/workspace/got').write_text('cloned')"
            result = asyncio.run(box.run([shown_interpreter(), "-I", "-c", script], timeout_s=60))
            assert result.exit_code == 0, result.stderr
            assert (staging / "got").read_text() == "cloned"
            assert (staging / "got").stat().st_uid == 0  # mlra's, to hand to the workspace
        # Each step tells why it ran as root outside (the run says it once of all of them:
        # tests/tasks/test_grader_sandbox.py).
        assert len(told) == 2 and all("No permissions to create new namespace" in t for t in told)
    finally:
        shutil.rmtree(root, ignore_errors=True)
