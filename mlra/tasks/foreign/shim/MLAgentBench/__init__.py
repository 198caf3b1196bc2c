"""A stand-in for the MLAgentBench package that MLRC-Bench's `main.py` imports, put in
the workspace by mlra: `utils.save_evals` records a phase's score without the LLM
summary the original asks a model for, and `constants` holds the published baselines."""
