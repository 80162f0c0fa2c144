"""glibc's heap for the processes that do numpy-heavy work: near-dedup's sketching makes and frees arrays of
~10 MB per batch of 256 documents, thousands of times.

``numpy_friendly_heap()`` sets, once per process and with ``mallopt`` (never in the environment, which child
processes would inherit), the upper bounds of glibc's own dynamic thresholds on 64-bit: blocks up to 32 MB
come from the heap (``M_MMAP_THRESHOLD``) and up to 64 MB free stay at its top (``M_TRIM_THRESHOLD``). Without
them every such array is mapped (or the heap grown), faulted in page by page and unmapped (or trimmed) when
freed: sketching the 1× scale corpus in one process took 2.85 CPU s and 616k page faults with glibc's
defaults, 3.4 s under Dask's ``MALLOC_TRIM_THRESHOLD_=65536`` (which also switches the dynamic thresholds off),
and 1.5 s with no page fault at all with these two settings (``benchmarks/RESULTS.md``, near-duplicate
removal). A process that must hand memory back sooner trims it itself (the Dask runner does after every
task). Nothing else changes: the memory a block gets is the same either way.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20


@functools.cache
def numpy_friendly_heap() -> bool:
    """Set both thresholds in this process (once); False where the C library has no ``mallopt`` (macOS, musl)."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
