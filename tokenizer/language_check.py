"""Bytes per token, per language, of the run's own documents: the tokenizer check.

A tokenizer trained on a mostly-English sample encodes Chinese (or any under-represented script) at one or two
bytes per token — nearly byte-level — and nothing fails: the model just sees a fraction of the text per row. This
check measures each language's UTF-8 bytes per token on a bounded sample of the kept documents, so the shard
manifest, ``corpusmill inspect`` and the report show it, and the shard stage warns when a language is encoded far
worse than the best-served one.

The language is the langid step's (``annotations.langid.lang``); without it, the normalize step's script
(``annotations.normalize.script``, e.g. ``Hani``/``Latn``) stands in, labelled ``script:<name>``.
"""
from __future__ import annotations

import json
from typing import Iterable, Sequence

from tokenizer.docs import open_parquet
from transforms.base import step_annotations

SAMPLE_DOCS_PER_LANGUAGE = 300
SAMPLE_DOCS_TOTAL = 20_000
# A language encoded at under this fraction of the best-served language's bytes per token is called out (with
# at least MIN_DOCS documents: one odd document says nothing).
WARN_FRACTION = 0.5
MIN_DOCS = 5


def language_of(annotations_json: str | None) -> str:
    try:
        annotations = json.loads(annotations_json) if annotations_json else {}
    except ValueError:
        annotations = {}
    lang = step_annotations(annotations, "langid").get("lang")
    if isinstance(lang, str) and lang:
        return lang
    script = step_annotations(annotations, "normalize").get("script")
    return f"script:{script}" if isinstance(script, str) and script else "unknown"


def sample_by_language(doc_files: Sequence[str], per_language: int = SAMPLE_DOCS_PER_LANGUAGE,
                       total: int = SAMPLE_DOCS_TOTAL) -> dict[str, list[str]]:
    """Up to ``per_language`` texts of each language, reading at most ``total`` documents in file order."""
    samples: dict[str, list[str]] = {}
    seen = 0
    for path in doc_files:
        for batch in open_parquet(path).iter_batches(batch_size=1024, columns=["text", "annotations"]):
            for text, annotations in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                seen += 1
                bucket = samples.setdefault(language_of(annotations), [])
                if len(bucket) < per_language and text:
                    bucket.append(text)
                if seen >= total:
                    return samples
    return samples


def bytes_per_token(tokenizer, samples: dict[str, list[str]]) -> dict[str, dict]:
    """Per language: documents sampled, their UTF-8 bytes, their tokens (no special tokens) and bytes/token."""
    out: dict[str, dict] = {}
    for lang in sorted(samples):
        texts = samples[lang]
        if not texts:
            continue
        tokens = sum(len(e.ids) for e in tokenizer.encode_batch_fast(texts, add_special_tokens=False))
        n_bytes = sum(len(t.encode("utf-8")) for t in texts)
        out[lang] = {"docs": len(texts), "bytes": n_bytes, "tokens": tokens,
                     "bytes_per_token": round(n_bytes / tokens, 3) if tokens else None}
    return out


def poorly_served(by_language: dict[str, dict]) -> list[str]:
    """One line per language encoded at under ``WARN_FRACTION`` of the best-served language's bytes/token."""
    rated = {lang: row["bytes_per_token"] for lang, row in by_language.items()
             if row.get("bytes_per_token") and row["docs"] >= MIN_DOCS}
    if len(rated) < 2:
        return []
    best_lang = max(rated, key=rated.get)
    best = rated[best_lang]
    return [f"tokenizer: {lang} text averages {value:.2f} bytes per token ({best_lang}: {best:.2f}): the tokenizer "
            f"covers {lang} poorly (trained on a sample with little {lang}? see tokenizer.sample_bytes and tokenizer.vocab_size)"
            for lang, value in sorted(rated.items()) if value < WARN_FRACTION * best]


def tokenizer_check(tokenizer, doc_files: Iterable[str]) -> dict:
    """The shard manifest's ``tokenizer_check`` entry: bytes per token per language, and the warnings."""
    by_language = bytes_per_token(tokenizer, sample_by_language(list(doc_files)))
    return {"by_language": by_language, "sample_docs_per_language": SAMPLE_DOCS_PER_LANGUAGE,
            "warnings": poorly_served(by_language)}


def format_check(check: dict | None) -> list[str]:
    """Lines for ``corpusmill inspect``."""
    if not check or not check.get("by_language"):
        return ["tokenizer check: not recorded (shards written before it existed, or no document)"]
    lines = [f"bytes per token by language (a sample of up to {check.get('sample_docs_per_language')} documents "
             f"each):"]
    for lang, row in check["by_language"].items():
        lines.append(f"  {lang:<12} {row['bytes_per_token'] if row['bytes_per_token'] is not None else '-':>7}  "
                     f"({row['docs']} docs, {row['bytes']} bytes, {row['tokens']} tokens)")
    lines += [f"  warning: {w}" for w in check.get("warnings", [])]
    return lines
