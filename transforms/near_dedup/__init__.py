"""Near-duplicate removal (MinHash-LSH or SimHash), in four parts:

- ``core``: the pure decisions (sketches, band keys, verified star edges, component resolution), no Beam;
- ``minhash`` / ``simhash``: the signatures;
- ``index``: the index on disk (sketches and band keys a later refresh dedups against), ``check_index_params``;
- ``beam``: the ``NearDedup`` PTransform (named sub-transforms ending in the shared routing tail).
"""
from transforms.near_dedup.core import NearDedupConfig

__all__ = ["NearDedup", "NearDedupConfig"]


def __getattr__(name: str):
    """``NearDedup`` is imported on first use: the pure core (and ``corpusmill dedup``'s in-memory path) runs
    without importing Beam."""
    if name == "NearDedup":
        # deferred: NearDedup's module imports Beam (see the docstring)
        from transforms.near_dedup.beam import NearDedup

        return NearDedup
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
