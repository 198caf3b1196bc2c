"""Batches of runs: tasks x models x seeds, their state, executors and reports."""
