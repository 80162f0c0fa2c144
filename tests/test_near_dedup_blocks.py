"""Near-dedup's distributed path a block at a time (transforms/near_dedup/blocks.py): the columns that cross its
shuffles, and each partition's step against the per-bucket reference and the in-memory path. Pure numpy, no
Beam: the Beam graph itself is tested in test_near_dedup.py (its decisions equal the in-memory path's on one
and two workers)."""
from __future__ import annotations

import pickle
import random
from collections import defaultdict

import numpy as np
import pytest

from test_near_dedup import as_docs, family_corpus, sketches_of
from transforms.near_dedup import blocks
from transforms.near_dedup.blocks import Bands, Edges, Labelled, SketchRows, partition_of
from transforms.near_dedup.core import NearDedupConfig, dedup_in_memory, link_floor, star_edges
from transforms.near_dedup.minhash import Sketch


def _corpus_sketches(cfg: NearDedupConfig, old_share: float = 0.0, seed: int = 4) -> list[Sketch]:
    texts, _ = family_corpus(n_originals=24, copies=3, seed=seed)
    rng = random.Random(seed)
    ids = rng.sample(range(1, 2**62), len(texts))
    docs = [{**doc, "id": i} for doc, i in zip(as_docs(texts), ids)]
    sketches = sketches_of(docs, cfg)
    for s in sketches:
        if rng.random() < old_share:  # an earlier run's document, as an index gives it back
            s.old, s.rank = True, (0, 0.0, s.id)
    return sketches


def test_sketch_rows_keep_every_field_through_take_concat_and_pickling():
    cfg = NearDedupConfig()
    sketches = _corpus_sketches(cfg, old_share=0.3)
    rows = SketchRows.of(sketches)
    assert [(s.id, s.rank, s.old) for s in rows.sketches()] == [(s.id, s.rank, s.old) for s in sketches]
    assert all(np.array_equal(a.signature, b.signature) and np.array_equal(a.shingles, b.shingles)
               for a, b in zip(rows.sketches(), sketches))
    chosen = np.array([5, 0, 17, 3])
    again = SketchRows.concat([rows.take(chosen[:2]), rows.take(chosen[2:2]), rows.take(chosen[2:])])
    again = pickle.loads(pickle.dumps(again))
    assert [s.id for s in again.sketches()] == [sketches[i].id for i in chosen]
    assert all(np.array_equal(again.shingles_of(k), sketches[i].shingles) for k, i in enumerate(chosen))
    assert rows.index_of(np.array([sketches[3].id, 12345, sketches[0].id])).tolist() == [3, -1, 0]
    assert SketchRows.concat([]) is None
    with pytest.raises(ValueError, match="not \\(class, score, id\\)"):
        SketchRows.of([Sketch(1, (1, 0.0), sketches[0].signature, sketches[0].shingles)])


def test_partitions_spread_sequential_ids_and_keys_evenly():
    counts = np.bincount(partition_of(np.arange(16_000), 16), minlength=16)
    assert counts.min() > 800 and counts.max() < 1200, counts
    assert blocks.partitions_for(None) == blocks.MIN_PARTITIONS
    assert blocks.partitions_for(3 * blocks.PARTITION_INPUT_BYTES) == blocks.MIN_PARTITIONS
    assert blocks.partitions_for(10 * blocks.PARTITION_INPUT_BYTES + 1) == 11  # grows with the input
    assert blocks.partitions_for(100 * blocks.PARTITION_INPUT_BYTES) == 100


