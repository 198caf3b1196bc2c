"""The checks of bench/gpu_check.py: their list and context (core), running each in a
process of its own (runner), the report (report), and the checks themselves by what
they touch: the machine (install, NVML and the Resources pane), the sandboxes (GPU
devices, attempts' shares), a task's environment, grading (lm-eval, `mlra run`) and
the benchmark's evaluators."""
