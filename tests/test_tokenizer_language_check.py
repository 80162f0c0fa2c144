"""The tokenizer check (issue 15, item 6): bytes per token per language on the run's own documents, a warning
for a language the tokenizer covers poorly, in the shard manifest, `corpusmill inspect` and the report."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from beamio.write import DOCS_SCHEMA, doc_row, parquet_bytes
from tokenizer.language_check import format_check, language_of, poorly_served, tokenizer_check

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo" / "corpus.jsonl.gz"


def _demo_texts() -> dict[str, list[str]]:
    texts: dict[str, list[str]] = {"en": [], "zh": []}
    with gzip.open(DEMO, "rt", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            text = record["text"]
            han = sum("\u4e00" <= c <= "\u9fff" for c in text)
            lang = "zh" if han > 0.3 * len(text) else "en" if han == 0 else None
            if lang and len(texts[lang]) < 40:
                texts[lang].append(text[:2000])
    assert len(texts["en"]) >= 20 and len(texts["zh"]) >= 10, {k: len(v) for k, v in texts.items()}
    return texts


def _bpe(texts: list[str], vocab: int = 2000) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    return tok


def _docs_dir(tmp_path: Path, texts: dict[str, list[str]], annotate: bool = True) -> list[str]:
    rows, i = [], 0
    for lang, items in texts.items():
        for text in items:
            annotations = {"langid": {"lang": lang, "score": 0.99}} if annotate else \
                {"normalize": {"script": "Hani" if lang == "zh" else "Latn"}}
            rows.append(doc_row({"id": i, "text": text, "source": "s", "meta": {}, "annotations": annotations}))
            i += 1
    path = tmp_path / "docs-00000-of-00001.parquet"
    path.write_bytes(parquet_bytes(rows, DOCS_SCHEMA))
    return [str(path)]


def test_an_english_only_tokenizer_is_called_out_on_chinese_text(tmp_path):
    texts = _demo_texts()
    files = _docs_dir(tmp_path, texts)
    english_only = tokenizer_check(_bpe(texts["en"]), files)
    rows = english_only["by_language"]
    assert set(rows) == {"en", "zh"} and rows["zh"]["docs"] == len(texts["zh"])
    assert rows["zh"]["bytes_per_token"] < 0.5 * rows["en"]["bytes_per_token"], rows
    assert len(english_only["warnings"]) == 1 and english_only["warnings"][0].startswith("tokenizer: zh text")
    both = tokenizer_check(_bpe(texts["en"] + texts["zh"]), files)
    assert both["by_language"]["zh"]["bytes_per_token"] > rows["zh"]["bytes_per_token"]
    assert both["warnings"] == [], both
    lines = format_check(english_only)
    assert any(line.strip().startswith("zh") for line in lines) and lines[-1].startswith("  warning: tokenizer: zh")


def test_without_langid_the_script_stands_in_and_odd_inputs_are_safe(tmp_path):
    texts = _demo_texts()
    check = tokenizer_check(_bpe(texts["en"]), _docs_dir(tmp_path, texts, annotate=False))
    assert set(check["by_language"]) == {"script:Latn", "script:Hani"}
    assert language_of(None) == "unknown" and language_of("not json") == "unknown"
    # too few documents, or a single language, say nothing
    assert poorly_served({"en": {"docs": 50, "bytes_per_token": 4.0}, "zh": {"docs": 2, "bytes_per_token": 1.0}}) == []
    assert poorly_served({"en": {"docs": 50, "bytes_per_token": 4.0}}) == []
    assert format_check(None)[0].startswith("tokenizer check: not recorded")
