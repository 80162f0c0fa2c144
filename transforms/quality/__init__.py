"""Quality scoring and decisions: ``features`` (word-order and cohesion features), ``model`` (fastText plus the
order-aware second stage, training and evaluation), ``step`` (the config, the pure decisions and the Beam step)."""
from transforms.quality.step import QualityConfig, QualityFilter, ensure_default_model, ensure_models

__all__ = ["QualityConfig", "QualityFilter", "ensure_default_model", "ensure_models"]
