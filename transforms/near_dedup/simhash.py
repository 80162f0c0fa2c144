"""64-bit SimHash over shingle hashes and permuted-block bucket keys (Manku et al., WWW 2007).

An alternative candidate generator to MinHash-LSH (``near_dedup.method: simhash``); everything after the
bucketing (star edges, verification, connected components, star resolution) is shared with MinHash.
"""
from __future__ import annotations

from itertools import combinations

import numpy as np

BITS = 64
_TABLE_BITS = 10  # bucket keys: table index in the top bits, a 54-bit hash of the chosen blocks below
_U64 = np.uint64


def _mix64(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> _U64(30))
    h = h * _U64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> _U64(27))
    h = h * _U64(0x94D049BB133111EB)
    return h ^ (h >> _U64(31))


def simhash(shingles: np.ndarray) -> int:
    """Bitwise majority vote of the (64-bit mixed) shingle hashes: bit i is set when more than half have it."""
    if len(shingles) == 0:
        return 0
    with np.errstate(over="ignore"):
        hashes = _mix64(np.asarray(shingles).astype(np.uint64))
    bits = np.unpackbits(hashes.astype("<u8").view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    votes = bits.sum(axis=0, dtype=np.int64) * 2 > len(shingles)  # 64 booleans, bit 0 first
    return int(np.packbits(votes, bitorder="little").view("<u8")[0])


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def similarity(a: int, b: int) -> float:
    return 1.0 - hamming(a, b) / BITS


def _block_masks(blocks: int) -> list[tuple[int, int]]:
    """(shift, mask) of each of ``blocks`` nearly equal contiguous bit blocks."""
    bounds = [round(i * BITS / blocks) for i in range(blocks + 1)]
    return [(lo, (1 << (hi - lo)) - 1) for lo, hi in zip(bounds, bounds[1:])]


def _table_masks(blocks: int, max_distance: int) -> list[int]:
    if not 0 <= max_distance < blocks <= BITS:
        raise ValueError(f"need 0 <= max_distance < blocks <= {BITS}, got max_distance={max_distance}, blocks={blocks}")
    masks = _block_masks(blocks)
    return [sum(masks[i][1] << masks[i][0] for i in chosen)
            for chosen in combinations(range(blocks), blocks - max_distance)]


def bucket_key_matrix(values: np.ndarray, blocks: int, max_distance: int) -> np.ndarray:
    """(fingerprints × tables) int64 keys: one per choice of ``blocks - max_distance`` blocks (a hash of the
    values of those blocks, with the table index in the top bits).

    Two fingerprints within Hamming distance ``max_distance`` differ in at most that many blocks, so they
    agree on all blocks of at least one choice: they share that table's key (pigeonhole, no false negative).
    """
    masks = _table_masks(blocks, max_distance)
    if len(masks) > 1 << _TABLE_BITS:
        raise ValueError(f"simhash: {len(masks)} tables, at most {1 << _TABLE_BITS}")
    values = np.asarray(values, dtype=np.uint64).reshape(-1, 1)
    table = np.arange(len(masks), dtype=np.uint64)
    with np.errstate(over="ignore"):
        hashed = _mix64((values & np.array(masks, dtype=np.uint64)) ^ (table * _U64(0x9E3779B97F4A7C15)))
    keys = (hashed >> _U64(_TABLE_BITS)) | (table << _U64(BITS - _TABLE_BITS))
    return keys.view(np.int64)


def bucket_keys(value: int, blocks: int, max_distance: int) -> list[int]:
    """The bucket keys of one fingerprint (see ``bucket_key_matrix``)."""
    return bucket_key_matrix(np.array([value], dtype=np.uint64), blocks, max_distance)[0].tolist()
