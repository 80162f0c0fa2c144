"""Experiments on top of the pipeline and the trainer: hyper-parameter sweeps (Optuna) and cleaning ablations."""
