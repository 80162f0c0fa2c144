"""glibc's heap for the processes that do numpy-heavy work: near-dedup's sketching makes and frees arrays of
~10 MB per batch of 256 documents, thousands of times.

``numpy_friendly_heap()`` sets, once per process and with ``mallopt`` (never in the environment, which child
processes would inherit), the upper bound of glibc's own dynamic mmap threshold on 64-bit: blocks up to 32 MB
come from the heap (``M_MMAP_THRESHOLD``) instead of being mapped, faulted in page by page and unmapped when
freed. A worker process stops there: its heap top is still trimmed as before (Dask's nanny sets
``MALLOC_TRIM_THRESHOLD_=65536``), so what it holds stays what the scale benchmark's memory bar measured.
A process that does nothing but sketch (``corpusmill dedup``'s in-memory path) also keeps up to 64 MB free at
its heap's top (``M_TRIM_THRESHOLD``, ``keep_free_top=True``), so that not even the heap is grown and trimmed
back per batch. Sketching the 1× scale corpus in one process (``benchmarks/bench_sketch_heap.py``, figures in
``benchmarks/RESULTS.md``, near-duplicate removal): 3.2–3.5 CPU s and ~0.9 M page faults under Dask's variable
(which also switches the dynamic thresholds off), 1.4–1.5 s and a few hundred faults with the mmap threshold,
none with both; glibc's defaults 1.55 s and ~50k faults.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20


@functools.cache
def numpy_friendly_heap(keep_free_top: bool = False) -> bool:
    """Set the thresholds in this process (once); False where the C library has no ``mallopt`` (macOS, musl)."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return done and (not keep_free_top or bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)))


def release_free_heap() -> bool:
    """Collect Python's garbage cycles, then hand the heap's free pages back to the system (glibc's
    ``malloc_trim``): for a long-lived process between passes that each built and freed a large working set (the
    phased clean's units in one process), so the next pass starts from what is live, not from the last one's
    high-water mark. False where the C library has no ``malloc_trim``."""
    import gc

    gc.collect()
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return False
    return bool(trim(0))
