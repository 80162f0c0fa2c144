"""Building a Beam pipeline for the configured runner, without Beam's online-only defaults or its log noise.

The local runner starts its worker processes through this module (``python -m pipelines.beam_options``), so that
they behave like part of one command: Ctrl-C (SIGINT to the whole process group) is left to the launching process
(it stops the run and says so in one line; workers never print a KeyboardInterrupt traceback each), a worker whose
launcher is gone exits at once, and Beam's own INFO/WARNING lines stay out of the terminal unless the command runs
with ``-v`` (``VERBOSE_ENV``). Errors are always shown.
"""
from __future__ import annotations

import os
import shlex
import sys
from typing import Sequence

from runio.heap import numpy_friendly_heap

LOCAL_RUNNERS = ("direct", "inprocess")
VERBOSE_ENV = "CORPUSMILL_VERBOSE"  # "1": Beam's INFO lines too, in this process and in every worker
_WORKER_MODULE = "pipelines.beam_options"
_MISLEADING_WARNING = "If direct_num_workers is not equal to 1"
# A GroupByKey applied under ``transform_annotations(shuffle_partitions="N")`` promises that its keys are the ints
# 0..N-1, each naming a partition already (near-dedup's blocks). The Dask runner then groups it into exactly N
# partitions, key k into partition k (beam_dask/translate.py); other runners hash the keys as usual.
SHUFFLE_PARTITIONS = "shuffle_partitions"


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV) == "1"


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def shuffle_workers(runner: str = "direct", workers: int | None = None, dask_address: str | None = None) -> int | None:
    """How many workers will share a pipeline's shuffles on ``runner``, when this process can know it before the
    graph is built (a step that keys its own partitions makes as many per worker: near-dedup): the local
    runner's processes, a LocalCluster's workers (one thread each), a running Dask scheduler's worker threads
    now. None for a runner this project does not start (Flink, Spark, Dataflow) or a scheduler it cannot ask."""
    if runner == "dask":
        try:
            from beam_dask.cluster import DEFAULT_LOCAL_WORKERS, cluster_threads
        except ImportError:  # the dask extra is missing: building the pipeline says so
            return None
        return cluster_threads(dask_address) if dask_address else workers or DEFAULT_LOCAL_WORKERS
    if runner in LOCAL_RUNNERS:
        return workers or default_workers()
    return None


def worker_command() -> str:
    """The shell command the local runner starts each worker with. ``trap '' INT`` makes the worker inherit an
    ignored SIGINT (Python then installs no KeyboardInterrupt handler at all, not even during its start), and
    ``exec`` makes the worker a direct child of the launching process."""
    return f"trap '' INT; exec {shlex.quote(sys.executable)} -m {_WORKER_MODULE}"


def unrecognized_pipeline_args(args: Sequence[str]) -> list[str]:
    """Those of ``args`` (what a command's own options left) that no Beam pipeline option knows, as Beam's own
    parser reads them: a misspelt corpusmill option (``--sett``, ``--overwirte``) or a stray word, which Beam
    would only log as unparseable and drop."""
    from apache_beam.options import pipeline_options

    try:
        import beam_dask.runner  # noqa: F401  (its options, --dask_partitions and the rest, are Beam options too)
    except ImportError:  # the dask extra is missing: its options are unknown here as they are to the runner
        pass
    parser = pipeline_options._BeamArgumentParser(allow_abbrev=False)
    for options_class in {str(c): c for c in pipeline_options.PipelineOptions.__subclasses__()}.values():
        options_class._add_argparse_args(parser)  # how PipelineOptions.get_all_options builds its parser
    _, unknown = parser.parse_known_args(list(args))
    return unknown


