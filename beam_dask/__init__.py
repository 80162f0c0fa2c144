"""A Beam runner for dask.distributed that the project owns and tests (Beam's bundled DaskRunner loses data).

    from beam_dask import make_dask_pipeline
    p = make_dask_pipeline("tcp://scheduler:8786")      # or None: a LocalCluster of `workers` processes
    ...build the graph...
    p.run().wait_until_finish()

The runner is also reachable by name: ``--runner=beam_dask.DaskRunner --dask_address=HOST:PORT`` (that is how
``beamio.beam_options.make_pipeline`` selects it, with the rest of its settings as ``DaskRunnerOptions``).
"""
from __future__ import annotations

from typing import Sequence

# Beam is imported with the first name that needs it: ``beam_dask.cluster`` alone starts a LocalCluster while
# the command is still importing Beam and building its graph (``start_shared_local_cluster``).
from beam_dask.cluster import (LocalDaskCluster, connect, shared_local_cluster, shutdown_shared_cluster,
                               start_shared_local_cluster)

_NEEDS_BEAM = {"DaskRunner": "beam_dask.runner", "DaskRunnerOptions": "beam_dask.runner",
               "DaskPipelineResult": "beam_dask.runner", "DaskMetrics": "beam_dask.runner",
               "UnsupportedPipeline": "beam_dask.translate"}

__all__ = [*_NEEDS_BEAM, "LocalDaskCluster", "connect", "shared_local_cluster", "shutdown_shared_cluster",
           "start_shared_local_cluster", "make_dask_pipeline"]


def __getattr__(name: str):
    if name in _NEEDS_BEAM:
        import importlib

        return getattr(importlib.import_module(_NEEDS_BEAM[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_dask_pipeline(address: str | None = None, workers: int | None = None, extra_args: Sequence[str] = (),
                       partitions: int | None = None, client=None, memory_limit: str | None = None,
                       input_bytes: int = 0):
    """A pipeline on the Dask runner: on the scheduler at ``address``, or (``None``) on the process-wide
    LocalCluster of ``workers`` processes (one thread each, each limited to ``memory_limit``), started on first
    use."""
    import apache_beam as beam

    # deferred: these import Beam, which this package imports with the first name that needs it (see above)
    from beam_dask.runner import DaskRunner
    from beamio.option_views import ViewOnceOptions  # deferred: imports Beam (see above)

    options = ViewOnceOptions(list(extra_args) + ["--default_sdk_harness_log_level=WARNING"])
    return beam.Pipeline(runner=DaskRunner(address=address, client=client, workers=workers, partitions=partitions,
                                           memory_limit=memory_limit, input_bytes=input_bytes),
                         options=options)
