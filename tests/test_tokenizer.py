"""Tokenizer config, training (bpe / wordpiece / unigram), deterministic sampling, loading, Chinese and mixed text."""
from __future__ import annotations

import gzip
import json
import os

import pytest
from pydantic import ValidationError
from tokenizers import Tokenizer

from tokenizer.config import PackingConfig, TokenizerConfig
from tokenizer.docs import in_val_split, stable_hash, write_docs_parquet
from runio.files import sha256_file
from tokenizer.train import MAX_TRAINING_RUN, bounded_runs, sample_texts, special_ids, train_or_load, train_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "data", "demo", "corpus.jsonl.gz")

ZH = "本节主要向您展示系统管理员经常遇到的通用操作的提示信息。"
MIXED = "运行 dpkg -L 包名 会给出软件包当中的文件列表；Reading the README.Debian file helps."


@pytest.fixture(scope="module")
def demo_texts() -> list[str]:
    with gzip.open(DEMO, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


@pytest.fixture(scope="module")
def mixed_sample(demo_texts) -> list[str]:
    """~600 KB of the demo: its Chinese documents and as much English, the way a mixed corpus looks."""
    zh = [t for t in demo_texts if sum("\u4e00" <= c <= "\u9fff" for c in t[:200]) > 20]
    en = [t for t in demo_texts if t not in zh]
    budget, sample = 600_000, []
    for a, b in zip(zh, en):
        sample += [a[:5000], b[:5000]]
        budget -= len(a[:5000].encode()) + len(b[:5000].encode())
        if budget < 0:
            break
    return sample


def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="model"):
        TokenizerConfig(model="sentencepiece")
    with pytest.raises(ValidationError, match="vocab_size"):
        TokenizerConfig(vocab_size=3)
    with pytest.raises(ValidationError, match="extra"):
        TokenizerConfig(vocab=100)
    with pytest.raises(ValidationError, match="distinct"):
        TokenizerConfig(bos_token="<|eos|>")
    with pytest.raises(ValidationError, match="val_fraction"):
        PackingConfig(val_fraction=1.5)
    assert TokenizerConfig(model="wordpiece").special_tokens()[:4] == ["<|pad|>", "<|bos|>", "<|eos|>", "<|unk|>"]


