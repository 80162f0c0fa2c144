"""Building a Beam pipeline for the configured runner, without Beam's online-only defaults or its log noise.

The local runner starts its worker processes with ``worker_command()`` (``python -m beamio.worker``), so that
they behave like part of one command (see ``beamio.worker``); what is logged, here and there, is
``beamio.logs``.
"""
from __future__ import annotations

import logging
import os
import shlex
import sys
from typing import Sequence

import apache_beam as beam
from apache_beam.transforms.environments import SubprocessSDKEnvironment

from beamio.local_runner import LocalRunner
from beamio.logs import verbose
from beamio.option_views import ViewOnceOptions

LOCAL_RUNNERS = ("direct", "inprocess")
_WORKER_MODULE = "beamio.worker"
_MISLEADING_WARNING = "If direct_num_workers is not equal to 1"
# The Dask runner (package ``beam_dask``, a floor above this one) named to Beam by its class path, as Beam names
# any runner it does not bundle: Beam imports it when the pipeline is built, and it reads its settings from its
# own options (``beam_dask.runner.DaskRunnerOptions``).
DASK_RUNNER = "beam_dask.DaskRunner"


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def worker_command() -> str:
    """The shell command the local runner starts each worker with. ``trap '' INT`` makes the worker inherit an
    ignored SIGINT (Python then installs no KeyboardInterrupt handler at all, not even during its start), and
    ``exec`` makes the worker a direct child of the launching process."""
    return f"trap '' INT; exec {shlex.quote(sys.executable)} -m {_WORKER_MODULE}"


def make_pipeline(runner: str = "direct", workers: int | None = None, extra_args: Sequence[str] = (),
                  dask_address: str | None = None, worker_memory: str | None = None, input_bytes: int = 0,
                  partitions: int | None = None):
    """A pipeline on the local FnApiRunner (``direct``: one process per worker; ``inprocess``: threads in
    this process, for tests and debugging), on dask.distributed (``dask``: the project's own runner in
    ``beam_dask``, on the scheduler at ``dask_address`` or on a LocalCluster of ``workers`` processes, each
    limited to ``worker_memory``; these go to it as its own options, named by ``DASK_RUNNER``), or on
    any other Beam runner by name (``flink``, ``spark``, ``dataflow``) with its options passed through in
    ``extra_args``.

    The FnApiRunner is passed explicitly because Beam's default DirectRunner first tries the Prism runner,
    which downloads a binary from GitHub; it is ``local_runner.LocalRunner``, which streams each stage's input to
    its worker processes in bounded messages (Beam's sends a worker its whole share at once). Its worker processes are started with ``worker_command()`` (Beam's
    own ``multi_processing`` mode starts them with a command of its own, which prints a traceback per worker on
    Ctrl-C and logs at INFO level).
    """
    args = list(extra_args)
    if runner == "dask":
        # input_bytes: the shuffles' partition count grows with the input, unless `partitions` sets it (dask only;
        # the FnApiRunner splits by workers). Given here, a setting wins over the same option in extra_args (the
        # last of a repeated option counts).
        settings = {"dask_address": dask_address, "dask_workers": workers, "dask_worker_memory": worker_memory,
                    "dask_partitions": partitions, "dask_input_bytes": input_bytes or None}
        options = ViewOnceOptions(args + ["--default_sdk_harness_log_level=WARNING", f"--runner={DASK_RUNNER}"]
                                  + [f"--{name}={value}" for name, value in settings.items() if value is not None])
        try:
            return beam.Pipeline(options=options)
        except ImportError as err:  # the [dask] extra is not installed (Beam imports the runner here)
            raise RuntimeError(f"runner.name: dask needs dask.distributed ({err.name} is missing): "
                               f"pip install 'corpusmill[dask]'") from None
    if runner in LOCAL_RUNNERS:
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
    logger = logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner")
    if not any(getattr(f, "_corpusmill", False) for f in logger.filters):
        def drop(record: logging.LogRecord) -> bool:
            return not str(record.msg).startswith(_MISLEADING_WARNING)

        drop._corpusmill = True  # type: ignore[attr-defined]
        logger.addFilter(drop)
