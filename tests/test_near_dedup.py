"""Near-dedup: the pure core (verification, star resolution, no chaining, CJK) and the Beam PTransform (Beam path ==
in-memory path, 1 == 2 workers, incremental refresh against an earlier run's index)."""
from __future__ import annotations

import gzip
import itertools
import json
import random
import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from transforms.near_dedup import minhash
from transforms.near_dedup.core import (
    NearDedupConfig, SimilarityCache, SketchBuilder, component_labels, connected_components,
    dedup_in_memory, doc_rank, link_floor, resolve_component, star_edge_arrays, star_edges, verify_edge_arrays,
)

REPO = Path(__file__).resolve().parents[1]
DEMO_CORPUS = REPO / "data/demo/corpus.jsonl.gz"  # shipped; every record carries its source's licence
SHARED = REPO.parent / "shared"


# ---------------------------------------------------------------- real text and edited copies

def load(path: Path, lang: str | None = None, min_chars: int = 0, limit: int | None = None) -> list[dict]:
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if (lang is None or rec.get("lang") == lang) and len(rec["text"]) >= min_chars:
                out.append(rec)
                if limit and len(out) >= limit:
                    break
    return out


def edit_units(units: list[str], rate: float, rng: random.Random) -> list[str]:
    """Seeded substitutions, deletions and insertions at ``rate`` per unit (word or character)."""
    units = units[:]
    for _ in range(max(1, int(len(units) * rate))):
        i = rng.randrange(len(units))
        op = rng.random()
        if op < 0.4:
            units[i] = rng.choice(units)
        elif op < 0.7 and len(units) > 2:
            del units[i]
        else:
            units.insert(i, rng.choice(units))
    return units


def edit_words(text: str, rate: float, rng: random.Random) -> str:
    return " ".join(edit_units(text.split(" "), rate, rng))


def edit_chars(text: str, rate: float, rng: random.Random) -> str:
    return "".join(edit_units(list(text), rate, rng))


def char_ngrams(text: str, n: int = 5) -> set[str]:
    """Character n-grams of the word characters: an independent definition, not the code under test."""
    chars = "".join(re.findall(r"\w", unicodedata.normalize("NFKC", text).lower()))
    return {chars[i:i + n] for i in range(max(len(chars) - n + 1, 1))}


def word_shingles(text: str, n: int = 5) -> set[str]:
    words = re.findall(r"\w+", unicodedata.normalize("NFKC", text).lower())
    n = min(n, len(words))
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def as_docs(texts: list[str], first_id: int = 0) -> list[dict]:
    return [{"id": first_id + i, "text": t, "source": "test", "meta": {}, "annotations": {}} for i, t in enumerate(texts)]


def sketches_of(docs: list[dict], cfg: NearDedupConfig):
    builder = SketchBuilder(cfg)
    return [s for s in (builder.sketch(d) for d in docs) if s is not None]


def family_corpus(n_originals: int = 40, copies: int = 3, seed: int = 0) -> tuple[list[str], dict[int, int]]:
    """Real English documents from the demo corpus plus edited copies; returns texts and copy → original index."""
    rng = random.Random(seed)
    originals = [r["text"] for r in load(DEMO_CORPUS, lang="en", min_chars=1500, limit=n_originals)]
    texts, origin = list(originals), {}
    for index, text in enumerate(originals):
        for _ in range(copies):
            origin[len(texts)] = index
            texts.append(edit_words(text, rng.choice([0.002, 0.01, 0.03, 0.08]), rng))
    return texts, origin


# ---------------------------------------------------------------- config

def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="bands and near_dedup.rows"):
        NearDedupConfig(bands=9)
    with pytest.raises(ValueError, match="exceeds num_perm"):
        NearDedupConfig(bands=20, rows=13)
    with pytest.raises(ValueError, match="verify"):
        NearDedupConfig(verify="sometimes")
    with pytest.raises(ValueError, match="extra"):
        NearDedupConfig(treshold=0.8)
    assert NearDedupConfig(lsh_threshold=0.8).band_shape() == (9, 13)
    assert NearDedupConfig(bands=16, rows=8).band_shape() == (16, 8)


def test_non_integer_ids_are_refused_clearly():
    with pytest.raises(ValueError, match="integer document ids"):
        SketchBuilder(NearDedupConfig()).sketch({"id": "doc-1", "text": "some words"})


