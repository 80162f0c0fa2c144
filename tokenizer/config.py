"""Config sections ``tokenizer`` and ``packing`` of the run config (composed by ``pipelines/config.py``)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TokenizerConfig(BaseModel):
    """Train a tokenizer on a deterministic sample of the cleaned documents, or load a given ``tokenizer.json``.

    Either way the result is saved as ``runs/<name>/tokenizer/tokenizer.json``; its sha256 identifies it in the
    shard manifest.
    """

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        default=None, description="Load this tokenizer.json instead of training one (the model fields are ignored)."
    )
    model: Literal["bpe", "wordpiece", "unigram"] = Field(
        default="bpe", description="bpe = byte-level BPE (no unknown tokens); wordpiece; unigram (SentencePiece-style)."
    )
    vocab_size: int = Field(default=32000, ge=64, le=1 << 22, description="Vocabulary size including special tokens; "
                                                                          "<= 65536 gives uint16 shards.")
    min_frequency: int = Field(default=2, ge=1, description="bpe/wordpiece: minimum pair/word frequency to merge.")
    normalization: Literal["none", "nfc", "nfkc", "nfkc_lowercase"] = Field(
        default="nfc", description="Unicode normalization applied before pre-tokenization."
    )
    pad_token: str = Field("<|pad|>", description="Padding token (id 0).")
    bos_token: str = Field("<|bos|>", description="Beginning-of-document token (id 1).")
    eos_token: str = Field("<|eos|>", description="End-of-document token (id 2).")
    unk_token: str = Field(default="<|unk|>", description="Used by wordpiece/unigram; byte-level BPE never needs it.")
    extra_special_tokens: list[str] = Field(default_factory=list, description="More special tokens, with ids after "
                                                                              "pad/bos/eos (/unk).")
    sample_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1024, description="Train on at most this many UTF-8 bytes of documents."
    )
    sample_seed: int = Field(default=0, description="Seed of the stable hash order that picks the sample.")

    @model_validator(mode="after")
    def _distinct_special_tokens(self) -> "TokenizerConfig":
        names = self.special_tokens()
        if len(set(names)) != len(names):
            raise ValueError(f"special tokens must be distinct, got {names}")
        if any(not t for t in names):
            raise ValueError("special tokens must be non-empty strings")
        return self

    def special_tokens(self) -> list[str]:
        """In id order: pad=0, bos=1, eos=2, unk=3 (when the model needs it), then the extras."""
        tokens = [self.pad_token, self.bos_token, self.eos_token]
        if self.model != "bpe":
            tokens.append(self.unk_token)
        return tokens + list(self.extra_special_tokens)


class PackingConfig(BaseModel):
    """How encoded documents become fixed-length rows and shards (Contract 3)."""

    model_config = ConfigDict(extra="forbid")

    seq_len: int = Field(default=2048, ge=8, le=1 << 20, description="Tokens per row.")
    window: int = Field(
        default=4096, ge=1, description="Documents (in id order) packed together by best-fit-decreasing."
    )
    max_open_rows: int = Field(
        default=512, ge=0, description="Partly filled rows carried from one window to the next for later documents."
    )
    add_bos: bool = Field(default=False, description="Prefix every document with the tokenizer's bos token.")
    add_eos: bool = Field(default=True, description="End every document with the tokenizer's eos token.")
    rows_per_shard: int = Field(default=8192, ge=1, description="Rows per .arrow file (32 MiB at seq_len 2048, "
                                                                "uint16).")
    val_fraction: float = Field(
        default=0.01, ge=0.0, lt=1.0,
        description="Share of documents held out as split 'val' (chosen by a stable hash of the id; never trained on).",
    )
    split_seed: int = Field(default=0, description="Seed of the stable hash that assigns documents to train/val.")
    encode_batch_docs: int = Field(
        default=4096, ge=1, description="Most documents per Beam element (one encode_batch call): Beam cost is per element."
    )
    encode_batch_bytes: int = Field(
        default=4 << 20, ge=1024, description="Most UTF-8 text bytes per Beam element (whichever limit comes first)."
    )