def make_pipeline(runner: str = "direct", workers: int | None = None, extra_args: Sequence[str] = (),
                  dask_address: str | None = None, worker_memory: str | None = None, input_bytes: int = 0,
                  partitions: int | None = None):
    """A pipeline on the local FnApiRunner (``direct``: one process per worker; ``inprocess``: threads in
    this process, for tests and debugging), on dask.distributed (``dask``: the project's own runner in
    ``beam_dask``, on the scheduler at ``dask_address`` or on a LocalCluster of ``workers`` processes), or on
    any other Beam runner by name (``flink``, ``spark``, ``dataflow``) with its options passed through in
    ``extra_args``.

    The FnApiRunner is passed explicitly because Beam's default DirectRunner first tries the Prism runner,
    which downloads a binary from GitHub; it is ``local_runner.LocalRunner``, which streams each stage's input to
    its worker processes in bounded messages (Beam's sends a worker its whole share at once). Its worker processes are started with ``worker_command()`` (Beam's
    own ``multi_processing`` mode starts them with a command of its own, which prints a traceback per worker on
    Ctrl-C and logs at INFO level).
    """
    import apache_beam as beam

    from pipelines.option_views import ViewOnceOptions

    args = list(extra_args)
    if runner == "dask":
        try:
            from beam_dask import make_dask_pipeline
        except ImportError as err:  # the [dask] extra is not installed
            raise RuntimeError(f"runner.name: dask needs dask.distributed ({err.name} is missing): "
                               f"pip install 'corpusmill[dask]'") from None
        # input_bytes: the shuffles' partition count grows with the input, unless `partitions` sets it (dask only;
        # the FnApiRunner splits by workers)
        return make_dask_pipeline(dask_address, workers, args, memory_limit=worker_memory, input_bytes=input_bytes,
                                  partitions=partitions)
    if runner in LOCAL_RUNNERS:
        from apache_beam.transforms.environments import SubprocessSDKEnvironment

        from pipelines.local_runner import LocalRunner

        workers = workers or default_workers()
        level = "INFO" if verbose() else "WARNING"
        options = ViewOnceOptions(args + [f"--direct_num_workers={workers}", "--direct_running_mode=in_memory",
                                          f"--default_sdk_harness_log_level={level}"])
        if runner == "direct" and workers > 1:
            _hide_misleading_warning()
            environment = SubprocessSDKEnvironment.from_command_string(command_string=worker_command())
            return beam.Pipeline(runner=LocalRunner(default_environment=environment), options=options)
        return beam.Pipeline(runner=LocalRunner(), options=options)
    runner_names = {"flink": "FlinkRunner", "spark": "SparkRunner", "dataflow": "DataflowRunner"}
    options = ViewOnceOptions(args + [f"--runner={runner_names.get(runner, runner)}"])
    return beam.Pipeline(options=options)


def _hide_misleading_warning() -> None:
    """The FnApiRunner warns that ``in_memory`` with several workers runs one worker; with our subprocess
    environment it runs them all (the environment decides), so the warning is wrong here."""
    import logging

    logger = logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner")
    if not any(getattr(f, "_corpusmill", False) for f in logger.filters):
        def drop(record: logging.LogRecord) -> bool:
            return not str(record.msg).startswith(_MISLEADING_WARNING)

        drop._corpusmill = True  # type: ignore[attr-defined]
        logger.addFilter(drop)


QUIET_LOGGERS = ("apache_beam", "presidio-analyzer", "presidio-anonymizer", "tldextract", "urllib3")


def quiet_logging(loud: bool | None = None) -> None:
    """This process's logging as corpusmill wants it: our own warnings and every library's errors are shown;
    Beam's INFO/WARNING lines (and those of the few chatty libraries in ``QUIET_LOGGERS``) only with
    ``loud`` (default: ``verbose()``). Beam reports a worker's failure to the launcher, which says it in one
    line, so Beam's own error lines are not repeated either unless ``loud``."""
    import logging

    loud = verbose() if loud is None else loud
    level = logging.INFO if loud else logging.WARNING
    root = logging.getLogger()
    if not root.handlers:  # (under a test runner, its capturing handlers stay as they are)
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler.setLevel(level)  # the Beam harness lowers the root logger's level to INFO in workers
        root.addHandler(handler)
        root.setLevel(level)
    for handler in root.handlers:
        if not any(getattr(f, "_corpusmill", False) for f in handler.filters):
            def drop(record: logging.LogRecord) -> bool:
                # Beam warns at import that optional GCP clients are missing; irrelevant unless gs:// is used.
                return not str(record.msg).startswith("apitools not found")

            drop._corpusmill = True  # type: ignore[attr-defined]
            handler.addFilter(drop)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if loud else logging.CRITICAL)


def _worker_main() -> None:
    """A local Beam worker: Beam's SDK harness, quiet, ignoring SIGINT, and gone when its launcher is."""
    import signal
    import threading
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_logging()
    numpy_friendly_heap()
    parent = os.getppid()

    def leave_with_parent() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:  # the launcher died or was interrupted: nobody waits for our results
                os._exit(0)

    threading.Thread(target=leave_with_parent, name="corpusmill-parent-watch", daemon=True).start()
    from apache_beam.runners.worker import sdk_worker_main

    # The harness sets the root logger's level from the pipeline options (INFO when none reach it, as with the
    # local runner); the levels of the loggers above stay as set here.
    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    _worker_main()