# ---------------------------------------------------------------- star edges and resolution

def test_bucket_edges_are_a_linear_star_even_for_a_hot_bucket():
    members = [((1, 0.0, i), i, False) for i in range(5000, 0, -1)]
    edges = list(star_edges(members))
    assert len(edges) == 4999 and {a for a, _ in edges} == {1}
    # old documents are centres, never linked to each other; the other old ones join through the first new one
    mixed = [((0, 0.0, 7), 7, True), ((0, 0.0, 9), 9, True), ((1, 0.0, 3), 3, False), ((1, 0.0, 5), 5, False)]
    assert sorted(star_edges(mixed)) == [(7, 3), (7, 5), (9, 3)]
    assert list(star_edges([((0, 0.0, 1), 1, True), ((0, 0.0, 2), 2, True)])) == []


def test_vectorized_star_edges_equal_the_per_bucket_stars():
    rng = np.random.default_rng(7)
    for trial in range(20):
        n, bands = int(rng.integers(2, 60)), int(rng.integers(1, 6))
        keys = rng.integers(0, int(rng.integers(2, 12)), (n, bands))  # few distinct keys: many shared buckets
        keys += np.arange(bands) * 100  # bucket keys are unique across bands (the band is packed into them)
        old = rng.random(n) < (0.3 if trial % 2 else 0.0)
        order = sorted(range(n), key=lambda i: (not old[i], i))  # rank order: old documents first
        keys, old = keys[order], old[order]
        a, b = star_edge_arrays(keys, old)
        expected = set()
        for band in range(bands):
            for key in np.unique(keys[:, band]):
                members = [((0 if old[i] else 1, 0.0, i), i, bool(old[i])) for i in np.flatnonzero(keys[:, band] == key)]
                expected |= {tuple(sorted(e)) for e in star_edges(members)}
        assert {tuple(sorted(e)) for e in zip(a.tolist(), b.tolist())} == expected
        assert len(a) == len(set(zip(a.tolist(), b.tolist())))  # distinct


def test_array_components_equal_union_find():
    rng = random.Random(8)
    for _ in range(20):
        n = rng.randint(2, 300)
        edges = [(rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(0, 2 * n))]
        labels = component_labels(n, np.array([e[0] for e in edges], dtype=np.int64),
                                  np.array([e[1] for e in edges], dtype=np.int64))
        reference = connected_components(edges)
        assert all(labels[node] == root for node, root in reference.items())
        assert all(labels[i] == i for i in range(n) if i not in reference)


@pytest.mark.parametrize("scheme", ["oph", "affine32"])
def test_estimates_settle_only_clear_edges_and_never_change_a_decision(scheme):
    cfg = NearDedupConfig(scheme=scheme, lsh_threshold=0.5)  # many candidates far from the threshold
    texts, _ = family_corpus(n_originals=30, copies=3, seed=9)
    ordered = sorted(sketches_of(as_docs(texts), cfg), key=lambda s: s.rank)
    signatures = np.stack([s.signature for s in ordered])
    from transforms.near_dedup.core import bucket_key_matrix

    a, b = star_edge_arrays(bucket_key_matrix(signatures, cfg), np.zeros(len(ordered), dtype=bool))
    cache = SimilarityCache(cfg)
    kept = verify_edge_arrays(ordered, signatures, a, b, cfg, cache)
    exact = np.array([minhash.exact_jaccard(ordered[i].shingles, ordered[j].shingles) >= link_floor(cfg)
                      for i, j in zip(a, b)])
    assert np.array_equal(kept, exact)
    assert 0 < cache.computed < len(a)  # the exact Jaccard was needed for some edges only


def test_duplicate_ids_are_refused_on_the_in_memory_path():
    from transforms.near_dedup.beam import _DecideFn, _resolve_all
    from transforms.near_dedup.blocks import SketchRows

    cfg = NearDedupConfig()
    docs = as_docs(["some words that make a few shingles here"])
    block = SketchRows.of(sketches_of(docs, cfg))
    with pytest.raises(ValueError, match="occurs more than once"):
        list(_resolve_all((0, [block, block]), cfg, False))
    with pytest.raises(ValueError, match="occurs more than once"):  # the distributed path, where ids meet docs
        _DecideFn(cfg).process((0, [docs, [dict(docs[0])]]))


