"""The ``lineage:`` section of the run config: what the per-checkpoint data cards break tokens down by."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LineageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    card_fields: list[str] = Field(
        default_factory=list,
        description="input fields (kept in each document's meta, e.g. `source`, `licence`) the data card of every "
                    "checkpoint counts tokens and documents by, besides source file and language; "
                    "`train.eval.domain_key` is added when set. Changing it re-runs nothing: the cards are rewritten "
                    "by the next training, report or `corpusmill forget`")
