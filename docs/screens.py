"""Regenerate the documentation's screenshots from the console's snapshot tests.

    python docs/screens.py              # redraw the snapshots, then copy them into docs/images/
    python docs/screens.py --copy-only  # only copy the snapshots as they are

The pictures are the snapshot tests' own SVGs, byte for byte (tests/console/docs_screens.py
says which test draws which picture; tests/test_docs.py fails when a copy drifts), so a
change to the console shows in its docs the moment its snapshots are updated.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.console.docs_screens import IMAGES, SCREENS, snapshot_of  # noqa: E402


def redraw() -> int:
    """The named snapshot tests with `--snapshot-update`, in one process: only their own
    snapshots are rewritten (node ids given, so syrupy removes no other test's file)."""
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "--snapshot-update"]
    return subprocess.call([*command, *SCREENS.values()], cwd=ROOT)


def copy() -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    for image, nodeid in SCREENS.items():
        source = snapshot_of(nodeid)
        shutil.copyfile(source, IMAGES / image)
        print(f"docs/images/{image} <- {source.relative_to(ROOT)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--copy-only", action="store_true", help="copy the snapshots without redrawing them"
    )
    args = parser.parse_args()
    if not args.copy_only and (status := redraw()) != 0:
        print(f"docs/screens.py: the snapshot tests failed (exit {status}); nothing copied")
        return status
    copy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