def test_near_duplicates_behind_a_bucket_centre_just_below_the_threshold_still_meet():
    """A bucket links its members to its first one only: h (first in rank order) is 0.97 from x but 0.796 from y,
    while x and y are 0.82 apart. Linking at the link floor (0.6) puts all three in one component, where x, which
    covers both, is kept; at the threshold itself y would fall into a component of its own and stay."""
    cfg = NearDedupConfig(bands=1, rows=1)  # one band: the three share their only bucket
    base = np.arange(1000, 1090, dtype=np.uint32)
    x = np.sort(np.concatenate((base, np.arange(1, 11, dtype=np.uint32))))
    y = np.sort(np.concatenate((base, np.arange(2001, 2011, dtype=np.uint32))))
    h = np.sort(np.concatenate((x, np.arange(3001, 3004, dtype=np.uint32))))
    assert minhash.exact_jaccard(h, x) >= 0.8 > minhash.exact_jaccard(h, y) >= link_floor(cfg)
    assert minhash.exact_jaccard(x, y) >= 0.8
    # under 256 shingles the one-permutation estimate is never trusted: every similarity here is exact
    signature = np.zeros(cfg.num_perm, dtype=np.uint32)
    sketches = [minhash.Sketch(i, doc_rank(i, None, cfg), signature, shingles) for i, shingles in ((1, h), (2, x), (3, y))]
    decisions = {d.id: d for d in dedup_in_memory(sketches, cfg)}
    assert not decisions[2].removed and decisions[2].cluster_size == 3
    assert decisions[1].removed and decisions[1].cluster == 2
    assert decisions[3].removed and decisions[3].cluster == 2
    assert decisions[3].similarity == pytest.approx(minhash.exact_jaccard(x, y), abs=1e-6)


def test_default_bands_miss_a_pair_at_the_threshold_rarely():
    """The default LSH shape: a pair exactly at the threshold shares no band with probability <= 1e-4 (the
    verification is exact, so candidates below the threshold cost comparisons, not precision)."""
    cfg = NearDedupConfig()
    bands, rows = cfg.band_shape()
    assert (1 - cfg.threshold ** rows) ** bands <= 1e-4


def _chain_family(rng: random.Random) -> list[str]:
    """A family where neighbours are near-duplicates but the ends are not (boilerplate drift)."""
    base = load(DEMO_CORPUS, lang="en", min_chars=3000, limit=1)[0]["text"].split(" ")[:600]
    versions = [base]
    for _ in range(6):
        versions.append(edit_units(versions[-1], 0.025, rng))
    return [" ".join(v) for v in versions]


@pytest.mark.parametrize("resolution", ["degree", "rank"])
def test_no_chaining_every_removed_doc_meets_the_threshold_against_its_kept_doc(resolution):
    cfg = NearDedupConfig(resolution=resolution, lsh_threshold=0.5)
    texts = _chain_family(random.Random(1))
    shingles = [word_shingles(t) for t in texts]
    assert jaccard(shingles[0], shingles[-1]) < cfg.threshold  # the ends differ: one component must not be one cluster
    decisions = {d.id: d for d in dedup_in_memory(sketches_of(as_docs(texts), cfg), cfg)}
    removed = [d for d in decisions.values() if d.removed]
    assert removed
    for d in removed:
        assert not decisions[d.cluster].removed
        assert jaccard(shingles[d.id], shingles[d.cluster]) >= cfg.threshold
        assert d.similarity == pytest.approx(jaccard(shingles[d.id], shingles[d.cluster]), abs=1e-6)


@pytest.mark.parametrize("overrides", [{}, {"verify": "estimated"}, {"resolution": "rank"},
                                       {"method": "simhash"}, {"threshold": 0.7, "lsh_threshold": 0.5}])
