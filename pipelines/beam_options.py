"""Building a Beam pipeline for the configured runner, without Beam's online-only defaults."""
from __future__ import annotations

import os
from typing import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

LOCAL_RUNNERS = ("direct", "inprocess")


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def make_pipeline(runner: str = "direct", workers: int | None = None, extra_args: Sequence[str] = ()) -> beam.Pipeline:
    """A pipeline on the local FnApiRunner (``direct``: one process per worker; ``inprocess``: threads in
    this process, for tests and debugging) or on any other Beam runner by name (``flink``, ``spark``,
    ``dataflow``) with its options passed through in ``extra_args``.

    The FnApiRunner is passed explicitly because Beam's default DirectRunner first tries the Prism runner,
    which downloads a binary from GitHub.
    """
    args = list(extra_args)
    if runner in LOCAL_RUNNERS:
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        workers = workers or default_workers()
        mode = "multi_processing" if runner == "direct" and workers > 1 else "in_memory"
        options = PipelineOptions(args + [f"--direct_num_workers={workers}", f"--direct_running_mode={mode}",
                                          "--default_sdk_harness_log_level=WARNING"])
        return beam.Pipeline(runner=FnApiRunner(), options=options)
    runner_names = {"flink": "FlinkRunner", "spark": "SparkRunner", "dataflow": "DataflowRunner"}
    options = PipelineOptions(args + [f"--runner={runner_names.get(runner, runner)}"])
    return beam.Pipeline(options=options)
