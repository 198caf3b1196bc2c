"""Scores answer.txt against the hidden expected answer (`hidden/expected.txt`), or,
given a file of answers as a fourth argument (the validation split), the fraction of
its lines the answer matches."""

import json
import sys
from pathlib import Path

artifact, task_root, out = (Path(a) for a in sys.argv[1:4])
expected_file = sys.argv[4] if len(sys.argv) > 4 else "hidden/expected.txt"
expected = (task_root / expected_file).read_text().split()
given = artifact.read_text().strip() if artifact.is_file() else ""
score = sum(given == e for e in expected) / len(expected)
out.write_text(json.dumps({"score": score, "metrics": {"answered": float(bool(given))}}))
