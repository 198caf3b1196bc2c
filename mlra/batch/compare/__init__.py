"""Runs compared side by side (`mlra compare`, the batch report's comparison section):
the runs read from their logs (runs.py), a matrix with runs as columns (matrix.py), a
paired table of two groups over the same tasks (paired.py), their curves overlaid
(overlay.py) and the diffs of their settings and prompts (diffs.py).

Pure functions over recorded logs: the console draws them (console/cli/compare_cli.py,
console/screens/compare_screen.py) and the report writes them (batch/report.py).
"""
