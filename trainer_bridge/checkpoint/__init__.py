"""trainer_bridge.checkpoint: checkpoints: the store (layout, soundness, DCP saving and loading), the loop's
manager, the start plan (fresh, resume, init), durable tiers, recovery, and loading a run's trained model."""
