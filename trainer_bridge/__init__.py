"""The built-in trainer: shard dataset, model, parallelism, precision, checkpoints, metrics, launcher."""
