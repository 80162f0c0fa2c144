"""The ``report`` section of the run config (composed by ``pipelines/config.py``, read by ``report``)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ReportConfig(BaseModel):
    """The ``report`` section of the run config."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="write report.html at the end of `corpusmill run`")
    max_docs_scanned: int = Field(200_000, ge=1, description="documents read from docs/ and from removed/ for "
                                                             "the distributions (a deterministic prefix by file)")
    histogram_bins: int = Field(40, ge=2, le=500, description="bins of each distribution histogram")
