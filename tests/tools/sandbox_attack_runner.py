"""One command in a LocalSandbox, its result printed as JSON on stdout.

tests/test_sandbox_attacks.py starts this under `setpriv` as an unprivileged
user, because a sandbox built by a non-root mlra takes different paths in
bubblewrap (no setuid, a user namespace it must ask for) than one built as root,
and both must hold. The request comes as JSON on stdin:

    {"workspace": ..., "hide_paths": [...], "bwrap_search_path": ..., "script": ...,
     "timeout": ..., "memory_mb": ... (optional), "disk_mb": ... (optional),
     "network": ... (optional: a task with the network on)}

The answer carries the limits in force (`limits`), as `run_started` would record them.

`@MLRA_PID@` in the script becomes this process's pid: the mlra process the
attack tries to see or signal.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from mlra.tools.sandbox.base import SandboxSpec
from mlra.tools.sandbox.local import LocalSandbox


async def run(request: dict[str, Any]) -> dict[str, Any]:
    spec = SandboxSpec(
        network=bool(request.get("network", False)),
        hide_paths=[Path(p) for p in request["hide_paths"]],
        memory_mb=request.get("memory_mb"),
        disk_mb=request.get("disk_mb"),
    )
    sandbox = LocalSandbox(
        Path(request["workspace"]),
        spec,
        isolation_mode="bwrap",
        bwrap_search_path=request["bwrap_search_path"],
    )
    await sandbox.start()
    try:
        script = request["script"].replace("@MLRA_PID@", str(os.getpid()))
        result = await sandbox.exec(["sh", "-c", script], timeout=float(request["timeout"]))
    finally:
        await sandbox.close()
    return {
        "exit_code": result.exit_code,
        "output": result.output,
        "isolation": sandbox.isolation,
        "workdir": sandbox.workdir,
        "limits": sandbox.limits.model_dump(mode="json"),
        "network_via": sandbox.network_via,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.loads(sys.stdin.read())))))
