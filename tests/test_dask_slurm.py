"""runner.slurm without a Slurm: the config is checked at the edge (errors name the field) and becomes the batch
script dask-jobqueue submits. The runs on a real single-node Slurm are in tests/test_dask_prepare.py."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from beam_dask.slurm import SlurmJobs, directives, job_script
from pipelines.config import ConfigError, RunnerConfig, load_config
from pipelines.runners import shuffle_workers, slurm_jobs

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "configs" / "demo.yaml"


def slurm_config(*overrides: str):
    return load_config(DEMO, ["runner.name=dask", *overrides])


def test_the_config_becomes_the_job_script():
    cfg = slurm_config("runner.slurm.jobs=3", "runner.slurm.cores=4", "runner.slurm.processes=2",
                       "runner.slurm.memory=16GiB", "runner.slurm.queue=cpu", "runner.slurm.account=lab42",
                       "runner.slurm.walltime=1-02:00:00", "runner.slurm.job_directives=[--qos=high, --exclusive]",
                       "runner.slurm.prologue=[module load python/3.11, echo ready]")
    jobs = slurm_jobs(cfg.runner.slurm, "/shared/runs/demo")
    assert jobs.log_directory == "/shared/runs/demo/logs/slurm" and jobs.workers == 6
    script = job_script(jobs, "tcp://10.0.0.5:8786")
    assert directives(script) == [
        "#SBATCH -J corpusmill-dask", "#SBATCH -e /shared/runs/demo/logs/slurm/corpusmill-dask-%J.err",
        "#SBATCH -o /shared/runs/demo/logs/slurm/corpusmill-dask-%J.out", "#SBATCH -p cpu", "#SBATCH -A lab42",
        "#SBATCH -n 1", "#SBATCH --cpus-per-task=4", "#SBATCH --mem=16G", "#SBATCH -t 1-02:00:00",
        "#SBATCH --qos=high", "#SBATCH --exclusive"]
    lines = script.splitlines()
    # the memory policy of a LocalCluster with a limit, then the user's prologue, then the workers
    body = [line for line in lines if line and not line.startswith("#")]
    assert body[:4] == ["export DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE=False",
                        "export DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE=False",
                        "module load python/3.11", "echo ready"]
    worker = body[4].split()
    assert worker[:4] == [sys.executable, "-m", "distributed.cli.dask_worker", "tcp://10.0.0.5:8786"]
    options = " ".join(worker[4:])
    for expected in ("--nthreads 2", "--nworkers 2", "--memory-limit 8.00GiB", "--nanny",
                     "--preload beam_dask.execute"):
        assert expected in options, options
    # near-dedup's partitions are made for the workers' threads the jobs will run
    assert shuffle_workers("dask", slurm=cfg.runner.slurm) == 12


def test_no_walltime_leaves_the_partitions_limit_and_a_folder_of_logs_can_be_named():
    cfg = slurm_config("runner.slurm.log_directory=/scratch/logs", "runner.slurm.python=/opt/venv/bin/python")
    jobs = slurm_jobs(cfg.runner.slurm, "gs://bucket/runs/demo")
    script = job_script(jobs)
    assert not [line for line in directives(script) if line.startswith("#SBATCH -t")], script
    assert "#SBATCH -o /scratch/logs/corpusmill-dask-%J.out" in directives(script)
    assert "/opt/venv/bin/python -m distributed.cli.dask_worker" in script
    # a run directory on an object store cannot hold the jobs' logs: Slurm's default place then
    uri_jobs = slurm_jobs(slurm_config("runner.slurm.jobs=1").runner.slurm, "gs://bucket/runs/demo")
    assert uri_jobs.log_directory is None and not [d for d in directives(job_script(uri_jobs)) if " -o " in d]


@pytest.mark.parametrize("overrides, message", [
    (["runner.name=direct", "runner.slurm.jobs=2"], "runner: slurm is set but name is 'direct'"),
    (["runner.slurm.jobs=2", "runner.dask_address=tcp://h:8786"], "dask_address cannot be set with it"),
    (["runner.slurm.jobs=2", "runner.worker_memory=2GiB"], "worker_memory"),
    (["runner.slurm.jobs=2", "runner.workers=4"], "workers cannot be set with it"),
    (["runner.slurm.jobs=0"], "runner.slurm.jobs: Input should be greater than or equal to 1"),
    (["runner.slurm.cores=1", "runner.slurm.processes=2"], "runner.slurm: processes (2) exceed cores (1)"),
    (["runner.slurm.walltime=2 hours"], "runner.slurm.walltime: String should match pattern"),
    (["runner.slurm.memory=lots"], "runner.slurm.memory: String should match pattern"),
    (["runner.slurm.job_directives=[qos=high]"], "runner.slurm.job_directives: 'qos=high' is not an sbatch option"),
    (["runner.slurm.partition=cpu"], "runner.slurm.partition: unknown key"),
])
def test_a_slurm_setting_that_cannot_work_is_refused_naming_the_field(overrides, message):
    with pytest.raises(ConfigError) as refused:
        slurm_config(*overrides)
    assert message in str(refused.value), str(refused.value)


def test_defaults_are_one_job_of_one_worker():
    jobs = SlurmJobs()
    assert jobs.workers == 1
    slurm = RunnerConfig(name="dask", slurm={}).slurm
    assert (slurm.jobs, slurm.cores, slurm.processes, slurm.memory, slurm.walltime) == (1, 1, 1, "4GiB", None)
