"""Where the Dask cluster comes from: an address of a running scheduler, or a LocalCluster started here.

- ``connect(address)``: a ``distributed.Client`` to a scheduler started elsewhere (``dask scheduler`` +
  ``dask worker`` on several machines; every worker needs the same Python environment as the client).
- ``LocalDaskCluster(workers)``: a ``distributed.LocalCluster`` of ``workers`` processes with one thread each,
  every worker under a nanny (a worker process that dies is restarted and its tasks rescheduled). Use it as
  a context manager around a command so that all of the command's pipelines share one cluster.
- ``shared_local_cluster(workers)``: the process-wide LocalCluster used when a pipeline names no address and
  no cluster is open; started on first use (or ahead of it, in the background, by
  ``start_shared_local_cluster``), closed at interpreter exit or by ``shutdown_shared_cluster()``.
"""
from __future__ import annotations

import atexit
import logging
import threading

import dask
import distributed

from beamio.config_base import ConfigError

DEFAULT_LOCAL_WORKERS = 2  # worker processes of the shared LocalCluster when none are asked for
_shared: "LocalDaskCluster | None" = None
_shared_lock = threading.Lock()


def connect(address: str, timeout: float | str | None = "30s") -> distributed.Client:
    """A client of the scheduler at ``address`` (``tcp://host:port`` or ``host:port``)."""
    if "://" not in address:
        address = f"tcp://{address}"
    try:
        return distributed.Client(address, timeout=timeout, set_as_default=False)
    except OSError as err:  # no scheduler there: said as the setting it is, not as the CancelledError it ends in
        raise ConfigError(f"--dask-address {address}: no dask scheduler answered ({err})") from None


def cluster_threads(address: str, timeout: float | str = "10s") -> int | None:
    """How many worker threads the scheduler at ``address`` has now, or None when it cannot be asked (the
    runner's own connection then says why) or has no workers yet."""
    try:
        client = connect(address, timeout=timeout)
    except (ConfigError, OSError, TimeoutError):
        return None
    try:
        return sum(client.nthreads().values()) or None
    finally:
        client.close()


def memory_settings(memory_limit: str | int | None) -> dict:
    """Dask's worker memory thresholds for a LocalCluster with an explicit ``memory_limit``: task results (the
    shuffle data a worker holds) spill to disk beyond 60% of the limit and when the process passes 70% (Dask's
    own ``target`` and ``spill``, left as they are); ``pause`` and ``terminate`` are off, because a worker's own models (spaCy,
    fastText, the quality models: about 1 GB) are memory Dask cannot spill: pausing would stall the run, and
    a terminated worker's tasks would be retried into the same limit until the run failed. With no explicit
    limit, Dask's defaults."""
    if memory_limit is None:
        return {}
    return {"distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False}


class LocalDaskCluster:
    """A LocalCluster of worker processes (1 thread each by default) on this machine, and a client of it."""

    def __init__(self, workers: int = 2, threads_per_worker: int = 1, memory_limit: str | int | None = None,
                 silence_logs: int = logging.WARNING):
        self.workers, self.memory_limit = workers, memory_limit
        # Dask's MALLOC_TRIM_THRESHOLD_=65536 for the workers is kept on purpose. Unsetting it made the near-dedup
        # sketching 2.4x cheaper (glibc's dynamic mmap threshold back on), but the whole `prepare` at 16x cost
        # +14-34% CPU (two interleaved A/B pairs, benchmarks/RESULTS.md "Scale").
        with dask.config.set(memory_settings(memory_limit)):  # the nannies hand this config to their workers
            # preload: each worker imports the runner's worker side (and Beam with it) as it starts, not in
            # its first task
            self.cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=threads_per_worker,
                                                    processes=True, host="127.0.0.1", dashboard_address=None,
                                                    memory_limit=memory_limit or "auto", silence_logs=silence_logs,
                                                    preload=["beam_dask.execute"])
        self.client = distributed.Client(self.cluster, set_as_default=False)

    @property
    def address(self) -> str:
        return self.cluster.scheduler_address

    def worker_pids(self) -> dict[str, int]:
        """Worker address -> pid of the worker process (not its nanny)."""
        import os

        return dict(self.client.run(os.getpid))

    def wait_for_workers(self, n: int | None = None, timeout: float = 120) -> None:
        self.client.wait_for_workers(n or self.workers, timeout=timeout)

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            self.cluster.close()

    def __enter__(self) -> "LocalDaskCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def start_shared_local_cluster(workers: int | None = None, memory_limit: str | int | None = None) -> None:
    """Start the process-wide LocalCluster in the background: its worker processes start (and import the
    runner's worker side) while this process imports Beam and builds its graph; ``shared_local_cluster`` then
    waits for it. A start that fails here is tried again, and reported, by that call."""
    def start() -> None:
        try:
            shared_local_cluster(workers, memory_limit)
        except Exception:  # noqa: BLE001 (the synchronous call raises it again, where it can be reported)
            pass

    threading.Thread(target=start, name="corpusmill-dask-start", daemon=True).start()


def shared_local_cluster(workers: int | None = None, memory_limit: str | int | None = None) -> LocalDaskCluster:
    """The process-wide LocalCluster (``workers`` processes, ``DEFAULT_LOCAL_WORKERS`` when not given; each
    limited to ``memory_limit``), started on first use; restarted when asked for other workers or another limit."""
    global _shared
    with _shared_lock:
        if _shared is not None and ((workers is not None and workers != _shared.workers)
                                    or memory_limit != _shared.memory_limit):
            _shared.close()
            _shared = None
        if _shared is None:
            _shared = LocalDaskCluster(workers or DEFAULT_LOCAL_WORKERS, memory_limit=memory_limit)
            atexit.register(shutdown_shared_cluster)
        return _shared


def shutdown_shared_cluster() -> None:
    global _shared
    with _shared_lock:
        if _shared is not None:
            cluster, _shared = _shared, None
            cluster.close()