def test_property_removed_documents_are_similar_enough_to_their_kept_document(overrides):
    cfg = NearDedupConfig(**overrides)
    texts, _ = family_corpus(n_originals=25, copies=3, seed=7)
    docs = as_docs(texts)
    sketches = {s.id: s for s in sketches_of(docs, cfg)}
    decisions = dedup_in_memory(sketches.values(), cfg)
    removed = [d for d in decisions if d.removed]
    assert len(removed) >= (15 if cfg.method == "simhash" else 25)  # SimHash at <= 3 bits finds fewer (RESULTS.md)
    kept_ids = {d.id for d in decisions if not d.removed}
    sample = random.Random(0).sample(removed, 15)
    for d in removed:
        assert d.cluster in kept_ids
        if cfg.verify == "estimated" and cfg.method == "minhash":
            estimate = minhash.estimated_jaccard(sketches[d.id].signature, sketches[d.cluster].signature)
            assert estimate >= cfg.threshold
        elif cfg.verify == "exact":
            assert minhash.exact_jaccard(sketches[d.id].shingles, sketches[d.cluster].shingles) >= cfg.threshold
    if cfg.verify == "exact":  # exact on a sample, from the strings themselves
        for d in sample:
            assert jaccard(word_shingles(texts[d.id]), word_shingles(texts[d.cluster])) >= cfg.threshold


def test_edited_copies_are_found_and_originals_kept():
    cfg = NearDedupConfig(resolution="rank")
    texts, origin = family_corpus(n_originals=30, copies=3, seed=3)
    decisions = {d.id: d for d in dedup_in_memory(sketches_of(as_docs(texts), cfg), cfg)}
    for copy, original in origin.items():
        if jaccard(word_shingles(texts[copy]), word_shingles(texts[original])) >= 0.85:
            assert decisions[copy].removed and decisions[copy].cluster == original
    assert not any(decisions[i].removed for i in range(30) if i in decisions)  # smallest id (the original) wins


def test_highest_quality_wins_when_asked():
    cfg = NearDedupConfig(keep="highest_quality", resolution="rank")
    text = load(DEMO_CORPUS, lang="en", min_chars=2000, limit=1)[0]["text"]
    docs = as_docs([text, text + " extra", text])
    docs[1]["annotations"]["quality"] = {"score": 0.9}
    docs[2]["annotations"]["quality"] = {"score": 0.2}
    decisions = {d.id: d for d in dedup_in_memory(sketches_of(docs, cfg), cfg)}
    assert not decisions[1].removed and decisions[0].cluster == 1 and decisions[2].cluster == 1


def test_large_components_fall_back_to_linear_memory_rank_order():
    cfg = NearDedupConfig(degree_max_component=5)
    texts, _ = family_corpus(n_originals=1, copies=8, seed=2)
    sketches = sketches_of(as_docs(texts), cfg)
    big = resolve_component(sketches, cfg)
    small = resolve_component(sketches, cfg.model_copy(update={"degree_max_component": 100, "resolution": "rank"}))
    assert [d.removed for d in big] == [d.removed for d in small] and any(d.removed for d in big)


def test_old_documents_always_win_and_are_never_decided():
    cfg = NearDedupConfig()
    texts, origin = family_corpus(n_originals=5, copies=2, seed=4)
    old = sketches_of(as_docs(texts[:5], first_id=100), cfg)
    for s in old:
        s.old = True
        s.rank = (0, 0.0, s.id)
    new = sketches_of(as_docs(texts[5:], first_id=0), cfg)
    decisions = dedup_in_memory(old + new, cfg)
    assert {d.id for d in decisions} <= {s.id for s in new}
    removed = [d for d in decisions if d.removed]
    assert removed and all(d.kept_is_old and d.cluster >= 100 for d in removed)


# ---------------------------------------------------------------- Chinese (character n-grams)

def _chinese_check(originals: list[str], seed: int) -> tuple[int, int]:
    """Edited copies of real Chinese documents; returns (copies with char-5-gram J >= 0.85, of them found)."""
    rng = random.Random(seed)
    texts, origin = list(originals), {}
    for index, text in enumerate(originals):
        for rate in (0.002, 0.01, 0.02, 0.05):
            origin[len(texts)] = index
            texts.append(edit_chars(text, rate, rng))
    cfg = NearDedupConfig()
    decisions = {d.id: d for d in dedup_in_memory(sketches_of(as_docs(texts), cfg), cfg)}
    cluster_of = {i: (decisions[i].cluster if i in decisions else i) for i in range(len(texts))}
    family = {i: origin.get(i, i) for i in range(len(texts))}
    # no false merges: every cluster holds one family only
    members: dict[int, set[int]] = {}
    for i, cluster in cluster_of.items():
        members.setdefault(cluster, set()).add(family[i])
    assert all(len(families) == 1 for families in members.values())
    grams = [char_ngrams(t) for t in texts]
    eligible = found = 0
    for copy, original in origin.items():
        if jaccard(grams[copy], grams[original]) >= 0.85:
            eligible += 1
            found += cluster_of[copy] == cluster_of[original]
    return eligible, found


