"""Near-duplicate removal (MinHash-LSH or SimHash), in three parts:

- ``core``: the pure decisions (sketches, band keys, verified star edges, component resolution), no Beam;
- ``minhash`` / ``simhash``: the signatures;
- ``beam``: the ``NearDedup`` PTransform that runs the core on any Beam runner and reads/writes the index.
"""
from transforms.near_dedup.beam import NearDedup
from transforms.near_dedup.core import NearDedupConfig

__all__ = ["NearDedup", "NearDedupConfig"]
