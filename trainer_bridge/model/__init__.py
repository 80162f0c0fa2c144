"""trainer_bridge.model: the model: the transformer, its Mixture of Experts, generation."""
