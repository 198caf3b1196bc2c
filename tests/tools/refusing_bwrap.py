"""A bubblewrap that refuses every uid but root's, as one under Ubuntu 24.04's AppArmor
refuses unprivileged user namespaces: for the tests of what falls back to root outside."""

from __future__ import annotations

from pathlib import Path

from mlra.tools.sandbox import bwrap as bw


def refusing_bwrap(folder: Path) -> Path:
    """`folder/bwrap`: the real bubblewrap for root, bubblewrap's own refusal otherwise."""
    real = bw.find_bwrap()
    assert real is not None
    refusing = folder / "bwrap"
    refusing.write_text(
        "#!/bin/sh\n"
        '[ "$(id -u)" = 0 ] || { echo "bwrap: No permissions to create new namespace, '
        'likely because the kernel does not allow non-privileged user namespaces" >&2; '
        "exit 1; }\n"
        f'exec {real} "$@"\n'
    )
    refusing.chmod(0o755)
    return refusing
