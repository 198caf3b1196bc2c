"""Other benchmarks' task folders run as they are: MLAgentBench (`benchmarks/<task>/`)
and MLRC-Bench (`benchmarks_base/<task>/`), each read into the same `TaskSpec` an
mlra `task.toml` gives (tasks/foreign/loader.py), so runs, batches, resume and
grading need nothing of their own."""