def test_partitions_are_a_multiple_of_the_workers_and_few_for_a_small_input():
    size, small = blocks.PARTITION_INPUT_BYTES, blocks.SMALLEST_PARTITION_BYTES
    assert blocks.partitions_for(small // 10, 2) == 2  # the demo's scale: one per worker
    assert blocks.partitions_for(small // 10, 3) == 3
    assert blocks.partitions_for(2 * small, 2) == 2 and blocks.partitions_for(3 * small, 2) == 4
    assert blocks.partitions_for(3 * size, 2) == blocks.MIN_PARTITIONS  # none larger than needed below 8 x 64 MB
    assert blocks.partitions_for(9 * size - 1, 2) == 10  # 9 by size, rounded up to 5 per worker
    assert blocks.partitions_for(9 * size - 1, 4) == 12
    assert blocks.partitions_for(3 * small, 1) == 3 and blocks.partitions_for(20 * size, 1) == 20
    assert blocks.partitions_for(None, 2) == blocks.MIN_PARTITIONS  # the size unknown: as before
    assert blocks.partitions_for(10 ** 15, 2) == blocks.MAX_PARTITIONS


def test_bucket_star_edges_equal_the_per_bucket_stars_whatever_the_partitioning():
    rng = np.random.default_rng(11)
    for trial in range(30):
        n = int(rng.integers(2, 80))
        ids = rng.choice(10**9, n, replace=False).astype(np.int64)
        old = rng.random(n) < (0.3 if trial % 2 else 0.0)
        rank_class = np.where(old, 0, rng.integers(1, 3, n)).astype(np.int8)
        rank_score = np.where(old, 0.0, -rng.integers(0, 3, n).astype(float))  # ties: the id decides
        per_doc = int(rng.integers(1, 5))
        keys = rng.integers(0, int(rng.integers(2, 10)), (n, per_doc)) + np.arange(per_doc) * 100
        flat = Bands(keys.reshape(-1), np.repeat(ids, per_doc), np.repeat(rank_class, per_doc),
                     np.repeat(rank_score, per_doc), np.repeat(old, per_doc))
        shuffled = blocks.take_columns(flat, rng.permutation(len(flat.keys)))
        expected = set()
        for key in np.unique(flat.keys):
            at = np.flatnonzero(flat.keys == key)
            members = [((int(flat.rank_class[i]), float(flat.rank_score[i]), int(flat.ids[i])), int(flat.ids[i]),
                        bool(flat.old[i])) for i in at]
            expected |= set(star_edges(members))
        for parts in (1, 3):  # every bucket's entries in one partition, as the shuffle by key puts them
            got = set()
            for _, part in blocks.split_columns(shuffled, partition_of(shuffled.keys, parts), parts):
                edges = blocks.bucket_star_edges(part)
                got |= set(zip(edges.a.tolist(), edges.b.tolist()))
            assert got == expected, (trial, parts)


def components(edges: Edges, rounds: int, n_parts: int = 4) -> tuple[dict[int, int], int]:
    """Connected components by the same steps, in the same order, as the distributed path (``beam.
    ConnectedComponents``, grouping by partition included): node → label, and the number of label pairs merged
    at the end."""
    def grouped(blocks_by_part):
        return [blocks.concat_columns(pieces) for pieces in blocks_by_part.values()]

    def by_first(parts_blocks):
        out: dict = {}
        for block in parts_blocks:
            for p, piece in blocks.split_columns(block, blocks.partition_of(block.a, n_parts), n_parts):
                out.setdefault(p, []).append(piece)
        return out

    graph = [blocks.both_directions(edges)]
    for _ in range(rounds):
        graph = [blocks.large_star(block) for block in grouped(by_first(graph))]
        graph = [blocks.both_directions(blocks.small_star(block)) for block in grouped(by_first(graph))]
    messages: dict = {}
    for block in grouped(by_first(graph)):
        for p, (own, heard) in blocks.label_messages(block, n_parts):
            messages.setdefault(p, ([], []))
            messages[p][0].append(own)
            messages[p][1].append(heard)
    labels, crossing = [], []
    for own, heard in messages.values():
        mine, pairs = blocks.crossing_labels(blocks.concat_columns(own), blocks.concat_columns(heard))
        labels.append(mine)
        crossing.append(pairs)
    pairs = blocks.concat_columns(crossing) or Edges(np.empty(0, np.int64), np.empty(0, np.int64))
    merged = blocks.merge_labels(pairs)
    result = {}
    for mine in labels:
        result.update(zip(mine.a.tolist(), blocks.final_labels(mine.b, [merged]).tolist()))
    return result, len(pairs.a)


def test_connected_components_are_exact_for_any_number_of_rounds():
    def edges_of(pairs):
        return Edges(np.array([a for a, _ in pairs], dtype=np.int64), np.array([b for _, b in pairs], dtype=np.int64))

    rng = random.Random(3)
    ids = rng.sample(range(10**6), 900)
    chain = [(ids[i], ids[i + 1]) for i in range(299)]  # one long chain ...
    star = [(ids[300], ids[j]) for j in range(301, 600)]  # ... one big star ...
    tree = [(ids[rng.randrange(600, j)], ids[j]) for j in range(601, 900)]  # ... and a random tree
    expected = {i: min(ids[:300]) for i in ids[:300]} | {i: min(ids[300:600]) for i in ids[300:600]}
    expected |= {i: min(ids[600:]) for i in ids[600:]}
    crossings = []
    for rounds in (0, 1, 2, 4, NearDedupConfig().cc_max_rounds):
        for parts in (1, 7):  # the same steps grouped by partitions, as on the distributed path
            labels, crossing = components(edges_of(chain + star + tree), rounds, parts)
            assert labels == expected, (rounds, parts)  # exact whatever the number of rounds
        crossings.append(crossing)
    assert crossings[0] > crossings[2] > 0  # rounds shrink what is merged on one worker
    centre = min(ids[300:600])  # near-duplicate stars are centred on their first document in rank order
    assert components(edges_of([(centre, j) for j in ids[300:600] if j != centre]), 0)[1] == 0  # no merge needed
    assert components(edges_of([]), 1) == ({}, 0)


def _distributed(sketches: list[Sketch], cfg: NearDedupConfig, parts: int) -> list:
    """The distributed path's steps on these sketches, each partition on its own, grouped as the shuffles group."""
    def grouped(pieces):
        out = defaultdict(list)
        for p, block in pieces:
            out[p].append(block)
        return out

    def by(column, block):
        return blocks.split_columns(block, partition_of(getattr(block, column), parts), parts)

    rows = SketchRows.of(sketches)
    by_id = dict(rows.split(partition_of(rows.ids, parts), parts))
    entries = blocks.band_entries(rows, cfg)
    bands = grouped(blocks.split_columns(entries, partition_of(entries.keys, parts), parts))
    edges = [blocks.bucket_star_edges(blocks.concat_columns(part)) for part in bands.values()]
    centre_of = grouped(piece for block in edges for piece in by("a", block))
    member_of = grouped(piece for block in edges for piece in by("b", block))
    probes = grouped(piece for p, part in by_id.items() for piece in blocks.edge_ends(
        part, blocks.concat_columns(centre_of.get(p, [])), blocks.concat_columns(member_of.get(p, [])), parts))
    verified, ends = [], []
    for part in probes.values():
        edges_here, _, rows_here = blocks.verify_probes(part, cfg)
        verified.append(edges_here)
        if rows_here is not None:
            ends.extend(rows_here.split(partition_of(rows_here.ids, parts), parts))
    ends = grouped(ends)
    labels, _ = components(blocks.concat_columns(verified), cfg.cc_max_rounds, parts)
    nodes = np.array(sorted(labels), dtype=np.int64)
    by_component = defaultdict(list)
    for p, chosen in blocks.split_by_partition(partition_of(nodes, parts), parts):
        own = Edges(nodes[chosen], np.array([labels[i] for i in nodes[chosen].tolist()], dtype=np.int64))
        labelled, missing = blocks.labelled_rows(own, SketchRows.concat(ends.get(p, [])))
        assert missing == 0
        for q, at in blocks.split_by_partition(partition_of(labelled.labels, parts), parts):
            by_component[q].append(Labelled(labelled.labels[at], labelled.rows.take(at)))
    return sorted(d for part in by_component.values() for d in blocks.resolve_components(part, cfg))


@pytest.mark.parametrize("overrides", [{}, {"resolution": "rank"}, {"scheme": "affine32", "lsh_threshold": 0.5},
                                       {"verify": "estimated"}, {"cc_max_rounds": 0}])
def test_each_partition_on_its_own_gives_the_in_memory_decisions(overrides):
    cfg = NearDedupConfig(**overrides)
    sketches = _corpus_sketches(cfg, old_share=0.15)
    expected = dedup_in_memory(sketches, cfg)
    assert sum(d.removed for d in expected) >= 20
    for parts in (1, 4, 16):
        assert _distributed(sketches, cfg, parts) == expected, parts


def test_verification_rejects_what_the_in_memory_path_rejects_and_counts_it():
    cfg = NearDedupConfig(lsh_threshold=0.5)  # many candidates below the threshold
    sketches = _corpus_sketches(cfg)
    rows = SketchRows.of(sketches)
    edges = blocks.bucket_star_edges(blocks.band_entries(rows, cfg))
    probes = [probe for _, probe in blocks.edge_ends(rows, edges, edges, 1)]
    verified, rejected, ends = blocks.verify_probes(probes, cfg)
    by_id = {s.id: s for s in sketches}
    from transforms.near_dedup.minhash import exact_jaccard

    expected = {(a, b) for a, b in zip(edges.a.tolist(), edges.b.tolist())
                if exact_jaccard(by_id[a].shingles, by_id[b].shingles) >= link_floor(cfg)}
    assert set(zip(verified.a.tolist(), verified.b.tolist())) == expected
    assert rejected == len(edges.a) - len(expected) > 0
    assert sorted(ends.ids.tolist()) == sorted({i for edge in expected for i in edge})  # each end's row, once


def test_earlier_runs_rows_give_way_to_new_ones_and_count_once():
    cfg = NearDedupConfig()
    sketches = _corpus_sketches(cfg)[:6]
    new = SketchRows.of(sketches[:3])
    as_old = [Sketch(s.id, (0, 0.0, s.id), s.signature, s.shingles, True) for s in sketches[2:]]
    old = SketchRows.of(as_old + as_old[-1:])  # sketches[2] is new again; sketches[5] in two earlier runs
    surviving = blocks.surviving_old_rows(new, old)
    assert sorted(surviving.ids.tolist()) == sorted(s.id for s in sketches[3:])
    stored = blocks.band_entries(old, cfg)
    entries = blocks.old_band_entries(surviving, Edges(np.concatenate((stored.ids, stored.ids)),
                                                       np.concatenate((stored.keys, stored.keys))))
    per_doc = len(stored.keys) // len(old)
    assert len(entries.keys) == 3 * per_doc and entries.old.all() and (entries.rank_class == 0).all()
    assert blocks.surviving_old_rows(SketchRows.of(sketches), old) is None
