"""trainer_bridge.checkpoint: checkpoints: saving and loading, durable tiers, recovery."""
