"""Training metrics read from what runs in the sandbox, recorded as `metrics` events:
lines of job and command output (log_lines.py), `metrics.jsonl` files (jsonl.py) and
TensorBoard event files (tensorboard.py), read confined (files.py) and batched and
thinned into the log (recorder.py)."""
