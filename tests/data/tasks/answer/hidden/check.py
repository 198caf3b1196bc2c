"""Scores answer.txt against the hidden expected answer."""

import json
import sys
from pathlib import Path

artifact, task_root, out = (Path(a) for a in sys.argv[1:4])
expected = (task_root / "hidden" / "expected.txt").read_text().strip()
given = artifact.read_text().strip() if artifact.is_file() else ""
score = 1.0 if given == expected else 0.0
out.write_text(json.dumps({"score": score, "metrics": {"answered": float(bool(given))}}))
