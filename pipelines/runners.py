"""What the composing floor knows about every runner at once, the local ones (``beamio``) and the Dask runner
(``beam_dask``) alike: how many workers will share a pipeline's shuffles, and which leftover command-line
arguments no runner's options know. The ``dask`` extra is optional, so ``beam_dask`` is imported where it is
asked about, and its absence is an answer ("unknown"), not an error.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

from apache_beam.options import pipeline_options

from beamio.beam_options import LOCAL_RUNNERS, default_workers
from beamio.config_base import ConfigError
from runio.files import is_uri


def shuffle_workers(runner: str = "direct", workers: int | None = None, dask_address: str | None = None,
                    slurm=None) -> int | None:
    """How many workers will share a pipeline's shuffles on ``runner``, when this process can know it before the
    graph is built (a step that keys its own partitions makes as many per worker: near-dedup): the local
    runner's processes, a LocalCluster's workers (one thread each), the worker threads the Slurm jobs of
    ``slurm`` (a ``pipelines.config.SlurmConfig``) will run, a running Dask scheduler's worker threads now.
    None for a runner this project does not start (Flink, Spark, Dataflow) or a scheduler it cannot ask."""
    if runner == "dask" and slurm is not None:
        return slurm.jobs * slurm.processes * (slurm.cores // slurm.processes)
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


def slurm_jobs(slurm, run_dir: str):
    """``beam_dask.slurm.SlurmJobs`` of a run config's ``runner.slurm`` (a ``pipelines.config.SlurmConfig``): the
    jobs' logs go to the run directory's ``logs/slurm/`` unless the config names a folder."""
    # deferred: dask-jobqueue is in the optional dask extra, imported only for runner.slurm
    from beam_dask.slurm import SlurmJobs

    log_directory = slurm.log_directory or (None if is_uri(run_dir) else str(Path(run_dir) / "logs" / "slurm"))
    return SlurmJobs(jobs=slurm.jobs, cores=slurm.cores, processes=slurm.processes, memory=slurm.memory.strip(),
                     queue=slurm.queue, account=slurm.account, walltime=slurm.walltime,
                     job_directives=tuple(slurm.job_directives), prologue=tuple(slurm.prologue), python=slurm.python,
                     scheduler_host=slurm.scheduler_host, interface=slurm.interface,
                     local_directory=slurm.local_directory, log_directory=log_directory,
                     start_timeout_s=slurm.start_timeout_s)


def dask_scheduler(runner, run_dir: str, log: Callable[[str], None] = print) -> str | None:
    """The scheduler address a pipeline of ``runner`` (a ``pipelines.config.RunnerConfig``) runs on: with
    ``runner.slurm``, that of the process-wide Slurm cluster, whose jobs are submitted (and waited for) on first
    use and shared by the command's later stages; otherwise ``runner.dask_address`` (None: a LocalCluster)."""
    if runner.name != "dask" or runner.slurm is None:
        return runner.dask_address
    try:
        # deferred: dask-jobqueue is in the optional dask extra, imported only for runner.slurm
        from beam_dask.slurm import SlurmStartError, shared_slurm_cluster
    except ImportError as err:
        raise ConfigError(f"runner.slurm needs dask-jobqueue and dask.distributed ({err.name} is missing): "
                          f"pip install 'corpusmill[dask]'") from None
    jobs = slurm_jobs(runner.slurm, run_dir)
    started = time.monotonic()
    try:
        cluster = shared_slurm_cluster(jobs)
    except SlurmStartError as err:
        raise SlurmUnavailable(str(err)) from None
    except (OSError, RuntimeError) as err:  # sbatch missing or refusing (dask-jobqueue raises RuntimeError)
        raise SlurmUnavailable(f"runner.slurm: the jobs could not be submitted: {err}") from None
    if time.monotonic() - started > 0.5:  # (a second stage reuses the jobs: nothing to say)
        log(f"runner.slurm: {jobs.workers} Dask workers in {jobs.jobs} Slurm jobs ({', '.join(cluster.job_ids())}) "
            f"connected in {time.monotonic() - started:.1f} s")
    return cluster.address


def release_slurm_jobs() -> None:
    """Cancel the Slurm jobs ``dask_scheduler`` started, if any (the data stages are over)."""
    try:
        # deferred: dask-jobqueue is in the optional dask extra
        from beam_dask.slurm import shutdown_shared_slurm_cluster
    except ImportError:  # no extra, so no jobs were started
        return
    shutdown_shared_slurm_cluster()


class SlurmUnavailable(RuntimeError):
    """The Slurm jobs of ``runner.slurm`` could not be started or their workers did not connect in time."""


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
