"""The ``extract`` section of the run config: which main-text extractor runs on HTML records, and how."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

EXTRACTORS = ("corpusmill", "resiliparse", "trafilatura")


class ExtractConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(True, description="run the extract step on HTML records (records whose "
                                            "meta.content_type is text/html, or that carry html_field); other "
                                            "records pass untouched, so text and JSONL runs are unchanged")
    extractor: Literal["corpusmill", "resiliparse", "trafilatura"] = Field(
        "corpusmill", description="main-text extractor: corpusmill (Resiliparse's DOM with corpusmill's "
                                  "boilerplate and main-content rules; trafilatura's quality at ten times its "
                                  "speed), resiliparse (extract_plain_text with main_content) or trafilatura "
                                  "(trafilatura.extract, about 15x slower)")
    html_field: str | None = Field(None, description="a JSONL/Parquet record field holding the page's HTML: its "
                                                     "main text becomes the record's text (the field itself is "
                                                     "dropped from meta). null: only records the readers mark "
                                                     "text/html are extracted")
    min_text_chars: int = Field(50, ge=0, description="an extracted text shorter than this (characters, after "
                                                      "whitespace is collapsed) removes the record with reason "
                                                      "too_short_after_extraction; an empty one is no_main_text")
    max_html_chars: int = Field(100_000_000, gt=0, description="HTML longer than this is not parsed: the record is "
                                                               "removed with reason html_too_large")
    keep_tables: bool = Field(True, description="keep table cells as text (one row a line, cells separated by "
                                                "tabs)")
    keep_lists: bool = Field(True, description="keep list items (one a line, indented by nesting)")
    keep_code: bool = Field(True, description="keep code blocks (<pre>) with their line breaks")
    boilerplate_link_density: float = Field(
        0.6, gt=0, le=1, description="corpusmill extractor: inside the main content, a list, table or block of "
                                     "three links or more whose text is at least this share link text is "
                                     "dropped as navigation (related links, tag lists, pagers)")

    @model_validator(mode="after")
    def _trafilatura_keeps_lists_and_code(self) -> "ExtractConfig":
        # trafilatura.extract has a switch for tables only: its text always holds lists and code blocks
        if self.extractor == "trafilatura":
            for name in ("keep_lists", "keep_code"):
                if not getattr(self, name):
                    raise ValueError(f"extract.{name}: false is not possible with extract.extractor trafilatura "
                                     f"(its text always keeps lists and code); use corpusmill or resiliparse")
        return self
