"""Dask workers started as Slurm batch jobs (``dask-jobqueue``), with the scheduler in this process.

``SlurmDaskCluster(SlurmJobs(...))`` submits ``jobs`` batch jobs with ``sbatch``; each runs ``processes`` Dask
worker processes (under a nanny, ``cores / processes`` threads each) that connect back to the scheduler this
process hosts; ``close()`` (or leaving the ``with`` block) cancels the jobs (``scancel``). Every worker imports
the runner's worker side as it starts (``--preload beam_dask.execute``), as a LocalCluster's do, and takes
the same memory policy (``cluster.memory_settings``: spill to disk beyond 60-70% of its share of the job's
memory; pause and terminate off).

The jobs inherit this process's environment and working directory (Slurm's defaults, ``--export=ALL``), so a
worker's ``python`` (default: this interpreter, the same virtual environment) finds the same modules; on a
cluster whose compute nodes need more (``module load``, activating an environment elsewhere), ``prologue``
lines run in the job script before the workers start.

``shared_slurm_cluster(jobs)`` is the process-wide one the runner's pipelines share (a command's stages start the
jobs once); ``shutdown_shared_slurm_cluster()`` cancels them (also at interpreter exit).
"""
from __future__ import annotations

import atexit
import dataclasses
import logging
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
import distributed

from beam_dask.cluster import memory_settings

log = logging.getLogger(__name__)

WORKER_PRELOAD = "beam_dask.execute"  # the runner's worker side, imported by each worker as it starts
_WALLTIME_DIRECTIVE = "#SBATCH -t "  # dask-jobqueue writes the walltime so (its default is 30 minutes)
QUEUE_LOOK_S = 5.0  # while waiting for the workers, how often squeue is asked whether the jobs still exist


@dataclasses.dataclass(frozen=True)
class SlurmJobs:
    """What the Slurm jobs ask for and how their workers start (``pipelines.config.SlurmConfig`` describes each
    field to users)."""

    jobs: int = 1
    cores: int = 1
    processes: int = 1
    memory: str = "4GiB"
    queue: str | None = None
    account: str | None = None
    walltime: str | None = None
    job_directives: tuple[str, ...] = ()
    prologue: tuple[str, ...] = ()
    python: str | None = None
    scheduler_host: str | None = None
    interface: str | None = None
    local_directory: str | None = None
    log_directory: str | None = None
    job_name: str = "corpusmill-dask"
    start_timeout_s: float = 600.0

    @property
    def workers(self) -> int:
        """Dask worker processes in all (one thread per core each job's processes share)."""
        return self.jobs * self.processes

    def job_kwargs(self) -> dict:
        """``dask_jobqueue.SLURMJob``'s arguments (``SLURMCluster``'s, less the scheduler's) for these jobs."""
        kwargs = dict(
            cores=self.cores, processes=self.processes, memory=self.memory, queue=self.queue, account=self.account,
            walltime=self.walltime, job_extra_directives=list(self.job_directives),
            job_script_prologue=_worker_environment(self.memory) + list(self.prologue),
            python=self.python or sys.executable, interface=self.interface, local_directory=self.local_directory,
            log_directory=self.log_directory, job_name=self.job_name, worker_extra_args=["--preload", WORKER_PRELOAD],
        )
        if self.walltime is None:  # no time limit asked: the partition's default applies, not dask-jobqueue's
            kwargs["job_directives_skip"] = [_WALLTIME_DIRECTIVE]
        return kwargs

    def scheduler_options(self) -> dict:
        # no dashboard; the scheduler's HTTP server (health, metrics) on a free loopback port, not on 8787 of
        # every interface (two commands on one host would collide there)
        return {"dashboard": False, "dashboard_address": "127.0.0.1:0",
                **({"host": self.scheduler_host} if self.scheduler_host else {})}


def _worker_environment(memory: str) -> list[str]:
    """The job script's exports that give its workers the memory policy of a LocalCluster with a limit
    (``cluster.memory_settings``): Dask reads ``DASK_*`` variables as its config."""
    exports = []
    for key, value in memory_settings(memory).items():
        name = "DASK_" + key.upper().replace(".", "__").replace("-", "_")
        exports.append(f"export {name}={str(value)}")
    return exports


class SlurmStartError(RuntimeError):
    """The Slurm jobs' workers did not all connect in time (or a job could not be submitted)."""


