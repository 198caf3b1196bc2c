"""Write tests/unit_seconds.json from a JUnit XML of a full run: each xdist unit's seconds.

The scheduler in conftest.py hands out the longest units first; the figures only order
the work, so they need refreshing only when a file's cost changes a lot.

    pytest --junitxml /tmp/junit.xml && python tests/unit_seconds.py /tmp/junit.xml
    pytest -m slow --junitxml /tmp/slow.xml && python tests/unit_seconds.py --slow /tmp/slow.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.xdist_units import SLOW_UNIT_SECONDS, UNIT_SECONDS, xdist_unit


def main(junit: str, *, slow: bool = False) -> None:
    seconds: defaultdict[str, float] = defaultdict(float)
    for case in ET.parse(junit).iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        nodeid = f"{path}::{case.get('name', '')}"
        seconds[xdist_unit(nodeid)] += float(case.get("time", "0"))
    (SLOW_UNIT_SECONDS if slow else UNIT_SECONDS).write_text(
        json.dumps({unit: round(s, 1) for unit, s in sorted(seconds.items())}, indent=1) + "\n"
    )


if __name__ == "__main__":
    slow = "--slow" in sys.argv[1:]
    (junit,) = [a for a in sys.argv[1:] if a != "--slow"]
    main(junit, slow=slow)
