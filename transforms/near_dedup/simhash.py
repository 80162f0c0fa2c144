"""64-bit SimHash over shingle hashes and permuted-block bucket keys (Manku et al., WWW 2007).

An alternative candidate generator to MinHash-LSH (``near_dedup.method: simhash``); everything after the
bucketing (star edges, verification, connected components, star resolution) is shared with MinHash.
"""
from __future__ import annotations

import hashlib
from itertools import combinations

import numpy as np

BITS = 64


def simhash(shingles: np.ndarray) -> int:
    """Bitwise majority vote of the shingle hashes: bit i is set when more than half of them have it set."""
    if len(shingles) == 0:
        return 0
    bits = np.unpackbits(np.asarray(shingles, dtype="<u8").view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
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


def bucket_keys(value: int, blocks: int, max_distance: int) -> list[bytes]:
    """One key per choice of ``blocks - max_distance`` blocks (the values of those blocks).

    Two fingerprints within Hamming distance ``max_distance`` differ in at most that many blocks, so they
    agree on all blocks of at least one choice: they share that table's key (pigeonhole, no false negative).
    """
    if not 0 <= max_distance < blocks <= BITS:
        raise ValueError(f"need 0 <= max_distance < blocks <= {BITS}, got max_distance={max_distance}, blocks={blocks}")
    parts = [(value >> shift) & mask for shift, mask in _block_masks(blocks)]
    keys = []
    for table, chosen in enumerate(combinations(range(blocks), blocks - max_distance)):
        payload = b"".join(parts[i].to_bytes(8, "little") for i in chosen)
        keys.append(table.to_bytes(2, "little") + hashlib.blake2b(payload, digest_size=14).digest())
    return keys