def test_chinese_near_duplicates_in_repo_text():
    originals = [r["text"] for r in load(DEMO_CORPUS, lang="zh", min_chars=800)
                 if r["source"] in ("linux_doc_zh", "debian_handbook_zh", "debian_faq_zh")][:25]
    assert len(originals) >= 15
    eligible, found = _chinese_check(originals, seed=11)
    assert eligible >= 30 and found / eligible >= 0.9


def test_chinese_near_duplicates_shared_corpus():
    path = SHARED / "corpora/real_text_sample.jsonl.gz"
    if not path.exists():
        pytest.skip("../shared is not present")
    originals = [r["text"] for r in load(path, lang="zh", min_chars=1000)
                 if r["source"] in ("peoples_daily_zh", "manpages_zh", "linux_doc_zh")]
    originals = random.Random(0).sample(originals, 40)
    eligible, found = _chinese_check(originals, seed=12)
    assert eligible >= 70 and found / eligible >= 0.9


# ---------------------------------------------------------------- small dev-set scoring (the full set is in benchmarks/)

def test_dev_set_subset_scores():
    path = SHARED / "eval/dedup_dev.jsonl.gz"
    if not path.exists():
        pytest.skip("../shared is not present")
    records = load(path)
    families = sorted({r["family_id"] for r in records})
    chosen = set(random.Random(0).sample(families, len(families) // 6))
    subset = [r for r in records if r["family_id"] in chosen]
    cfg = NearDedupConfig()
    decisions = {d.id: d for d in dedup_in_memory(sketches_of(as_docs([r["text"] for r in subset]), cfg), cfg)}
    cluster_of = {i: (decisions[i].cluster if i in decisions else i) for i in range(len(subset))}
    shingles = [word_shingles(r["text"]) for r in subset]
    by_cluster: dict[int, list[int]] = {}
    for i, c in cluster_of.items():
        by_cluster.setdefault(c, []).append(i)
    predicted = {p for g in by_cluster.values() for p in itertools.combinations(sorted(g), 2)}
    truth = {(a, b) for a, b in itertools.combinations(range(len(subset)), 2)
             if subset[a]["family_id"] == subset[b]["family_id"] and jaccard(shingles[a], shingles[b]) >= 0.8}
    tp = len(predicted & truth)
    precision, recall = tp / max(len(predicted), 1), tp / max(len(truth), 1)
    assert len(truth) >= 100
    assert precision >= 0.9 and recall >= 0.93
    assert all(jaccard(shingles[a], shingles[b]) >= 0.5 for a, b in predicted)


# ---------------------------------------------------------------- Beam: paths, workers, refresh

def _beam_corpus() -> list[dict]:
    """Real English and Chinese documents with edited copies, under scattered (hash-like) ids."""
    rng = random.Random(21)
    texts, _ = family_corpus(n_originals=12, copies=2, seed=5)
    for rec in load(DEMO_CORPUS, lang="zh", min_chars=1500, limit=5):
        texts += [rec["text"], edit_chars(rec["text"], 0.005, rng), edit_chars(rec["text"], 0.03, rng)]
    texts += ["", "short", "   "]  # no tokens / one shingle: kept, never a crash
    ids = rng.sample(range(1, 2**62), len(texts))
    return [{"id": i, "text": t, "source": "test", "meta": {}, "annotations": {}} for i, t in zip(ids, texts)]


def run_near_dedup(docs, cfg, tmp_path, runner="inprocess", workers=1, index_out=None, against=(), counters=None,
                   input_bytes=None):
    """Kept and removed rows by id; ``counters``: a dict filled with the run's near_dedup counters;
    ``input_bytes``: the input size NearDedup is told (it sizes the partitions)."""
    import glob

    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter

    from beamio.beam_options import make_pipeline
    from transforms.near_dedup import NearDedup

    out = tmp_path / f"out-{runner}-{workers}-{cfg.mode}-{len(list(tmp_path.iterdir()))}"
    pipeline = make_pipeline(runner, workers)
    result = pipeline | beam.Create(docs) | NearDedup(cfg, index_out, against, input_bytes=input_bytes)
    for tag in ("kept", "removed"):
        (result[tag]
         | f"Json{tag}" >> beam.Map(lambda d: json.dumps({k: d.get(k) for k in ("id", "annotations", "reason",
                                                                                 "removed_by")}))
         | f"Write{tag}" >> beam.io.WriteToText(str(out / tag)))
    run = pipeline.run()
    assert run.wait_until_finish() == "DONE"
    if counters is not None:
        for c in run.metrics().query(MetricsFilter())["counters"]:
            if c.key.metric.namespace == "near_dedup":
                counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + c.committed
    read = {}
    for tag in ("kept", "removed"):
        rows = [json.loads(line) for f in glob.glob(str(out / f"{tag}*")) for line in open(f, encoding="utf-8")]
        read[tag] = {row["id"]: row for row in rows}
    return read["kept"], read["removed"]


@pytest.fixture(scope="module")
def beam_runs(tmp_path_factory):
    docs = _beam_corpus()
    tmp = tmp_path_factory.mktemp("near_dedup_beam")
    counters = {"memory": {}, "beam": {}, "two_workers": {}}
    memory = run_near_dedup(docs, NearDedupConfig(mode="memory"), tmp, counters=counters["memory"])
    distributed = run_near_dedup(docs, NearDedupConfig(mode="beam"), tmp, counters=counters["beam"])
    two_workers = run_near_dedup(docs, NearDedupConfig(mode="beam"), tmp, runner="direct", workers=2,
                                 counters=counters["two_workers"], input_bytes=100_000)
    return docs, memory, distributed, two_workers, counters


def test_beam_path_equals_in_memory_path_and_pure_core(beam_runs):
    docs, memory, distributed, _, _ = beam_runs
    assert memory == distributed
    kept, removed = memory
    assert len(kept) + len(removed) == len(docs)  # accounting
    assert len(removed) >= 12
    assert all(r["reason"] == "near_duplicate" and r["removed_by"] == "near_dedup" for r in removed.values())
    assert all(r["annotations"]["near_dedup"]["cluster"] in kept and r["annotations"]["near_dedup"]["similarity"] >= 0.8
               for r in removed.values())
    cfg = NearDedupConfig()
    core = {d.id for d in dedup_in_memory(sketches_of(docs, cfg), cfg) if d.removed}
    assert core == set(removed)


def test_same_kept_set_with_one_and_two_workers(beam_runs):
    _, memory, _, two_workers, _ = beam_runs
    assert two_workers == memory


def test_every_decision_made_reaches_its_document_on_both_paths(beam_runs):
    docs, (_, removed), _, _, counters = beam_runs
    for path, got in counters.items():
        assert got["decisions_made"] == got["decisions_applied"] >= len(removed), path
        assert "labels_without_sketch" not in got, path


def test_a_lost_decision_or_sketch_fails_the_accounting():
    from pipelines.prepare import near_dedup_consistency

    assert near_dedup_consistency({("near_dedup", "decisions_made"): 7, ("near_dedup", "decisions_applied"): 7}) == []
    assert near_dedup_consistency({}) == []
    [lost] = near_dedup_consistency({("near_dedup", "decisions_made"): 7, ("near_dedup", "decisions_applied"): 3})
    assert "7 decisions were made but 3 reached their documents" in lost
    [unmatched] = near_dedup_consistency({("near_dedup", "labels_without_sketch"): 2})
    assert "2 documents" in unmatched and "without their sketch" in unmatched


def test_refresh_removes_copies_of_an_earlier_run_and_is_idempotent(tmp_path):
    import pyarrow.parquet as pq

    rng = random.Random(8)
    english = [r["text"] for r in load(DEMO_CORPUS, lang="en", min_chars=1500, limit=30)]
    run_a = as_docs(english[:15] + [edit_words(english[0], 0.01, rng)], first_id=1000)
    index_a = str(tmp_path / "A" / "dedup")
    kept_a, removed_a = run_near_dedup(run_a, NearDedupConfig(mode="memory"), tmp_path, index_out=index_a)
    assert set(removed_a) == {1015} and len(kept_a) == 15
    sketch_ids = sorted(x for f in Path(index_a).glob("sketches-*.parquet") for x in pq.read_table(f).column("id").to_pylist())
    assert sketch_ids == sorted(kept_a)

    fresh = english[15:27]
    copies = [english[i] for i in range(5)] + [edit_words(english[i], 0.01, rng) for i in range(5, 10)]
    run_b = as_docs(fresh + copies, first_id=5000)
    copy_ids = set(range(5000 + len(fresh), 5000 + len(fresh) + len(copies)))
    index_b = str(tmp_path / "B" / "dedup")
    kept_b, removed_b = run_near_dedup(run_b, NearDedupConfig(mode="beam"), tmp_path, index_out=index_b,
                                       against=[index_a])
    assert set(removed_b) == copy_ids  # every copy removed, nothing else
    assert len(kept_b) + len(removed_b) == len(run_b)  # only the new documents come out: A's stay untouched
    for row in removed_b.values():
        mine = row["annotations"]["near_dedup"]
        assert mine["cluster"] in kept_a and mine["of_earlier_run"]
    index_b_ids = sorted(x for f in Path(index_b).glob("sketches-*.parquet") for x in pq.read_table(f).column("id").to_pylist())
    assert index_b_ids == sorted(kept_b)

    again = run_near_dedup(run_b, NearDedupConfig(mode="memory"), tmp_path, against=[index_a])
    assert again == (kept_b, removed_b)  # idempotent, and the in-memory path agrees on the refresh path
    with_own_index = run_near_dedup(run_b, NearDedupConfig(mode="memory"), tmp_path, against=[index_a, index_b])
    assert with_own_index == (kept_b, removed_b)  # a document never removes itself


def test_refresh_against_an_index_built_with_other_parameters_fails_clearly(tmp_path):
    from transforms.near_dedup import NearDedup

    docs = as_docs([r["text"] for r in load(DEMO_CORPUS, lang="en", min_chars=1500, limit=3)])
    index = str(tmp_path / "dedup")
    run_near_dedup(docs, NearDedupConfig(mode="memory"), tmp_path, index_out=index)
    with pytest.raises(ValueError, match="num_perm: index has 128, config has 64"):
        NearDedup(NearDedupConfig(num_perm=64), None, [index])
    with pytest.raises(FileNotFoundError, match="not a near-dedup index"):
        NearDedup(NearDedupConfig(), None, [str(tmp_path)])


def test_a_hot_component_of_near_identical_pages_resolves_into_one_verified_star():
    cfg = NearDedupConfig()
    rng = random.Random(9)
    base = load(DEMO_CORPUS, lang="en", min_chars=3000, limit=1)[0]["text"]
    texts = [edit_words(base, 0.003, rng) for _ in range(300)]
    sketches = {s.id: s for s in sketches_of(as_docs(texts), cfg)}
    decisions = dedup_in_memory(sketches.values(), cfg)  # one bucket per band holds all 300 ids
    kept = [d for d in decisions if not d.removed]
    assert len(kept) == 1 and kept[0].cluster_size == 300
    assert all(minhash.exact_jaccard(sketches[d.id].shingles, sketches[d.cluster].shingles) >= cfg.threshold
               for d in decisions if d.removed)


def test_an_index_writer_part_is_sized_by_what_its_rows_hold_in_memory():
    """``WriteSorted`` bounds a writer by the bytes its part's rows are counted at; the index rows must be
    counted at what they hold as Python objects (a band row is 16 bytes in Parquet but ~260 as a dict of two
    ints: counted at 16, one writer took every band row of the corpus)."""
    import tracemalloc

    from transforms.near_dedup import index

    rng = random.Random(3)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        bands = [{"key": rng.getrandbits(62), "id": rng.getrandbits(62)} for _ in range(20_000)]
        band_held = (tracemalloc.get_traced_memory()[0] - base) / len(bands)
        base = tracemalloc.get_traced_memory()[0]
        sketches = [index.sketch_row(minhash.Sketch(rng.getrandbits(62), (0,), np.zeros(128, dtype=np.uint32),
                                                    np.arange(rng.randint(50, 5000), dtype=np.uint32)))
                    for _ in range(2_000)]
        sketch_held = (tracemalloc.get_traced_memory()[0] - base) / len(sketches)
    finally:
        tracemalloc.stop()
    sketch_counted = sum(len(r["signature"]) + len(r["shingles"]) + index.SKETCH_ROW_HELD_BYTES
                         for r in sketches) / len(sketches)
    assert 0.8 <= index.BAND_ROW_HELD_BYTES / band_held <= 1.5, band_held
    assert 0.9 <= sketch_counted / sketch_held <= 1.5, (sketch_counted, sketch_held)
