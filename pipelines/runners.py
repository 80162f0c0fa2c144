"""What the composing floor knows about every runner at once, the local ones (``beamio``) and the Dask runner
(``beam_dask``) alike: how many workers will share a pipeline's shuffles, and which leftover command-line
arguments no runner's options know. The ``dask`` extra is optional, so ``beam_dask`` is imported where it is
asked about, and its absence is an answer ("unknown"), not an error.
"""
from __future__ import annotations

from typing import Sequence

from apache_beam.options import pipeline_options

from beamio.beam_options import LOCAL_RUNNERS, default_workers


def shuffle_workers(runner: str = "direct", workers: int | None = None, dask_address: str | None = None) -> int | None:
    """How many workers will share a pipeline's shuffles on ``runner``, when this process can know it before the
    graph is built (a step that keys its own partitions makes as many per worker: near-dedup): the local
    runner's processes, a LocalCluster's workers (one thread each), a running Dask scheduler's worker threads
    now. None for a runner this project does not start (Flink, Spark, Dataflow) or a scheduler it cannot ask."""
    if runner == "dask":
        try:
            # deferred: dask.distributed is an optional extra, imported only for runner dask
            from beam_dask.cluster import DEFAULT_LOCAL_WORKERS, cluster_threads
        except ImportError:  # the dask extra is missing: building the pipeline says so
            return None
        return cluster_threads(dask_address) if dask_address else workers or DEFAULT_LOCAL_WORKERS
    if runner in LOCAL_RUNNERS:
        return workers or default_workers()
    return None


def unrecognized_pipeline_args(args: Sequence[str]) -> list[str]:
    """Those of ``args`` (what a command's own options left) that no Beam pipeline option knows, as Beam's own
    parser reads them: a misspelt corpusmill option (``--sett``, ``--overwirte``) or a stray word, which Beam
    would only log as unparseable and drop."""
    try:
        # deferred: dask.distributed is an optional extra; importing the runner registers its options
        import beam_dask.runner  # noqa: F401  (its options, --dask_partitions and the rest, are Beam options too)
    except ImportError:  # the dask extra is missing: its options are unknown here as they are to the runner
        pass
    parser = pipeline_options._BeamArgumentParser(allow_abbrev=False)
    for options_class in {str(c): c for c in pipeline_options.PipelineOptions.__subclasses__()}.values():
        options_class._add_argparse_args(parser)  # how PipelineOptions.get_all_options builds its parser
    _, unknown = parser.parse_known_args(list(args))
    return unknown
