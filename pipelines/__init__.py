"""Config, CLI, the Beam graphs, the run directory, stats and report."""
