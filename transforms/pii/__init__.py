"""PII detection and masking: ``recognizers`` (the structured recognizers and their validators) and ``step``
(the engine over Presidio, its config and the per-document step)."""
from transforms.pii.step import PiiConfig, PiiStep, engine_description

__all__ = ["PiiConfig", "PiiStep", "engine_description"]
