"""Best-fit-decreasing packing: every token placed exactly once, cut only when longer than seq_len, deterministic."""
from __future__ import annotations

import numpy as np
import pytest

from tokenizer.pack import BestFitPacker, chunk_concatenated, make_plan, pack_documents


def lengths(n: int, seed: int = 0) -> list[int]:
    """A heavy-tailed mix like real corpora: many short documents, some longer than seq_len."""
    rng = np.random.default_rng(seed)
    return [int(x) + 1 for x in rng.lognormal(mean=5.0, sigma=1.4, size=n)]


def check_rows(rows, docs, seq_len):
    placed: dict[int, list[tuple[int, int]]] = {}
    rows_of: dict[int, set[int]] = {}
    for r, segments in enumerate(rows):
        assert segments, "a row without segments"
        assert sum(n for _, _, n in segments) <= seq_len
        for doc_id, start, n in segments:
            assert n > 0
            placed.setdefault(doc_id, []).append((start, n))
            rows_of.setdefault(doc_id, set()).add(r)
    for doc_id, n_tokens in docs:
        pieces = sorted(placed[doc_id])
        at = 0
        for start, n in pieces:  # pieces tile the document exactly, no gap, no overlap
            assert start == at
            at += n
        assert at == n_tokens
        if n_tokens <= seq_len:
            assert len(rows_of[doc_id]) == 1, f"doc {doc_id} ({n_tokens} tokens) was cut"
    return rows_of


@pytest.mark.parametrize("seq_len,window,max_open", [(256, 64, 16), (2048, 4096, 512), (100, 1, 0)])
def test_every_token_placed_once_and_only_long_docs_cut(seq_len, window, max_open):
    docs = list(enumerate(lengths(3000)))
    rows, stats = pack_documents(docs, seq_len, window, max_open)
    rows_of = check_rows(rows, docs, seq_len)
    assert stats.rows == len(rows)
    assert stats.tokens == sum(n for _, n in docs)
    assert stats.docs_split == sum(len(r) > 1 for r in rows_of.values())
    assert stats.docs_split == sum(n > seq_len for _, n in docs)


def test_fill_is_high_and_concat_chunk_cuts_more_documents():
    docs = list(enumerate(lengths(20000, seed=1)))
    _, bfd = pack_documents(docs, 2048)
    concat = chunk_concatenated([n for _, n in docs], 2048)
    assert bfd.fill_ratio >= 0.995
    assert bfd.tokens == concat.tokens
    assert concat.docs_split > 2 * bfd.docs_split


def test_best_fit_picks_the_tightest_row():
    packer = BestFitPacker(seq_len=10, window=4, max_open_rows=10)
    rows = [r for doc_id, n in enumerate([6, 7, 3, 4]) for r in packer.add(doc_id, n)]
    rows += list(packer.finish())
    # decreasing: 7 → row A, 6 → row B, 4 fits B exactly (4 free), 3 fits A exactly (3 free)
    assert sorted(sorted(d for d, _, _ in r) for r in rows) == [[0, 3], [1, 2]]
    assert packer.stats.fill_ratio == 1.0


def test_deterministic_and_exact_seq_len_documents_are_not_cut():
    docs = [(i, n) for i, n in enumerate(lengths(500, seed=3))] + [(10_000, 128), (10_001, 256)]
    first, _ = pack_documents(docs, 128, 50, 8)
    second, _ = pack_documents(docs, 128, 50, 8)
    assert first == second
    assert [(10_000, 0, 128)] in first
    assert [(10_001, 0, 128)] in first and [(10_001, 128, 128)] in first


def test_plan_arrays_match_rows():
    docs = list(enumerate(lengths(800, seed=4)))
    rows, _ = pack_documents(docs, 512, 100, 32)
    plan = make_plan(docs, 512, 100, 32)
    assert plan.num_rows == len(rows)
    for r, segments in enumerate(rows):
        idx, doc_lens, doc_ids = plan.row_layout(r)
        assert list(zip(doc_ids.tolist(), plan.start[idx].tolist(), doc_lens.tolist())) == segments
        assert plan.offset[idx].tolist() == np.concatenate([[0], np.cumsum(doc_lens)[:-1]]).tolist()
    sl = plan.placements_of(docs[7][0])
    assert int(plan.length[sl].sum()) == docs[7][1]


def test_empty_documents_take_no_row():
    rows, stats = pack_documents([(1, 0), (2, 5)], 8)
    assert rows == [[(2, 0, 5)]] and stats.docs == 1