class SlurmDaskCluster:
    """A Dask scheduler in this process and ``jobs.jobs`` Slurm jobs of workers connected to it."""

    def __init__(self, jobs: SlurmJobs):
        # deferred: dask-jobqueue belongs to the dask extra; imported only when Slurm jobs are asked for
        from dask_jobqueue import SLURMCluster

        self.jobs = jobs
        if jobs.log_directory:
            Path(jobs.log_directory).mkdir(parents=True, exist_ok=True)
        check_submission(jobs)
        self.cluster = SLURMCluster(**jobs.job_kwargs(), scheduler_options=jobs.scheduler_options(),
                                    silence_logs=logging.WARNING)
        try:
            self.client = distributed.Client(self.cluster, set_as_default=False)
            self.cluster.scale(jobs=jobs.jobs)
        except BaseException:
            self.cluster.close()
            raise

    @property
    def address(self) -> str:
        return self.cluster.scheduler_address

    def job_ids(self) -> list[str]:
        """Slurm ids of the jobs submitted so far (and not yet cancelled)."""
        return [job.job_id for job in self.cluster.workers.values() if getattr(job, "job_id", None)]

    def wait_for_workers(self, timeout: float | None = None) -> None:
        """Until every job's workers are connected; ``SlurmStartError`` saying what Slurm says of the jobs when
        they are not within ``timeout`` (default the jobs' ``start_timeout_s``)."""
        timeout = self.jobs.start_timeout_s if timeout is None else timeout
        started = time.monotonic()
        next_queue_look = started + QUEUE_LOOK_S
        while True:
            connected = len(self.client.scheduler_info(n_workers=-1)["workers"])
            if connected >= self.jobs.workers:
                return
            now = time.monotonic()
            if now >= next_queue_look:  # a job that ended (its workers failed to start, or died) never comes back
                next_queue_look = now + QUEUE_LOOK_S
                ids = self.job_ids()
                ended = sorted(set(ids) - set(self._queued(ids))) if ids else []
                if ended:
                    raise SlurmStartError(f"runner.slurm: Slurm job(s) {', '.join(ended)} ended with {connected} of "
                                          f"{self.jobs.workers} Dask workers connected; {self._jobs_state()}")
            if now - started >= timeout:
                raise SlurmStartError(f"runner.slurm: {connected} of {self.jobs.workers} Dask workers connected "
                                      f"after {timeout:g} s; {self._jobs_state()}")
            time.sleep(0.5)

    @staticmethod
    def _queued(ids: list[str]) -> list[str]:
        """Those of the jobs ``ids`` that squeue lists (pending, running, completing); all of them when squeue
        cannot be asked (then only the timeout ends the wait)."""
        try:
            listed = subprocess.run(["squeue", "--noheader", "--jobs", ",".join(ids), "--format", "%i"],
                                    capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ids
        if listed.returncode == 0:
            return listed.stdout.split()
        # squeue exits 1 ("Invalid job id specified") when none of the jobs is known any more
        return [] if "Invalid job id" in listed.stderr else ids

    def _jobs_state(self) -> str:
        """What squeue says of the jobs (pending reasons included), and the end of their logs when they ran."""
        ids = self.job_ids()
        if not ids:
            return "no job was submitted (sbatch failed: see the log above)"
        try:
            state = subprocess.run(["squeue", "--noheader", "--jobs", ",".join(ids), "--format", "%i %T %r"],
                                   capture_output=True, text=True, timeout=30)
            if state.returncode == 0 and state.stdout.strip():
                said = "; ".join(line.strip() for line in state.stdout.strip().splitlines())
            elif state.returncode == 0 or "Invalid job id" in state.stderr:
                said = "not in the queue any more"
            else:
                said = f"squeue failed: {state.stderr.strip()}"
        except (OSError, subprocess.TimeoutExpired) as error:
            said = f"squeue could not be asked ({error})"
        tails = []
        if self.jobs.log_directory:
            for job_id in ids:
                path = Path(self.jobs.log_directory) / f"{self.jobs.job_name}-{job_id}.err"
                lines = path.read_text(errors="replace").strip().splitlines()[-3:] if path.is_file() else []
                if lines:
                    tails.append(f"{path.name}: " + " | ".join(lines))
        return f"jobs {', '.join(ids)}: {said}" + ("; " + "; ".join(tails) if tails else "")

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            self.cluster.close()  # scancel of every job it submitted

    def __enter__(self) -> "SlurmDaskCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_shared: SlurmDaskCluster | None = None
_shared_lock = threading.Lock()


def shared_slurm_cluster(jobs: SlurmJobs) -> SlurmDaskCluster:
    """The process-wide Slurm cluster of ``jobs``, its workers all connected; started (jobs submitted) on first
    use, or again when other jobs are asked for."""
    global _shared
    with _shared_lock:
        if _shared is not None and _shared.jobs != jobs:
            _shared.close()
            _shared = None
        if _shared is None:
            started = SlurmDaskCluster(jobs)
            try:
                started.wait_for_workers()
            except BaseException:
                started.close()
                raise
            _shared = started
            atexit.register(shutdown_shared_slurm_cluster)
        return _shared


def shutdown_shared_slurm_cluster() -> None:
    """Cancel the process-wide cluster's jobs, if it was started."""
    global _shared
    with _shared_lock:
        if _shared is not None:
            cluster, _shared = _shared, None
            cluster.close()


def job_script(jobs: SlurmJobs, scheduler_address: str = "tcp://SCHEDULER:8786") -> str:
    """The batch script each job runs, as ``SlurmDaskCluster`` submits it (written without a scheduler or Slurm)."""
    # deferred: dask-jobqueue belongs to the dask extra
    from dask_jobqueue.slurm import SLURMJob

    return SLURMJob(scheduler=scheduler_address, name="worker", **jobs.job_kwargs()).job_script()


def check_submission(jobs: SlurmJobs) -> None:
    """``sbatch --test-only`` of the job script: Slurm's refusal of the request (an unknown partition or account,
    more memory or cores than a node has, a time limit above the partition's) as a ``SlurmStartError`` with
    sbatch's words, before any job is submitted (dask-jobqueue submits in the background and only logs it)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", prefix="corpusmill-slurm-") as script:
        script.write(job_script(jobs))
        script.flush()
        try:
            tried = subprocess.run(["sbatch", "--test-only", script.name], capture_output=True, text=True,
                                   timeout=60)
        except FileNotFoundError:
            raise SlurmStartError("runner.slurm: sbatch is not installed here (Slurm's client commands are "
                                  "needed where corpusmill runs)") from None
        except subprocess.TimeoutExpired:
            raise SlurmStartError("runner.slurm: sbatch --test-only did not answer in 60 s (is slurmctld "
                                  "reachable?)") from None
    if tried.returncode != 0:
        said = " | ".join(line.strip() for line in tried.stderr.strip().splitlines()) or f"exit {tried.returncode}"
        raise SlurmStartError(f"runner.slurm: Slurm refuses the jobs: {said}")


def directives(script: str) -> list[str]:
    """The ``#SBATCH`` lines of a job script."""
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]
