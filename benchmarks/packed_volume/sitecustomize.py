"""Bytes the Dask runner pickles, by element shape: a measuring probe, not part of the product.

With this folder first on PYTHONPATH and ``PACKED_VOLUME_DIR`` set, every Python process of a run (the driver
and each Dask worker) wraps ``beam_dask.execute._Packer._seal`` and writes ``<pid>.json`` into that folder:
element shape → [elements, pickled bytes, chunks]. ``python benchmarks/packed_volume/summarize.py DIR`` adds
the processes up. Without ``PACKED_VOLUME_DIR`` this file does nothing.
"""
import atexit
import collections
import json
import os
import sys

_OUT = os.environ.get("PACKED_VOLUME_DIR")


def _install(out_dir: str) -> None:
    import beam_dask.execute as execute
    from apache_beam.utils.windowed_value import WindowedValue

    totals = collections.defaultdict(lambda: [0, 0, 0])

    def shape(x, depth=0) -> str:
        if isinstance(x, WindowedValue):
            return "WV[" + shape(x.value, depth) + "]"
        if depth >= 2:
            return type(x).__name__
        if isinstance(x, tuple):
            return "(" + ",".join(shape(y, depth + 1) for y in x[:4]) + ")"
        return type(x).__name__

    def dump() -> None:
        with open(os.path.join(out_dir, f"{os.getpid()}.json"), "w") as f:
            json.dump(dict(totals), f)

    original = execute._Packer._seal
    sealed = [0]

    def _seal(self) -> None:
        if not self.buffer:
            return original(self)
        kind, n = shape(self.buffer[0]), len(self.buffer)
        original(self)
        entry = totals[kind]
        entry[0] += n
        entry[1] += len(self.chunks[-1])
        entry[2] += 1
        sealed[0] += 1
        if sealed[0] % 200 == 0:  # a worker may be stopped without running atexit
            dump()

    execute._Packer._seal = _seal
    atexit.register(dump)


if _OUT:
    try:
        _install(_OUT)
    except Exception as error:  # a probe: say so, never change the run
        print(f"packed_volume probe not installed: {error}", file=sys.stderr)