@pytest.mark.parametrize("model", ["bpe", "wordpiece", "unigram"])
def test_chinese_and_mixed_text_tokenize_sensibly(tmp_path, mixed_sample, model):
    cfg = TokenizerConfig(model=model, vocab_size=3000, min_frequency=2)
    # Unigram's seed-vocabulary search is the slow trainer: a quarter of the sample keeps the test short.
    sample = mixed_sample[: len(mixed_sample) // 4] if model == "unigram" else mixed_sample
    tok = train_tokenizer(sample, cfg, str(tmp_path / "tokenizer.json"))
    unk = tok.token_to_id(cfg.unk_token)
    for text in (ZH, MIXED):
        enc = tok.encode(text, add_special_tokens=False)
        assert unk is None or unk not in enc.ids, f"{model}: unknown tokens in {text!r}: {enc.tokens}"
        # Learned units, not raw bytes: a CJK character is 3 UTF-8 bytes, so byte fallback would cost ~3/char.
        assert len(enc.ids) <= 1.2 * len(text), (model, enc.tokens)
    zh_tokens = tok.encode(ZH, add_special_tokens=False).tokens
    if model == "bpe":
        assert tok.decode(tok.encode(MIXED, add_special_tokens=False).ids) == MIXED  # byte-level: lossless
        assert len(zh_tokens) < len(ZH), zh_tokens  # merges across Chinese characters were learned
    elif model == "wordpiece":
        assert all(len(t.removeprefix("##")) == 1 for t in zh_tokens if "\u4e00" <= t[-1] <= "\u9fff")
        assert tok.decode(tok.encode(ZH, add_special_tokens=False).ids).replace(" ", "") == ZH
    else:
        assert tok.decode(tok.encode(ZH, add_special_tokens=False).ids) == ZH


def test_specials_have_fixed_ids(tmp_path, mixed_sample):
    tok = train_tokenizer(mixed_sample[:50], TokenizerConfig(vocab_size=500), str(tmp_path / "t.json"))
    ids = special_ids(tok, TokenizerConfig(), PackingConfig(add_bos=True))
    assert (ids.pad_id, ids.bos_id, ids.eos_id) == (0, 1, 2)


def _docs(texts):
    return [{"id": 1000 + 7 * i, "text": t, "source": "demo"} for i, t in enumerate(texts)]


def test_sample_is_deterministic_whatever_the_file_layout(tmp_path, demo_texts):
    docs = _docs(demo_texts[:300])
    write_docs_parquet(str(tmp_path / "one" / "part-0.parquet"), docs)
    for k in range(3):
        write_docs_parquet(str(tmp_path / "three" / f"part-{k}.parquet"), docs[k::3])
    cfg = TokenizerConfig(sample_bytes=60_000, sample_seed=5)
    one = sample_texts([str(tmp_path / "one" / "part-0.parquet")], cfg)
    three = sample_texts(sorted(str(p) for p in (tmp_path / "three").iterdir()), cfg)
    assert sorted(one) == sorted(three)
    assert 0 < sum(len(t.encode()) for t in one) <= 60_000
    other_seed = sample_texts([str(tmp_path / "one" / "part-0.parquet")], cfg.model_copy(update={"sample_seed": 6}))
    assert sorted(other_seed) != sorted(one)


def test_val_split_is_a_stable_hash_of_the_id():
    ids = list(range(100_000))
    mask = in_val_split(ids, 0.05, seed=0)
    assert 0.045 < mask.mean() < 0.055
    assert (in_val_split(ids[::-1], 0.05, seed=0)[::-1] == mask).all()  # order independent
    assert (in_val_split(ids, 0.05, seed=1) != mask).any()
    assert stable_hash([0, 1, 2], 0).tolist() == stable_hash([0, 1, 2], 0).tolist()


def test_training_excludes_validation_documents_and_loading_copies(tmp_path, demo_texts):
    run = tmp_path / "run"
    docs = _docs(demo_texts[:200])
    write_docs_parquet(str(run / "docs" / "part-0.parquet"), docs)
    packing = PackingConfig(val_fraction=0.3)
    cfg = TokenizerConfig(vocab_size=800)
    val = in_val_split([d["id"] for d in docs], 0.3, 0)
    sample = sample_texts([str(run / "docs" / "part-0.parquet")], cfg,
                          exclude=lambda ids: in_val_split(ids, 0.3, 0))
    assert set(sample) == {d["text"] for d, v in zip(docs, val) if not v and d["text"]}
    _, path, sha = train_or_load(str(run), cfg, packing)
    assert path == str(run / "tokenizer" / "tokenizer.json") and sha == sha256_file(path)

    # Loading a given tokenizer.json copies it into the run, same bytes, same sha256.
    other = tmp_path / "other"
    tok, path2, sha2 = train_or_load(str(other), TokenizerConfig(path=path), packing)
    assert sha2 == sha and os.path.exists(other / "tokenizer" / "tokenizer.json")

    # A loaded tokenizer without the configured special tokens is a clear error naming the field.
    plain = Tokenizer.from_file(path)
    bare = tmp_path / "bare.json"
    plain.save(str(bare))
    with pytest.raises(ValueError, match=r"tokenizer.eos_token='</s>' is not in the tokenizer's vocabulary"):
        train_or_load(str(other), TokenizerConfig(path=str(bare), eos_token="</s>"), packing)
    with pytest.raises(FileNotFoundError, match="tokenizer.path"):
        train_or_load(str(other), TokenizerConfig(path=str(tmp_path / "nope.json")), packing)


@pytest.mark.parametrize("model", ["bpe", "wordpiece"])
def test_training_is_reproducible_to_the_byte(tmp_path, mixed_sample, model):
    cfg = TokenizerConfig(model=model, vocab_size=1500)
    for k in range(2):
        train_tokenizer(mixed_sample, cfg, str(tmp_path / f"{k}.json"))
    assert sha256_file(str(tmp_path / "0.json")) == sha256_file(str(tmp_path / "1.json"))


def test_the_trainer_sees_no_run_longer_than_the_bound_and_ordinary_text_as_it_is(tmp_path, mixed_sample):
    """A kept document may be one long run without whitespace (a base64 blob, a sequence, text whose spaces were
    lost); the BPE trainer's time grows with the square of a word's length, so such runs reach it in bounded pieces.
    Ordinary text is handed over unchanged, so tokenizers trained on it are the same as before."""
    assert all(bounded_runs(text) == [text] for text in mixed_sample)
    blob = "".join(chr(ord("a") + (i * 7919) % 26) for i in range(2 * MAX_TRAINING_RUN + 345))
    text = f"Attachment follows.\n{blob} end of message"
    pieces = bounded_runs(text)
    assert "".join(pieces) == text and len(pieces) == 4
    assert max(len(w) for piece in pieces for w in piece.split()) == MAX_TRAINING_RUN
    # a sample holding a 200 KB run trains (16 s before, in one trainer thread; a 5 MB run took hours) and the run
    # still encodes losslessly
    long_doc = "".join(chr(ord("a") + (i * 7919) % 26) for i in range(200_000))
    tok = train_tokenizer(mixed_sample[:40] + [long_doc], TokenizerConfig(model="bpe", vocab_size=2000),
                          str(tmp_path / "tokenizer.json"))
    assert tok.decode(tok.encode(long_doc[:5000], add_special_tokens=False).ids) == long_doc[:5000]
