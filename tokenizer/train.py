"""Train a HF ``tokenizers`` tokenizer on a deterministic sample of the kept documents, or load a given one.

The sample: documents ordered by a seeded stable hash of their id, taken in that order until ``sample_bytes`` of
UTF-8 text; validation documents are left out, so the held-out split is unseen by the tokenizer too. The same
docs and config always give the same sample, whatever the file layout.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow.compute as pc
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from runio.files import atomic_path, sha256_file
from runio.layout import RunPaths
from tokenizer.config import PackingConfig, TokenizerConfig
from tokenizer.docs import in_val_split, iter_doc_batches, list_doc_files, stable_hash

# CJK ideographs (unified, extension A, compatibility): isolated one per piece for WordPiece, whose words must be
# bounded (a line of Chinese has no spaces and would otherwise become one over-long, unknown "word").
_CJK = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"


@dataclass(frozen=True)
class SpecialIds:
    pad_id: int
    bos_id: int | None
    eos_id: int | None


def _normalizer(kind: str):
    return {
        "none": None,
        "nfc": normalizers.NFC(),
        "nfkc": normalizers.NFKC(),
        "nfkc_lowercase": normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]),
    }[kind]


def new_tokenizer(cfg: TokenizerConfig) -> tuple[Tokenizer, trainers.Trainer]:
    """An untrained tokenizer and its trainer, as configured."""
    specials = cfg.special_tokens()
    if cfg.model == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency, special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
        )
    elif cfg.model == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token=cfg.unk_token))
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(_CJK), behavior="isolated"), pre_tokenizers.BertPreTokenizer()]
        )
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency, special_tokens=specials,
            show_progress=False,
        )
    else:
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(
            vocab_size=cfg.vocab_size, special_tokens=specials, unk_token=cfg.unk_token, show_progress=False,
        )
    normalizer = _normalizer(cfg.normalization)
    if normalizer is not None:
        tok.normalizer = normalizer
    return tok, trainer


def sample_texts(
    files: Sequence[str], cfg: TokenizerConfig, exclude: Callable[[np.ndarray], np.ndarray] | None = None
) -> list[str]:
    """The training sample: documents in seeded stable-hash order of id until ``cfg.sample_bytes``."""
    ids_parts, sizes_parts = [], []
    for batch in iter_doc_batches(files, columns=("id", "text")):
        ids_parts.append(batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64))
        sizes_parts.append(pc.binary_length(pc.cast(batch.column(1), "binary")).to_numpy(zero_copy_only=False))
    if not ids_parts:
        return []
    ids = np.concatenate(ids_parts)
    sizes = np.concatenate(sizes_parts).astype(np.int64)
    keep = np.ones(len(ids), dtype=bool) if exclude is None else ~exclude(ids)
    ids, sizes = ids[keep], sizes[keep]
    order = np.lexsort((ids, stable_hash(ids, cfg.sample_seed)))
    within_budget = np.cumsum(sizes[order]) <= cfg.sample_bytes
    within_budget[0] = True  # at least one document, however long
    chosen = set(ids[order][within_budget].tolist())
    texts = []
    for batch in iter_doc_batches(files, columns=("id", "text")):
        for doc_id, text in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            if doc_id in chosen and text:
                texts.append(text)
    return texts


def canonical_vocabulary(tok: Tokenizer, cfg: TokenizerConfig) -> Tokenizer:
    """Make a trained WordPiece tokenizer a function of its content, not of the trainer's thread timing.

    The WordPiece trainer yields the same tokens run after run, but numbers tokens of equal rank in hash order.
    Special tokens keep ids 0..k-1; the others are numbered in code point order (WordPiece matching never looks at
    ids). BPE needs nothing: its merges and ids are already reproducible. Unigram is not made reproducible here:
    HF tokenizers gives the rare characters it adds at the end scores that depend on hash order (they change
    segmentation, not just ids) — train it once and pin it with ``tokenizer.path``.
    """
    if cfg.model != "wordpiece":
        return tok
    data = json.loads(tok.to_str())
    ranked = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    n_special = len(cfg.special_tokens())
    specials = [t for t, _ in ranked[:n_special]]
    rest = sorted(t for t, _ in ranked[n_special:])
    data["model"]["vocab"] = {t: i for i, t in enumerate(specials + rest)}
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))


# The longest run without whitespace the trainer sees as one piece. Training time grows with the square of a word's
# length (tokenizers' BPE trainer re-merges the whole word at each merge: 50 KB took 0.8 s, 5 MB would take hours),
# and a kept document may be one long run (a base64 blob, a DNA sequence, text with its spaces lost). No natural word
# comes near this length; encoding is unaffected (linear in length), only what the trainer counts.
MAX_TRAINING_RUN = 1000
_LONG_RUN = re.compile(r"(\S{%d})" % MAX_TRAINING_RUN)


def bounded_runs(text: str) -> list[str]:
    """``text`` itself, or, where it holds a run of more than ``MAX_TRAINING_RUN`` non-space characters, the text
    cut into pieces at every ``MAX_TRAINING_RUN`` characters of such a run (each piece is pre-tokenized on its own,
    so no training word is longer)."""
    if _LONG_RUN.search(text) is None:
        return [text]
    return [piece for piece in _LONG_RUN.split(text) if piece]


def train_tokenizer(texts: Sequence[str], cfg: TokenizerConfig, out_path: str) -> Tokenizer:
    if not texts:
        raise ValueError("cannot train a tokenizer on zero documents")
    tok, trainer = new_tokenizer(cfg)

    def chunks() -> Iterator[list[str]]:
        for i in range(0, len(texts), 1000):
            yield [piece for text in texts[i : i + 1000] for piece in bounded_runs(text)]

    tok.train_from_iterator(chunks(), trainer=trainer, length=len(texts))
    tok = canonical_vocabulary(tok, cfg)
    with atomic_path(os.path.abspath(out_path)) as tmp:
        tok.save(tmp)
    return tok


def special_ids(tok: Tokenizer, cfg: TokenizerConfig, packing: PackingConfig) -> SpecialIds:
    """Look up pad/bos/eos; a loaded tokenizer lacking one that the packing needs is a clear config error."""

    def lookup(field: str, needed: bool) -> int | None:
        token = getattr(cfg, field)
        tid = tok.token_to_id(token)
        if tid is None and needed:
            raise ValueError(
                f"tokenizer.{field}={token!r} is not in the tokenizer's vocabulary; set tokenizer.{field} to one of "
                f"its special tokens {sorted(t.content for t in tok.get_added_tokens_decoder().values())}"
            )
        return tid

    pad = lookup("pad_token", True)
    return SpecialIds(pad_id=pad, bos_id=lookup("bos_token", packing.add_bos), eos_id=lookup("eos_token", packing.add_eos))


def check_tokenizer(cfg: TokenizerConfig, packing: PackingConfig) -> None:
    """What must hold before any stage starts when ``tokenizer.path`` is set: the file exists, is a
    tokenizer.json, and has the special tokens the packing needs. Raises FileNotFoundError (missing) or
    ValueError, naming the field."""
    if not cfg.path:
        return
    if not os.path.exists(cfg.path):
        raise FileNotFoundError(f"tokenizer.path: {cfg.path} does not exist")
    if not os.path.isfile(cfg.path):
        raise ValueError(f"tokenizer.path: {cfg.path} is not a file (a tokenizer.json is expected)")
    try:
        tok = Tokenizer.from_file(cfg.path)
    except Exception as e:  # tokenizers raises a bare Exception on malformed JSON
        raise ValueError(f"tokenizer.path: {cfg.path} is not a valid tokenizer.json ({str(e).splitlines()[0][:200]})"
                         ) from None
    special_ids(tok, cfg, packing)


def train_or_load(run: RunPaths | str | os.PathLike, cfg: TokenizerConfig,
                  packing: PackingConfig) -> tuple[Tokenizer, str, str]:
    """Make the run's ``tokenizer/tokenizer.json``; returns (tokenizer, its path, its sha256).

    Trained on the run's ``docs/`` (validation documents excluded) unless ``cfg.path`` names one to load.
    ``run`` is the run directory's layout (a plain path is taken as the run directory).
    """
    paths = run if isinstance(run, RunPaths) else RunPaths(run)
    out_path = str(paths.tokenizer_json)
    if cfg.path:
        check_tokenizer(cfg, packing)
        tok = Tokenizer.from_file(cfg.path)
        if os.path.abspath(cfg.path) != os.path.abspath(out_path):
            with atomic_path(out_path) as tmp:
                shutil.copyfile(cfg.path, tmp)
    else:
        files = list_doc_files(str(paths.docs))
        texts = sample_texts(
            files, cfg, exclude=lambda ids: in_val_split(ids, packing.val_fraction, packing.split_seed)
        )
        tok = train_tokenizer(texts, cfg, out_path)
    special_ids(tok, cfg, packing)  # fail now, not after encoding, when a needed special token is missing
    return tok, out_path, sha256_file(out_path)
